package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/fetchsize"
	"github.com/aep-gateway/aep-gateway/internal/gather"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// FetchBytes is what one fetch of the worker decodes to, about (at least
// one producer batch; internal/fetchsize).
const FetchBytes = 1 << 20

// Source is the source of the rejections the worker writes.
const Source = "gateway:aep-gateway"

// Config configures a Worker.
type Config struct {
	ClientOpts  []kgo.Opt      // seeds, TLS, SASL
	TopicRegexp *regexp.Regexp // the tenants' events topics
	Group       string         // consumer group, shared by every node's worker
	MaxTasks    int            // per partition; zero means DefaultMaxTasks
	Logger      zerolog.Logger
	Registerer  prometheus.Registerer // nil: metrics not registered
	// Now stamps the rejections' created_at; nil means time.Now.
	Now func() time.Time
	// Gather is how long the worker waits after a poll at the tail of its
	// partitions before it polls again (internal/gather): under single
	// events it then fetches and commits many at once, not one by one.
	// Zero means DefaultGather; negative, no wait.
	Gather time.Duration
}

// DefaultGather delays a task event's judgement by at most a quarter
// second beyond its fetch.
const DefaultGather = 250 * time.Millisecond

// Worker judges the task events of every tenant's events topic. Workers
// of one Group (one per gateway node) share the partitions: each partition
// is judged by one worker at a time, in log order. Run it once.
type Worker struct {
	cfg Config
	m   metrics

	mu     sync.Mutex                        // guards parts and judged (the poll loop and the group callbacks)
	parts  map[string]map[int32]*partTracker // states of assigned partitions
	judged map[string]map[int32]int64        // offsets below were judged before this assignment: replay them silently
}

type metrics struct {
	events, rejected, evicted prometheus.Counter
}

// New returns a worker; its metrics are registered with cfg.Registerer.
func New(cfg Config) (*Worker, error) {
	if cfg.Group == "" || cfg.TopicRegexp == nil {
		return nil, errors.New("tasks: Group and TopicRegexp are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Gather == 0 {
		cfg.Gather = DefaultGather
	}
	w := &Worker{cfg: cfg, parts: map[string]map[int32]*partTracker{}, judged: map[string]map[int32]int64{}}
	w.m = metrics{
		events:   prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_task_events_total", Help: "Dialect D task lifecycle events judged by this node's task-state worker."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_task_rejections_total", Help: "Task events that broke the lifecycle, each answered with an event.rejected in the log."}),
		evicted:  prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_task_evictions_total", Help: "Task states dropped to keep a partition's tracker within its bound (terminal ones first)."}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{w.m.events, w.m.rejected, w.m.evicted} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("tasks: metrics: %w", err)
			}
		}
	}
	return w, nil
}

// Run judges until ctx ends (nil) or Kafka fails it.
//
// Each assigned partition is read from the start of its log: the offsets
// below the group's committed one were judged by an earlier owner and
// only rebuild the states; from the committed offset on (the log's start
// for a partition the group never committed), every illegal task event
// gets its rejection, written (acks=all) before the offsets past it are
// committed.
// A crash between the write and the commit writes the same rejection
// again on the next owner: its id comes from the offending record's
// partition and offset, so consumers drop the copy as a duplicate.
func (w *Worker) Run(ctx context.Context) error {
	// fetches bounded in bytes decoded, like the catch-up readers' and the
	// sealer's: a partition read from its start over compressible events
	// must not decode to many times what was stored
	sizer := fetchsize.New(FetchBytes)
	opts := append(append(append([]kgo.Opt(nil), w.cfg.ClientOpts...), sizer.Opts()...),
		kgo.ConsumerGroup(w.cfg.Group), kgo.ConsumeRegex(), kgo.ConsumeTopics(w.cfg.TopicRegexp.String()),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(10*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AdjustFetchOffsetsFn(w.fromTheStart),
		kgo.OnPartitionsRevoked(w.drop), kgo.OnPartitionsLost(w.drop))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("tasks: client: %w", err)
	}
	defer cl.Close()
	w.cfg.Logger.Info().Str("group", w.cfg.Group).Msg("task-state worker started")
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		sizer.Adjust(cl)
		fs.EachError(func(topic string, p int32, err error) {
			w.cfg.Logger.Warn().Err(err).Str("topic", topic).Int32("partition", p).Msg("tasks: fetch")
		})
		var rejections, judgedRecs []*kgo.Record
		decoded := 0
		fs.EachRecord(func(r *kgo.Record) {
			decoded += len(r.Key) + len(r.Value)
			rej, judge := w.judge(r)
			if rej != nil {
				rejections = append(rejections, rej)
			}
			if judge {
				judgedRecs = append(judgedRecs, r)
			}
		})
		if len(rejections) > 0 {
			if err := cl.ProduceSync(ctx, rejections...).FirstErr(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				// not committed: the next owner judges them again
				return fmt.Errorf("tasks: write %d rejections: %w", len(rejections), err)
			}
			w.m.rejected.Add(float64(len(rejections)))
		}
		if len(judgedRecs) > 0 {
			if err := cl.CommitRecords(ctx, judgedRecs...); err != nil && ctx.Err() == nil {
				w.cfg.Logger.Warn().Err(err).Msg("tasks: commit (the next owner judges these records again; their rejections keep their ids)")
			}
		}
		if gather.AtTail(decoded, sizer.Bound()) {
			gather.Wait(ctx, w.cfg.Gather)
		}
	}
}

