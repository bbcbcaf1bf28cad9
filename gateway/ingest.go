package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
	"github.com/aep-gateway/aep-gateway/gateway/ingest/dedup"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Limits bound every request. Zero fields take the defaults of
// DefaultLimits.
type Limits struct {
	MaxBodyBytes   int64 // one ingest request body
	MaxEventBytes  int   // one event
	MaxBatchEvents int   // events in one request
	Event          aep.Limits
}

// DefaultLimits are the limits used for zero fields.
var DefaultLimits = Limits{
	MaxBodyBytes:   8 << 20,
	MaxEventBytes:  ingest.DefaultMaxEventBytes,
	MaxBatchEvents: 1000,
}

func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultLimits.MaxBodyBytes
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultLimits.MaxEventBytes
	}
	if l.MaxBatchEvents <= 0 {
		l.MaxBatchEvents = DefaultLimits.MaxBatchEvents
	}
	if l.Event.MaxEventBytes == 0 || l.Event.MaxEventBytes > l.MaxEventBytes {
		l.Event.MaxEventBytes = l.MaxEventBytes
	}
	return l
}

// TopicResolver finds (creating on first use) a tenant's events topic.
type TopicResolver interface {
	Ensure(ctx context.Context, tenant string) (partitioning.TopicInfo, error)
}

// OffsetAuditor, when the broker can tell, reports offsets that were handed
// out before: the embedded broker restarts a partition emptied by retention
// at offset 0 after a crash, and says so through this interface.
type OffsetAuditor interface {
	// Reused reports whether offset of topic/partition may have been
	// acknowledged to a client before.
	Reused(topic string, partition int32, offset int64) bool
}

// ingestor runs the dialect-neutral part of ingest: parse and validate each
// frame, build records, write them, and report each event's outcome.
type ingestor struct {
	limits  Limits
	topics  TopicResolver
	writer  Writer
	keys    partitioning.KeyStrategy
	auditor OffsetAuditor // may be nil
	timeout time.Duration // bound on one write (topic resolution included); the producer keeps a record this long
	// produce bounds the wait for Kafka's acknowledgement (0: timeout);
	// an event still unacknowledged then is answered "may or may not be in
	// the log" and stays in doubt in window until its outcome comes.
	produce time.Duration
	// down reports why the cluster is known to be unreachable (nil: it is
	// not known to be); ingest then refuses at once without sending.
	down    func() error
	window  *dedup.Window // nil: no idempotency window
	metrics *metrics
}

// ErrBrokerUnavailable is the outcome of an event refused because the
// Kafka cluster is known to be unreachable (the readiness probe fails):
// nothing was sent, the event is not in the log; retry it.
var ErrBrokerUnavailable = errors.New("the event log is unreachable; the event was not written")

// ErrInDoubt is the outcome of a retried event whose earlier attempt is
// still unresolved (answered ErrUnacknowledged and not yet acknowledged or
// failed): nothing was sent this time; it may or may not be in the log.
var ErrInDoubt = errors.New("an earlier attempt of this event is still unresolved; it may or may not be in the log")

// mayBeInLog reports whether an event that failed with err may still be in
// the log (retry with the same id, the gateway answers with its position
// once known) rather than certainly absent.
func mayBeInLog(err error) bool {
	return errors.Is(err, ErrUnacknowledged) || errors.Is(err, ErrInDoubt)
}

// outcome is the fate of one frame.
type outcome struct {
	frame
	attrs     aep.Attrs
	parseErr  *aep.Error // the event was invalid
	writeErr  error      // the event was valid but Kafka did not take it
	partition int32
	offset    int64
	reused    bool
	duplicate bool // already in the log (idempotency window): not written again
	sameAs    int  // 1 + index in outs of an earlier copy of this event in the request (0: none)
	claimed   bool // this request holds the event's identity in the window
	// eventPrincipal is the principal of the event's verified bearer
	// authorization (its aep-event-principal header), or nil.
	eventPrincipal []byte
}

// writes reports whether the event is to be written: valid, not already
// failed, not a duplicate of one in the log.
func (o *outcome) writes() bool {
	return o.parseErr == nil && o.writeErr == nil && !o.duplicate && o.sameAs == 0
}

