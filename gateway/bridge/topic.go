package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Default consumer groups of the topic bridges.
const (
	DefaultCloudEventsGroup = "aep-cloudevents-bridges"
	DefaultOCSFGroup        = "aep-ocsf-bridges"
)

// Content types of the records the topic bridges write: the CloudEvents
// Kafka protocol binding's structured mode, and plain JSON for OCSF.
const (
	ContentTypeCloudEvents = "application/cloudevents+json; charset=UTF-8"
	ContentTypeOCSF        = "application/json"
)

// Projection is what a topic bridge writes: the destination topic of a
// tenant and the bytes of one event (down-levelled to ceiling first by
// the bridge). ok false leaves the event out (a type outside the
// projection); an error is an event that does not project.
type Projection struct {
	Name        string // bridge name: metrics label, rules key
	ContentType string
	Topic       func(partitioning.Naming, string) string
	Project     func(raw []byte, ceiling aep.Capture) (out []byte, ok bool, err error)
	// Maps, when set, says from the routing attributes alone whether a type
	// is projected at all (the others are counted not_mapped unparsed).
	Maps func(typ string) bool
	// Encode makes the record's value and headers of a projected event;
	// nil: the projection is the value, ContentType its content-type header.
	Encode func(out []byte) (value []byte, headers []kgo.RecordHeader, err error)
}

// CloudEvents is AEP-0005 §1: every R event as its CloudEvent, in the
// Kafka binding's structured mode.
var CloudEvents = Projection{Name: NameCloudEvents, ContentType: ContentTypeCloudEvents,
	Topic: partitioning.Naming.CloudEvents,
	Project: func(raw []byte, ceiling aep.Capture) ([]byte, bool, error) {
		down, _, err := aep.Downlevel(raw, ceiling, aep.Limits{})
		if err != nil {
			return nil, false, err
		}
		ce, err := aep.ToCloudEvent(down)
		return ce, err == nil, err
	}}

// CloudEventsBinary is CloudEvents in the Kafka binding's binary mode:
// every attribute a ce_ header (its canonical string form), datacontenttype
// the content-type header, the value the data alone (empty without data).
var CloudEventsBinary = Projection{Name: NameCloudEvents, Topic: partitioning.Naming.CloudEvents,
	Project: CloudEvents.Project, Encode: binaryCloudEvent}

func binaryCloudEvent(ce []byte) ([]byte, []kgo.RecordHeader, error) {
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(ce, &attrs); err != nil {
		return nil, nil, fmt.Errorf("cloudevent: %w", err)
	}
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	value := []byte{}
	hs := make([]kgo.RecordHeader, 0, len(attrs))
	for _, k := range names {
		v := attrs[k]
		switch k {
		case "data":
			value = v
			continue
		case "datacontenttype":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, nil, fmt.Errorf("cloudevent datacontenttype: %w", err)
			}
			hs = append(hs, kgo.RecordHeader{Key: "content-type", Value: []byte(s)})
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil { // integers and booleans: their JSON text is the canonical string form
			s = string(v)
		}
		hs = append(hs, kgo.RecordHeader{Key: "ce_" + k, Value: []byte(s)})
	}
	return value, hs, nil
}

// OCSF is AEP-0005 §4: the security-relevant families as OCSF records;
// any other type is not mapped.
var OCSF = Projection{Name: NameOCSF, ContentType: ContentTypeOCSF,
	Topic: partitioning.Naming.OCSF, Maps: aep.OCSFMaps,
	Project: func(raw []byte, ceiling aep.Capture) ([]byte, bool, error) {
		rec, err := aep.ToOCSF(raw, ceiling)
		if err != nil || rec == nil {
			return nil, false, err
		}
		b, err := json.Marshal(rec)
		return b, err == nil, err
	}}

