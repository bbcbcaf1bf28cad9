package gatewaytest

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FailProduces makes cluster refuse every produce request
// (TOPIC_AUTHORIZATION_FAILED, not retried by franz-go) while the returned
// flag is set: a node whose writes all fail is, for the others, a node that
// died or stalled (its journal renewals, checkpoints and releases never
// land). Other requests are served as usual.
func FailProduces(cluster *kfake.Cluster) *atomic.Bool {
	var on atomic.Bool
	cluster.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		req := kr.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			rs := kmsg.NewProduceResponseTopic()
			rs.Topic, rs.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
				rs.Partitions = append(rs.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, rs)
		}
		return resp, nil, true
	})
	return &on
}

// FailFetches makes cluster answer every fetch request with
// TOPIC_AUTHORIZATION_FAILED on each partition asked while the returned
// flag is set (a read that cannot go on); other requests are served.
func FailFetches(cluster *kfake.Cluster) *atomic.Bool {
	var on atomic.Bool
	cluster.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		req := kr.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			rs := kmsg.NewFetchResponseTopic()
			rs.Topic, rs.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
				rs.Partitions = append(rs.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, rs)
		}
		return resp, nil, true
	})
	return &on
}