// validate parses every frame into outs (grown from dst, whose elements are
// overwritten); it reports whether all were valid.
func (in *ingestor) validate(d aep.Dialect, frames []frame, dst []outcome) ([]outcome, bool) {
	outs := grow(dst, len(frames))
	ok := true
	for i, f := range frames {
		outs[i] = outcome{frame: f}
		if f.oversize {
			outs[i].parseErr = &aep.Error{Dialect: d, Kind: aep.KindLimit, Code: limitCode(d),
				Message: f.oversizeMessage(in.limits.MaxEventBytes), Offset: -1}
			ok = false
			continue
		}
		a, err := aep.ParseAs(d, f.raw, in.limits.Event)
		if err != nil {
			outs[i].parseErr = asParseError(d, err)
			ok = false
			continue
		}
		outs[i].attrs = a
	}
	return outs, ok
}

func asParseError(d aep.Dialect, err error) *aep.Error {
	if e := aep.AsError(err); e != nil {
		return e
	}
	return &aep.Error{Dialect: d, Kind: aep.KindInvalid, Code: invalidCode(d), Message: err.Error(), Offset: -1}
}

// write produces every valid outcome to the tenant's topic. The write is
// detached from the request's cancellation: once events are handed to Kafka
// the client gets their outcome, and a client that went away does not make
// the gateway forget what it wrote. Only the timeout bounds it.
//
// With owned, the frames' bytes belong to this request and are never
// reused (an HTTP body read for it): the records' values alias them instead
// of a copy. Without it (bytes lent by a caller that may reuse them once
// write returns, while Kafka may still hold an unacknowledged record), the
// values are copied.
//
// The records are built in rb (nil: fresh buffers); rb.held reports on
// return whether Kafka may still hold some of them.
func (in *ingestor) write(ctx context.Context, tenant string, pub publisher, d aep.Dialect, outs []outcome, owned bool, rb *recBufs) error {
	if in.down != nil {
		if err := in.down(); err != nil {
			err = fmt.Errorf("%w: %w", ErrBrokerUnavailable, err)
			failValid(outs, err)
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.timeout)
	defer cancel()
	info, err := in.topics.Ensure(ctx, tenant)
	if err != nil {
		failValid(outs, fmt.Errorf("tenant topic unavailable: %w", err))
		return err
	}
	if rb == nil {
		rb = new(recBufs)
	}
	in.claim(ctx, tenant, outs)
	recs, idx := in.records(info.Name, pub, outs, owned, rb)
	defer in.countDuplicates(d, outs)
	defer settleSame(outs)
	if len(recs) == 0 {
		return firstWriteErr(outs)
	}
	rb.held = true // until Write has returned (a panic in between leaves it held)
	spans := traceEvents(ctx, tenant, d, recs, outs, idx)
	start := time.Now()
	errs := in.produceRecs(ctx, tenant, recs, outs, idx)
	rb.held = slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, ErrUnacknowledged) })
	in.metrics.produceLatency.WithLabelValues(d.String()).Observe(time.Since(start).Seconds())
	endEvents(spans, errs)
	for j, r := range recs {
		o := &outs[idx[j]]
		if errs[j] != nil {
			o.writeErr = errs[j]
			if o.claimed && !errors.Is(errs[j], ErrUnacknowledged) {
				in.window.Forget(windowKey(tenant, o)) // certainly not written
			}
			continue
		}
		o.partition, o.offset = r.Partition, r.Offset
		if o.claimed {
			in.window.Accept(windowKey(tenant, o), dedup.Position{Partition: r.Partition, Offset: r.Offset})
		}
		if in.auditor != nil && in.auditor.Reused(r.Topic, r.Partition, r.Offset) {
			o.reused = true
		}
	}
	return firstWriteErr(outs)
}

