package gateway

import (
	"net/http"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/internal/tracing"
)

// reqBufs are the buffers of one HTTP ingest request: the body and what is
// built on it (frames, outcomes, records, keys, headers). At batch 100 they
// are ~170 KB a request, most of the gateway's allocation and GC work; a
// request takes them from reqBufPool and gives them back once its answer is
// written, so a busy gateway reuses a few sets instead of allocating one
// per request.
//
// A set is never reused while anything may still read it: records Kafka
// did not acknowledge before the write's deadline stay in franz-go's buffers
// (recBufs.held), and trace spans keep the events' id and type, which alias
// the body, until they are exported (tracing on: no set is given back).
// Sets grown past the bounds below are dropped rather than kept.
type reqBufs struct {
	body   []byte
	frames []frame
	outs   []outcome
	recBufs
}

// recBufs are ingestor.records' buffers, and whether Kafka may still hold
// the records built in them.
type recBufs struct {
	slab       []kgo.Record
	recs       []*kgo.Record
	idx        []int
	keys, vals []byte
	hvals      []byte
	hdrs       []kgo.RecordHeader
	held       bool
}

// Bounds on a set given back to the pool: a body of up to the presized
// read, and records for up to the default batch limit.
const (
	maxPooledBody   = maxPresizedBody
	maxPooledEvents = 1000
)

var reqBufPool = sync.Pool{New: func() any { return new(reqBufs) }}

func getReqBufs() *reqBufs { return reqBufPool.Get().(*reqBufs) }

// readBody is the package's readBody into b's body buffer, which it keeps.
func (b *reqBufs) readBody(w http.ResponseWriter, r *http.Request, max int64) (body []byte, tooLarge bool, err error) {
	body, tooLarge, err = readBody(w, r, max, b.body)
	b.body = body
	return body, tooLarge, err
}

// release gives b back to the pool unless it may still be read (held, or
// tracing on) or grew past the bounds. b must not be used afterwards.
func (b *reqBufs) release() {
	if b.held || tracing.On() || cap(b.body) > maxPooledBody || cap(b.outs) > maxPooledEvents || cap(b.slab) > maxPooledEvents {
		return
	}
	b.body = b.body[:0]
	reqBufPool.Put(b)
}

// grow returns s with length n, reusing its array when it is large enough.
// The elements are not cleared.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}
