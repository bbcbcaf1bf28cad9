// Package forward is the wire format of the filter-worker delivery mode
// (--live-delivery workers, docs/scaling.md): the registry topic, through
// which gateway nodes tell the filter workers their live subscriptions, and
// the delivery topic, to which the workers forward each matching record once
// per node that holds a matching subscription.
//
// Registry (compacted): a node's lease, key "node/<node>", value a Lease;
// one key per live subscription, "sub/<incarnation>/<id>", value a Sub; a
// nil value (tombstone) ends either. A lease is rewritten every interval; a
// worker drops the subscriptions of a node whose lease is older than its
// TTL, was tombstoned, or names another incarnation (the node restarted).
//
// Delivery: one partition per node, Partition(node, n) (murmur2 like
// Kafka's default partitioner); a node reads its partition and skips records
// for other nodes that hash to it. A forwarded record keeps the source
// record's value, timestamp and headers and appends the Header* headers
// below; a marker (HeaderKind = KindMarker) carries no value and says: from
// source offset Offset of Topic/Partition on, the worker that owns that
// partition forwards records matching the listed subscriptions.
package forward

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Default topic names.
const (
	DefaultRegistryTopic = "aep.live.registry"
	DefaultDeliveryTopic = "aep.live.delivery"
)

// Headers appended to a forwarded record or a marker. They do not start
// with "aep-", so partitioning.DecodeHeaders ignores them.
const (
	HeaderNode   = "fwd-node" // the node the record is for
	HeaderInc    = "fwd-inc"  // the node's incarnation the subscription ids belong to
	HeaderSource = "fwd-src"  // source topic
	HeaderPos    = "fwd-pos"  // source partition (4 bytes) and offset (8 bytes), big-endian
	HeaderSubs   = "fwd-subs" // matching subscription ids of the node, 8 bytes each, big-endian
	HeaderKey    = "fwd-key"  // the source record's key
	HeaderKind   = "fwd-kind" // KindMarker on a marker; absent on a forwarded record
	KindMarker   = "marker"
	headerPrefix = "fwd-"
)

// Lease is a node's registry heartbeat.
type Lease struct {
	Node        string `json:"node"`
	Incarnation string `json:"inc"`
	// TTLMillis is how long after the record's timestamp the lease holds.
	TTLMillis int64 `json:"ttl_ms"`
}

// Sub is one live subscription in the registry.
type Sub struct {
	Node        string          `json:"node"`
	Incarnation string          `json:"inc"`
	ID          uint64          `json:"id"`
	Tenant      string          `json:"tenant"`
	Dialect     string          `json:"dialect"`
	Filter      json.RawMessage `json:"filter"`
}

// LeaseKey is the registry key of node's lease.
func LeaseKey(node string) []byte { return []byte("node/" + node) }

// SubKey is the registry key of subscription id of a node incarnation.
func SubKey(inc string, id uint64) []byte {
	return []byte("sub/" + inc + "/" + strconv.FormatUint(id, 10))
}

// IsLeaseKey reports whether key is a lease's, and whose.
func IsLeaseKey(key []byte) (string, bool) { return strings.CutPrefix(string(key), "node/") }

// NewSub describes a subscription for the registry.
func NewSub(node, inc string, id uint64, tenant string, f *filtering.Filter) Sub {
	return Sub{Node: node, Incarnation: inc, ID: id, Tenant: tenant, Dialect: f.Dialect().String(), Filter: json.RawMessage(f.String())}
}

// Compile parses the registered filter again.
func (s Sub) Compile() (*filtering.Filter, error) {
	switch aep.ParseDialect(s.Dialect) {
	case aep.DialectD:
		return filtering.ParseD(s.Filter)
	case aep.DialectR:
		return filtering.ParseR(s.Filter)
	}
	return nil, fmt.Errorf("forward: subscription %s/%d: unknown dialect %q", s.Incarnation, s.ID, s.Dialect)
}