// produceRecs writes recs, waiting at most in.produce for Kafka. With a
// window and a LateWriter, the outcome of a record answered
// ErrUnacknowledged resolves its identity when it comes; otherwise such an
// identity is forgotten at once (a retry writes again).
func (in *ingestor) produceRecs(ctx context.Context, tenant string, recs []*kgo.Record, outs []outcome, idx []int) []error {
	lw, ok := in.writer.(LateWriter)
	if !ok || in.window == nil {
		wctx, cancel := context.WithTimeout(ctx, in.produceWait())
		defer cancel()
		errs := in.writer.Write(wctx, recs)
		for j, err := range errs {
			if o := &outs[idx[j]]; err != nil && o.claimed && errors.Is(err, ErrUnacknowledged) {
				in.window.Forget(windowKey(tenant, o))
			}
		}
		return errs
	}
	// Keys of the claimed records (keys[j] of recs[j]), for outcomes that
	// come late: a record is looked up by pointer only then. recs and keys
	// are only read from here on, by the producer's goroutines.
	keys := make([]dedup.Key, len(recs))
	claimed := make([]bool, len(recs))
	for j := range recs {
		if o := &outs[idx[j]]; o.claimed {
			keys[j], claimed[j] = windowKey(tenant, o), true
		}
	}
	late := func(r *kgo.Record, err error) {
		j := slices.Index(recs, r)
		if j < 0 || !claimed[j] {
			return
		}
		if err != nil {
			in.window.Forget(keys[j])
			return
		}
		in.window.Accept(keys[j], dedup.Position{Partition: r.Partition, Offset: r.Offset})
	}
	return lw.WriteLate(context.WithoutCancel(ctx), in.produceWait(), recs, late)
}

func (in *ingestor) produceWait() time.Duration {
	if in.produce > 0 && in.produce < in.timeout {
		return in.produce
	}
	return in.timeout
}

// claim reserves, in the window, the identity of every valid event of outs.
// An identity already in the log settles its event as a duplicate (its
// original position, nothing written); one whose earlier write is unresolved
// is waited for (at most the produce wait in all), and then fails with
// ErrInDoubt.
func (in *ingestor) claim(ctx context.Context, tenant string, outs []outcome) {
	if in.window == nil {
		return
	}
	// One bound on waiting for unresolved identities, whatever their number,
	// made when the first wait begins: most requests never wait, and a timer
	// per request was 1.5 % of a single-event ingest profile.
	w := waitBound{parent: ctx, d: in.produceWait()}
	defer w.stop()
	for i := range outs {
		o := &outs[i]
		if o.parseErr != nil || o.writeErr != nil {
			continue
		}
		in.reserve(&w, windowKey(tenant, o), o, outs[:i])
	}
}

// waitBound is a context with a timeout, made on first use.
type waitBound struct {
	parent context.Context
	d      time.Duration
	ctx    context.Context
	cancel context.CancelFunc
}

func (w *waitBound) get() context.Context {
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithTimeout(w.parent, w.d)
	}
	return w.ctx
}

func (w *waitBound) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}

// reserve claims k for o (reporting true), or settles o as a duplicate,
// as a copy of an earlier event of the same request (in before), or as
// ErrInDoubt.
func (in *ingestor) reserve(w *waitBound, k dedup.Key, o *outcome, before []outcome) bool {
	for {
		c := in.window.Reserve(k)
		switch {
		case c.Owned:
			o.claimed = true
			return true
		case c.Known:
			o.duplicate, o.partition, o.offset = true, c.Pos.Partition, c.Pos.Offset
			return false
		}
		// Pending: perhaps by this very request (the same event twice in
		// it); looked for only then.
		for j := range before {
			if p := &before[j]; p.claimed && p.attrs.ID == o.attrs.ID && p.attrs.Source == o.attrs.Source && bytes.Equal(p.raw, o.raw) {
				o.sameAs = j + 1 // written once, with the first copy
				return false
			}
		}
		select {
		case <-c.Wait:
			continue
		case <-w.get().Done():
		}
		o.writeErr = ErrInDoubt
		return false
	}
}

// settleSame gives each event sent twice in one request its first copy's
// outcome.
func settleSame(outs []outcome) {
	for i := range outs {
		if j := outs[i].sameAs; j > 0 {
			f := &outs[j-1]
			outs[i].writeErr, outs[i].partition, outs[i].offset, outs[i].reused = f.writeErr, f.partition, f.offset, f.reused
		}
	}
}