// TopicConfig configures a TopicBridge.
type TopicConfig struct {
	Projection Projection
	// ClientOpts connect the bridge's client. Required.
	ClientOpts []kgo.Opt
	// Naming gives each tenant's destination topic.
	Naming partitioning.Naming
	// TopicRegexp matches the events topics, its first group the tenant.
	TopicRegexp *regexp.Regexp
	// Group is the bridges' consumer group; it names the transactional id
	// too (with InstanceID). Required.
	Group string
	// InstanceID makes this process's transactional id unique in the
	// group (the node id). Required.
	InstanceID string
	// MaxCapture is the ceiling events are projected at. Zero means
	// aep.CaptureMetadata, AEP-0005's exporter default.
	MaxCapture aep.Capture
	// Rules narrow the bridge per tenant.
	Rules Rules
	// ReplicationFactor of the topics it creates; 0 or -1: the broker's default.
	ReplicationFactor int16
	// SessionTimeout is the group session timeout. Zero means 10 s.
	SessionTimeout time.Duration
	Logger         zerolog.Logger
	Metrics        *Metrics // required
}

// TopicBridge writes one projection of every tenant's events topic to the
// tenant's projection topic, partition for partition, exactly once. Run
// it once.
type TopicBridge struct {
	cfg     TopicConfig
	tenants tenantNames
	ensured map[string]int32 // destination topic -> partitions known to exist; Run's goroutine only
}

// NewTopic validates cfg.
func NewTopic(cfg TopicConfig) (*TopicBridge, error) {
	if len(cfg.ClientOpts) == 0 || cfg.TopicRegexp == nil || cfg.InstanceID == "" || cfg.Group == "" || cfg.Metrics == nil || cfg.Projection.Project == nil {
		return nil, errors.New("bridge: TopicConfig.Projection, ClientOpts, TopicRegexp, Group, InstanceID and Metrics are required")
	}
	if err := defaults(&cfg.MaxCapture, &cfg.SessionTimeout); err != nil {
		return nil, err
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = -1
	}
	return &TopicBridge{cfg: cfg, tenants: tenantNames{re: cfg.TopicRegexp}, ensured: map[string]int32{}}, nil
}

// defaults fills the settings every bridge shares.
func defaults(ceiling *aep.Capture, session *time.Duration) error {
	if *ceiling == 0 {
		*ceiling = aep.CaptureMetadata
	}
	if !ceiling.Valid() {
		return fmt.Errorf("bridge: MaxCapture %d is not a level", *ceiling)
	}
	if *session <= 0 {
		*session = 10 * time.Second
	}
	return nil
}

// Run bridges until ctx ends (nil) or a transaction fails in a way only a
// new process mends (the error: exit, and the group hands the partitions
// to the other bridges from the committed offsets).
//
// Exactly once: each poll's records and the consumed offsets are one Kafka
// transaction (franz-go's GroupTransactSession: read-process-write,
// KIP-447). A bridge killed mid-transaction leaves it to be aborted; a
// rebalance aborts the open transaction and rewinds to the committed
// offsets. Readers of the projection topic read with read_committed.
func (b *TopicBridge) Run(ctx context.Context) error {
	name := b.cfg.Projection.Name
	m := b.cfg.Metrics
	sess, err := kgo.NewGroupTransactSession(append(append([]kgo.Opt(nil), b.cfg.ClientOpts...),
		kgo.ConsumerGroup(b.cfg.Group), kgo.ConsumeRegex(), kgo.ConsumeTopics(b.cfg.TopicRegexp.String()),
		kgo.TransactionalID(b.cfg.Group+"-"+b.cfg.InstanceID), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.SessionTimeout(b.cfg.SessionTimeout),
		kgo.FetchMaxBytes(4<<20), kgo.FetchMaxPartitionBytes(1<<20), // a poll is one transaction: bounded
		kgo.FetchMinBytes(fetchMinBytes), kgo.FetchMaxWait(fetchMaxWait),
		// (KIP-447's RequireStable is always on in franz-go's group consumers)
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { m.forget(name, b.tenantOf, lost) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { m.forget(name, b.tenantOf, lost) }),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(10*time.Second))...)
	if err != nil {
		return fmt.Errorf("bridge %s: client: %w", name, err)
	}
	defer sess.Close()
	b.cfg.Logger.Info().Str("bridge", name).Str("group", b.cfg.Group).Str("max_capture", b.cfg.MaxCapture.String()).Msg("bridge started")
	for {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			b.cfg.Logger.Warn().Err(err).Str("bridge", name).Str("topic", topic).Int32("partition", p).Msg("bridge: fetch")
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if n := len(p.Records); n > 0 {
				m.setLag(name, b.tenantOf, p.Topic, p.Partition, p.HighWatermark-p.Records[n-1].Offset-1)
			}
		})
		if fs.NumRecords() == 0 {
			continue
		}
		start := time.Now()
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("bridge %s: begin: %w", name, err)
		}
		var produceErr error
		written := map[string]int{}
		fs.EachRecord(func(r *kgo.Record) {
			out, tenant, err := b.mapRecord(ctx, sess.Client(), r)
			if err != nil {
				produceErr = errors.Join(produceErr, err)
				return
			}
			if out == nil {
				return
			}
			sess.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil {
					b.cfg.Logger.Warn().Err(err).Str("bridge", name).Str("topic", out.Topic).Msg("bridge: produce (the transaction aborts)")
				}
			})
			written[tenant]++
		})
		try := kgo.TryCommit
		if produceErr != nil {
			try = kgo.TryAbort
		}
		committed, err := sess.End(ctx, try)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bridge %s: end transaction: %w", name, err)
		}
		m.exports.WithLabelValues(name).Observe(time.Since(start).Seconds())
		if !committed {
			m.aborted.WithLabelValues(name).Inc()
		} else {
			for tenant, n := range written {
				m.count(name, tenant, outcomeWritten, n)
			}
		}
		if produceErr != nil {
			return fmt.Errorf("bridge %s: %w", name, produceErr) // aborted: the group's next owner reads it again
		}
	}
}