// Partition is node's partition of a delivery topic of n partitions.
func Partition(node string, n int32) int32 { return partitioning.Partition([]byte(node), n) }

// Target is where forwarded records go: one node incarnation's partition.
type Target struct {
	Node, Incarnation string
	Partition         int32
}

// AppendHeaders appends the forwarding headers to hs.
func AppendHeaders(hs []kgo.RecordHeader, to Target, topic string, partition int32, offset int64, key []byte, subs []uint64, marker bool) []kgo.RecordHeader {
	var pos [12]byte
	binary.BigEndian.PutUint32(pos[:4], uint32(partition))
	binary.BigEndian.PutUint64(pos[4:], uint64(offset))
	ids := make([]byte, 8*len(subs))
	for i, id := range subs {
		binary.BigEndian.PutUint64(ids[8*i:], id)
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderNode, Value: []byte(to.Node)},
		kgo.RecordHeader{Key: HeaderInc, Value: []byte(to.Incarnation)},
		kgo.RecordHeader{Key: HeaderSource, Value: []byte(topic)},
		kgo.RecordHeader{Key: HeaderPos, Value: pos[:]},
		kgo.RecordHeader{Key: HeaderSubs, Value: ids},
	)
	if marker {
		return append(hs, kgo.RecordHeader{Key: HeaderKind, Value: []byte(KindMarker)})
	}
	return append(hs, kgo.RecordHeader{Key: HeaderKey, Value: key})
}

// Forwarded is a decoded forwarded record or marker.
type Forwarded struct {
	Node, Incarnation string
	Topic             string
	Partition         int32
	Offset            int64
	Key               []byte
	Marker            bool
	// Subs is the raw id list; Sub(i) reads one.
	Subs []byte
	// Headers are the source record's headers (the forwarding ones cut).
	Headers []kgo.RecordHeader
}

// NumSubs is the number of subscription ids.
func (f *Forwarded) NumSubs() int { return len(f.Subs) / 8 }

// Sub is the i-th subscription id.
func (f *Forwarded) Sub(i int) uint64 { return binary.BigEndian.Uint64(f.Subs[8*i:]) }

// ErrMalformed marks a delivery record that is not a forwarded record.
var ErrMalformed = errors.New("forward: malformed delivery record")

// Decode reads the forwarding headers of r into f. The source headers are
// those before the first forwarding header.
func Decode(r *kgo.Record, f *Forwarded) error {
	*f = Forwarded{Headers: r.Headers, Partition: -1}
	cut := -1
	for i, h := range r.Headers {
		if !strings.HasPrefix(h.Key, headerPrefix) {
			continue
		}
		if cut < 0 {
			cut = i
		}
		switch h.Key {
		case HeaderNode:
			f.Node = string(h.Value)
		case HeaderInc:
			f.Incarnation = string(h.Value)
		case HeaderSource:
			f.Topic = string(h.Value)
		case HeaderPos:
			if len(h.Value) != 12 {
				return fmt.Errorf("%w: %s has %d bytes", ErrMalformed, HeaderPos, len(h.Value))
			}
			f.Partition = int32(binary.BigEndian.Uint32(h.Value[:4]))
			f.Offset = int64(binary.BigEndian.Uint64(h.Value[4:]))
		case HeaderSubs:
			if len(h.Value)%8 != 0 {
				return fmt.Errorf("%w: %s has %d bytes", ErrMalformed, HeaderSubs, len(h.Value))
			}
			f.Subs = h.Value
		case HeaderKey:
			f.Key = h.Value
		case HeaderKind:
			f.Marker = string(h.Value) == KindMarker
		}
	}
	if cut < 0 || f.Topic == "" || f.Partition < 0 || f.Node == "" {
		return fmt.Errorf("%w: forwarding headers missing", ErrMalformed)
	}
	f.Headers = r.Headers[:cut]
	return nil
}