func (in *ingestor) countDuplicates(d aep.Dialect, outs []outcome) {
	n := 0
	for i := range outs {
		if outs[i].duplicate {
			n++
		}
	}
	if n > 0 {
		in.metrics.duplicates.WithLabelValues(d.String()).Add(float64(n))
	}
}

// bodySeed hashes events' bytes for the idempotency window (this
// process's window only: no need to agree with other nodes).
var bodySeed = maphash.MakeSeed()

// windowKey is o's key in the idempotency window: its identity and a hash
// of its bytes as received.
func windowKey(tenant string, o *outcome) dedup.Key {
	return dedup.Key{Tenant: tenant, Source: o.attrs.Source, ID: o.attrs.ID, Body: maphash.Bytes(bodySeed, o.raw)}
}

func failValid(outs []outcome, err error) {
	for i := range outs {
		if outs[i].parseErr == nil {
			outs[i].writeErr = err
		}
	}
}

func firstWriteErr(outs []outcome) error {
	for i := range outs {
		if outs[i].writeErr != nil {
			return outs[i].writeErr
		}
	}
	return nil
}

// records builds, in rb, the records of the events of outs that parsed,
// and the index in outs of each. Records, keys and header values share one
// array each for the whole request (rb's, when large enough), not several
// per event. Values alias the frames' bytes when owned, else are copied
// into one array.
func (in *ingestor) records(topic string, pub publisher, outs []outcome, owned bool, rb *recBufs) ([]*kgo.Record, []int) {
	const hdrsPerEvent = 14 + publisherHeaders + 1 // routing (R: up to 14), publisher, aep-event-principal
	size, hsize := 0, 0
	for i := range outs {
		if outs[i].writes() {
			size += len(outs[i].raw)
			hsize += partitioning.HeaderValuesLen(&outs[i].attrs)
		}
	}
	// franz-go fills in a record's partition, offset, timestamp and more:
	// a reused record starts from zero.
	rb.slab = grow(rb.slab, len(outs))
	clear(rb.slab)
	slab := rb.slab
	var vals []byte
	if !owned {
		rb.vals = grow(rb.vals, size)
		vals = rb.vals[:0]
	}
	rb.keys = grow(rb.keys, 32*len(outs))
	keys := rb.keys[:0] // never nil: an empty key stays empty, not null
	rb.hdrs = grow(rb.hdrs, len(outs)*hdrsPerEvent)
	hdrs := rb.hdrs
	rb.hvals = grow(rb.hvals, hsize)
	hvals := rb.hvals[:0]
	rb.recs = grow(rb.recs, len(outs))
	recs := rb.recs[:0]
	rb.idx = grow(rb.idx, len(outs))
	idx := rb.idx[:0]
	for i := range outs {
		o := &outs[i]
		if !o.writes() {
			continue
		}
		r := &slab[len(recs)]
		r.Topic = topic
		if owned {
			r.Value = o.raw[:len(o.raw):len(o.raw)]
		} else {
			vals = append(vals, o.raw...)
			r.Value = vals[len(vals)-len(o.raw) : len(vals) : len(vals)]
		}
		k := in.keys.Key(&o.attrs)
		keys = append(keys, k...)
		r.Key = keys[len(keys)-len(k) : len(keys) : len(keys)]
		h := hdrs[len(recs)*hdrsPerEvent : len(recs)*hdrsPerEvent : (len(recs)+1)*hdrsPerEvent]
		r.Headers, hvals = partitioning.AppendHeadersTo(h, hvals, &o.attrs)
		r.Headers = pub.appendHeaders(r.Headers)
		if len(o.eventPrincipal) > 0 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: partitioning.HeaderEventPrincipal, Value: o.eventPrincipal})
		}
		recs = append(recs, r)
		idx = append(idx, i)
	}
	return recs, idx
}