// fromTheStart starts every assigned partition at the start of its log and
// remembers where judging starts: the group's committed offset, or for a
// partition the group never committed, the start (a tenant's first events
// are written before the worker finds its new topic, and a first
// deployment judges the retained log once).
func (w *Worker) fromTheStart(_ context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, ps := range offs {
		if w.judged[topic] == nil {
			w.judged[topic] = map[int32]int64{}
			w.parts[topic] = map[int32]*partTracker{}
		}
		for p, o := range ps {
			w.judged[topic][p] = max(o.EpochOffset().Offset, 0)
			w.parts[topic][p] = newPartTracker(w.cfg.MaxTasks)
			ps[p] = kgo.NewOffset().AtStart()
		}
	}
	return offs, nil
}

// drop forgets revoked or lost partitions.
func (w *Worker) drop(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, ps := range gone {
		for _, p := range ps {
			delete(w.parts[topic], p)
			delete(w.judged[topic], p)
		}
	}
}

// judge applies r to its partition's states: the rejection to write when
// r is an illegal task event at or past the judged offset, and whether r
// is past it (its offset is to be committed).
func (w *Worker) judge(r *kgo.Record) (*kgo.Record, bool) {
	w.mu.Lock()
	t := w.parts[r.Topic][r.Partition]
	from, known := w.judged[r.Topic][r.Partition]
	w.mu.Unlock()
	if t == nil || !known {
		return nil, false // revoked meanwhile
	}
	live := r.Offset >= from
	var a aep.Attrs
	if partitioning.DecodeHeaders(r.Headers, &a) != nil || a.Dialect != aep.DialectD || a.Task == "" || !IsTaskEvent(a.Type) {
		return nil, live
	}
	ev := t.evicted
	state, why := t.apply(a.Task, a.Type, r.Offset)
	if n := t.evicted - ev; n > 0 {
		w.m.evicted.Add(float64(n))
	}
	if !live {
		return nil, false
	}
	w.m.events.Inc()
	if why == "" {
		return nil, true
	}
	rej, err := w.rejection(r, &a, state, why)
	if err != nil {
		w.cfg.Logger.Warn().Err(err).Str("topic", r.Topic).Int64("offset", r.Offset).Msg("tasks: rejection not encoded")
		return nil, true
	}
	return rej, true
}

// RejectionID is the id of the rejection of the record at partition p,
// offset o: the same whichever worker writes it, however often.
func RejectionID(p int32, o int64) string {
	return "evt_task_rejected_" + strconv.FormatInt(int64(p), 10) + "_" + strconv.FormatInt(o, 10)
}

// rejection is the event.rejected answering r, as a record of r's topic
// and partition with r's key and the routing headers ingest would give it.
func (w *Worker) rejection(r *kgo.Record, a *aep.Attrs, state State, why string) (*kgo.Record, error) {
	type errBody struct {
		Code      string            `json:"code"`
		Message   string            `json:"message"`
		Retryable bool              `json:"retryable"`
		Details   map[string]string `json:"details"`
	}
	type payload struct {
		AcknowledgedEventID string  `json:"acknowledged_event_id"`
		Error               errBody `json:"error"`
	}
	id := RejectionID(r.Partition, r.Offset)
	env := struct {
		Version      string  `json:"aep_version"`
		ID           string  `json:"id"`
		Type         string  `json:"type"`
		Source       string  `json:"source"`
		Target       string  `json:"target,omitempty"`
		SessionID    string  `json:"session_id,omitempty"`
		Conversation string  `json:"conversation_id,omitempty"`
		TaskID       string  `json:"task_id"`
		Correlation  string  `json:"correlation_id,omitempty"`
		Causation    string  `json:"causation_id"`
		CreatedAt    string  `json:"created_at"`
		Payload      payload `json:"payload"`
	}{"0.1", id, "event.rejected", Source, a.Source, a.Session, a.Conversation, a.Task, a.Correlation, a.ID,
		w.cfg.Now().UTC().Format(time.RFC3339Nano),
		payload{a.ID, errBody{aep.CodeDTaskError, why, false, map[string]string{"task_id": a.Task, "state": state.String(), "event_type": a.Type}}}}
	value, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	ra := aep.Attrs{Dialect: aep.DialectD, ID: id, Type: "event.rejected", Source: Source, Target: a.Source, Session: a.Session,
		Conversation: a.Conversation, Task: a.Task, Correlation: a.Correlation, Causation: a.ID}
	hdrs, _ := partitioning.AppendHeadersTo(nil, nil, &ra)
	hdrs = append(hdrs, kgo.RecordHeader{Key: partitioning.HeaderVia, Value: []byte("tasks")})
	return &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: value, Headers: hdrs}, nil
}