func (b *TopicBridge) tenantOf(topic string) string { return b.tenants.of(topic) }

// mapRecord is the projection's record of r and r's tenant; nil for a
// record not bridged (counted). An error is a destination topic that could
// not be provisioned.
func (b *TopicBridge) mapRecord(ctx context.Context, cl *kgo.Client, r *kgo.Record) (*kgo.Record, string, error) {
	p := b.cfg.Projection
	tenant := b.tenantOf(r.Topic)
	if tenant == "" {
		return nil, "", nil
	}
	var attrs aep.Attrs
	if err := partitioning.DecodeHeaders(r.Headers, &attrs); err != nil {
		b.cfg.Metrics.count(p.Name, tenant, outcomeInvalid, 1) // a record written around the gateway
		return nil, tenant, nil                                //nolint:nilerr // skipped and counted, not a failure of the bridge
	}
	ceiling, outcome := b.cfg.Rules.decide(p.Name, tenant, &attrs, b.cfg.MaxCapture)
	if outcome != "" {
		b.cfg.Metrics.count(p.Name, tenant, outcome, 1)
		return nil, tenant, nil
	}
	if p.Maps != nil && !p.Maps(attrs.Type) {
		b.cfg.Metrics.count(p.Name, tenant, outcomeNotMapped, 1)
		return nil, tenant, nil
	}
	value, ok, err := p.Project(r.Value, ceiling)
	if err != nil {
		b.cfg.Metrics.count(p.Name, tenant, outcomeInvalid, 1)
		b.cfg.Logger.Warn().Err(err).Str("bridge", p.Name).Str("topic", r.Topic).Int32("partition", r.Partition).Int64("offset", r.Offset).Msg("bridge: the record does not map (skipped)")
		return nil, tenant, nil
	}
	if !ok {
		b.cfg.Metrics.count(p.Name, tenant, outcomeNotMapped, 1)
		return nil, tenant, nil
	}
	dst := p.Topic(b.cfg.Naming, tenant)
	if b.ensured[dst] <= r.Partition { // new, or the events topic grew
		if err := partitioning.EnsureMirror(ctx, cl, r.Topic, dst, b.cfg.ReplicationFactor, nil); err != nil {
			return nil, tenant, err
		}
		b.ensured[dst] = r.Partition + 1
	}
	headers := []kgo.RecordHeader{{Key: "content-type", Value: []byte(p.ContentType)}}
	if p.Encode != nil {
		if value, headers, err = p.Encode(value); err != nil {
			b.cfg.Metrics.count(p.Name, tenant, outcomeInvalid, 1)
			return nil, tenant, nil //nolint:nilerr // skipped and counted, not a failure of the bridge
		}
	}
	return &kgo.Record{Topic: dst, Partition: r.Partition, Key: r.Key, Value: value, Timestamp: r.Timestamp,
		Headers: headers}, tenant, nil
}