// admit applies the tenant's rate limit to n events. It reports false after
// answering 429 in the dialect's shape: the request is refused whole.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, d aep.Dialect, n int) bool {
	if s.limiter == nil {
		return true
	}
	wait, ok := s.limiter.take(TenantFrom(r.Context()), n)
	if ok {
		return true
	}
	msg, retryable := s.rateRefusal(d, n, wait)
	if !retryable {
		wait = time.Second
	}
	w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
	if d == aep.DialectD {
		writeD(w, http.StatusTooManyRequests, limitCode(d), msg, retryable)
	} else {
		writeR(w, http.StatusTooManyRequests, limitCode(d), msg)
	}
	return false
}

// rateRefusal counts a refusal of n events by the rate limiter and words
// it; retryable is false when n exceeds the burst (wait < 0).
func (s *Server) rateRefusal(d aep.Dialect, n int, wait time.Duration) (msg string, retryable bool) {
	s.metrics.rejected(d, "rate", n)
	if wait < 0 {
		return fmt.Sprintf("a request of %d events exceeds the tenant's burst; send smaller batches", n), false
	}
	return fmt.Sprintf("the tenant's ingest rate limit is exceeded; retry after %s", wait.Round(time.Millisecond)), true
}

// admitEach applies the tenant's rate limit to n events given to Ingest one
// event at a time: it returns how many of them, from the first, may go on,
// and one RateLimited result for each of the others (nil when all may).
func (s *Server) admitEach(tenant string, d aep.Dialect, n int) (int, []IngestResult) {
	if s.limiter == nil || n == 0 {
		return n, nil
	}
	wait, ok := s.limiter.take(tenant, n)
	if ok {
		return n, nil
	}
	k := 0
	for ; n > 1 && k < n; k++ { // one event refused is refused; more are taken one by one
		w, ok := s.limiter.take(tenant, 1)
		if !ok {
			wait = w
			break
		}
	}
	if k == n {
		return n, nil
	}
	msg, retryable := s.rateRefusal(d, n-k, wait)
	res := make([]IngestResult, n-k)
	for i := range res {
		res[i] = IngestResult{
			Err:         &aep.Error{Dialect: d, Kind: aep.KindLimit, Code: limitCode(d), Message: msg, Retryable: retryable, Offset: -1},
			RateLimited: true, RetryAfter: max(wait, 0), Partition: -1, Offset: -1,
		}
	}
	return k, res
}

// maxPresizedBody bounds the buffer readBody allocates on the strength of a
// Content-Length alone, before the bytes arrive: a client declaring 8 MB and
// sending nothing holds no more than this (the tenant's in-flight byte cap
// bounds the declared total as well).
const maxPresizedBody = 1 << 20

// readBody reads a request body bounded by the body limit. A body over the
// limit is reported as tooLarge. With a Content-Length up to
// maxPresizedBody the body is read into one buffer of that size (no growing
// and copying): buf when its capacity holds the Content-Length (a pooled
// reqBufs body), else a new one. Either is the request's own until its
// answer is written, so records may alias it (ingestor.write's owned).
func readBody(w http.ResponseWriter, r *http.Request, max int64, buf []byte) (body []byte, tooLarge bool, err error) {
	if r.ContentLength > max {
		return nil, true, fmt.Errorf("request body is %d bytes, over the %d-byte limit", r.ContentLength, max)
	}
	rd := http.MaxBytesReader(w, r.Body, max)
	if r.ContentLength > 0 && r.ContentLength <= maxPresizedBody {
		body = grow(buf, int(r.ContentLength))
		var n int
		n, err = io.ReadFull(rd, body) // a short body is io.ErrUnexpectedEOF, as io.ReadAll reports it
		body = body[:n]
	} else {
		body, err = io.ReadAll(rd)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, true, fmt.Errorf("request body is over the %d-byte limit", max)
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading request body: %w", err)
	}
	return body, false, nil
}

// mediaType returns the request's media type without parameters, and
// rejects a charset other than UTF-8.
func mediaType(r *http.Request) (string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "", errors.New("Content-Type is required")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fmt.Errorf("malformed Content-Type %q", ct)
	}
	if cs, ok := params["charset"]; ok && cs != "utf-8" && cs != "UTF-8" {
		return "", fmt.Errorf("charset %q is not supported: events are UTF-8", cs)
	}
	return mt, nil
}
