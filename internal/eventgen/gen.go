// Package eventgen makes synthetic valid AEP events of either dialect,
// deterministic for a seed: aepctl gen prints them, aepbench loads gateways
// with them. A Generator is owned by one goroutine.
package eventgen

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aep-gateway/aep-gateway/aep"
)

// GenOptions configure a Generator. Zero values mean the defaults.
type GenOptions struct {
	// Dialect of the events; DialectUnknown means R.
	Dialect aep.Dialect
	// Sessions is how many sessions the events are spread over, round robin;
	// zero means 10.
	Sessions int
	// Size pads each event with a data/payload string so that it is about
	// Size bytes; zero or less than the bare event means no padding.
	Size int
	// Seed seeds the ULID entropy; zero means a random seed. Two generators
	// with the same non-zero Seed and Start produce the same bytes.
	Seed uint64
	// Start is the time of the first event (ULID time and event time);
	// each event is 1µs after the one before. Zero means now.
	Start time.Time
}

// Generator makes valid synthetic events: ULID ids, R events with a
// per-session seq from 0 and epoch 0 (the first of a session is
// session.started, the rest progress.update), D events of type
// task.progress. Not safe for concurrent use.
type Generator struct {
	opt     GenOptions
	entropy *ulid.MonotonicEntropy
	n       int64
	seq     []int64
	names   []string
	sources []string // R: each session's source; D: each session's task id
	last    struct { // the event Next returned last, for Attrs
		id  ulid.ULID
		s   int
		seq int64
	}
}

// NewGenerator returns a Generator for o.
func NewGenerator(o GenOptions) *Generator {
	if o.Dialect == aep.DialectUnknown {
		o.Dialect = aep.DialectR
	}
	if o.Sessions <= 0 {
		o.Sessions = 10
	}
	if o.Start.IsZero() {
		o.Start = time.Now()
	}
	o.Start = o.Start.UTC()
	for o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	g := &Generator{
		opt:     o,
		entropy: ulid.Monotonic(rand.NewChaCha8(seed32(o.Seed)), 0),
		seq:     make([]int64, o.Sessions),
		names:   make([]string, o.Sessions),
	}
	g.sources = make([]string, o.Sessions)
	for i := range g.names {
		g.names[i] = fmt.Sprintf("s_%06d", i)
		if o.Dialect == aep.DialectD {
			g.sources[i] = "task_" + g.names[i]
		} else {
			g.sources[i] = "aep://aepctl/gen/session/" + g.names[i]
		}
	}
	return g
}

func seed32(s uint64) [32]byte {
	var b [32]byte
	for i := range 4 {
		v := s ^ uint64(i)*0x9e3779b97f4a7c15
		for j := range 8 {
			b[i*8+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// Next appends the next event (one JSON object, no newline) to dst and
// returns the extended slice, like append, with the event's session (the
// Kafka key the gateway would use).
func (g *Generator) Next(dst []byte) ([]byte, string) {
	i := g.n
	g.n++
	s := int(i % int64(len(g.seq)))
	seq := g.seq[s]
	g.seq[s]++
	t := g.opt.Start.Add(time.Duration(i) * time.Microsecond)
	id, err := ulid.New(ulid.Timestamp(t), g.entropy)
	if err != nil { // monotonic entropy exhausted within one ms: start afresh
		g.entropy = ulid.Monotonic(rand.NewChaCha8(seed32(g.opt.Seed+uint64(i))), 0)
		id = ulid.MustNew(ulid.Timestamp(t), g.entropy)
	}
	g.last.id, g.last.s, g.last.seq = id, s, seq
	start := len(dst)
	if g.opt.Dialect == aep.DialectD {
		dst = g.appendD(dst, id, t, s, i, seq)
	} else {
		dst = g.appendR(dst, id, t, s, i, seq)
	}
	// Both shapes end in `"pad":""}}`: pad by cutting the last `"}}`,
	// appending the padding and putting it back.
	if pad := g.opt.Size - (len(dst) - start); pad > 0 {
		dst = dst[:len(dst)-3]
		for range pad {
			dst = append(dst, 'x')
		}
		dst = append(dst, `"}}`...)
	}
	return dst, g.names[s]
}

// Attrs returns the routing attributes of the event Next returned last, as
// the gateway's parser reads them (a test holds the two equal), built from
// what the generator knows instead of by parsing: a baseline that writes the
// gateway's record format pays a producer's cost for its headers, no more.
func (g *Generator) Attrs() aep.Attrs {
	name := g.names[g.last.s]
	if g.opt.Dialect == aep.DialectD {
		return aep.Attrs{Dialect: aep.DialectD, ID: g.last.id.String(), Type: "task.progress", Source: "agent:aepctl",
			Session: name, Task: g.sources[g.last.s]}
	}
	return aep.Attrs{Dialect: aep.DialectR, ID: g.last.id.String(), Type: rType(g.last.seq), Source: g.sources[g.last.s],
		Agent: "aepctl", Session: name, HasEpoch: true, Seq: g.last.seq, HasSeq: true}
}

// rType is the type of a generated R event: each session starts, then
// reports progress.
func rType(seq int64) string {
	if seq == 0 {
		return "session.started"
	}
	return "progress.update"
}

func (g *Generator) appendR(dst []byte, id ulid.ULID, t time.Time, s int, i, seq int64) []byte {
	dst = append(dst, `{"aep":"0.1","id":"`...)
	dst = appendULID(dst, id)
	dst = append(dst, `","type":"`...)
	dst = append(dst, rType(seq)...)
	dst = append(dst, `","time":"`...)
	dst = t.AppendFormat(dst, "2006-01-02T15:04:05.000000Z07:00")
	dst = append(dst, `","source":"`...)
	dst = append(dst, g.sources[s]...)
	dst = append(dst, `","agent":"aepctl","session":"`...)
	dst = append(dst, g.names[s]...)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, `,"epoch":0,"data":{"n":`...)
	dst = strconv.AppendInt(dst, i, 10)
	return append(dst, `,"pad":""}}`...)
}

func (g *Generator) appendD(dst []byte, id ulid.ULID, t time.Time, s int, i, seq int64) []byte {
	dst = append(dst, `{"aep_version":"0.1","id":"`...)
	dst = appendULID(dst, id)
	dst = append(dst, `","type":"task.progress","source":"agent:aepctl","session_id":"`...)
	dst = append(dst, g.names[s]...)
	dst = append(dst, `","task_id":"`...)
	dst = append(dst, g.sources[s]...)
	dst = append(dst, `","created_at":"`...)
	dst = t.AppendFormat(dst, "2006-01-02T15:04:05.000000Z07:00")
	dst = append(dst, `","payload":{"n":`...)
	dst = strconv.AppendInt(dst, i, 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	return append(dst, `,"pad":""}}`...)
}

// WriteEvents writes n events from g to w as NDJSON.
func WriteEvents(ctx context.Context, w io.Writer, g *Generator, n int) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var buf []byte
	for i := range n {
		if i%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		buf, _ = g.Next(buf[:0])
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

func appendULID(dst []byte, id ulid.ULID) []byte {
	var b [ulid.EncodedSize]byte
	_ = id.MarshalTextTo(b[:]) // cannot fail: b has the encoded size
	return append(dst, b[:]...)
}
