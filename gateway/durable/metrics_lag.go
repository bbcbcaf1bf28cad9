package durable

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
)

// lagTimeout bounds the Kafka requests of one scrape of the lag gauges.
const lagTimeout = 2 * time.Second

// lagCollector exports consumer lag, read from Kafka when /metrics is
// scraped (nothing on the delivery path):
//
//   - aep_delivery_tail_lag_records{tenant}: records appended to a tenant's
//     topic that this node's shared tail has not dispatched yet (end offset
//     minus the tail's position, summed over partitions);
//   - aep_delivery_durable_lag_records{tenant}: records after the committed
//     offsets of the durable subscriptions streaming on this node (end
//     offset minus committed offset, as Kafka's consumer-group tools count
//     it), summed per tenant: it falls as acks are committed;
//   - aep_delivery_subscription_lag_records{tenant,subscription}: the same
//     per durable subscription, for the Config.SubscriptionLagTop
//     subscriptions of this node with the largest lag only.
//
// Tenant labels go through the engine's tenant cap. A durable subscription
// streams on one node at a time, so summing a tenant's series over nodes
// counts each once.
type lagCollector struct {
	e                       *Cluster
	top                     int
	tailDesc, durDesc, subs *prometheus.Desc

	mu       sync.Mutex
	durables map[*DurableStream]struct{} // open streams; guarded by mu
}

func newLagCollector(e *Cluster, top int) *lagCollector {
	return &lagCollector{
		e: e, top: top, durables: map[*DurableStream]struct{}{},
		tailDesc: prometheus.NewDesc("aep_delivery_tail_lag_records",
			"Records of a tenant's topic not yet dispatched by this node's shared tail (live subscriptions), by tenant.", []string{"tenant"}, nil),
		durDesc: prometheus.NewDesc("aep_delivery_durable_lag_records",
			"Records after the committed offsets of the durable subscriptions streaming on this node, summed by tenant.", []string{"tenant"}, nil),
		subs: prometheus.NewDesc("aep_delivery_subscription_lag_records",
			"Records after a durable subscription's committed offsets, for the subscriptions of this node with the largest lag (--metrics-subscription-lag-top).", []string{"tenant", "subscription"}, nil),
	}
}

func (c *lagCollector) track(s *DurableStream) {
	c.mu.Lock()
	c.durables[s] = struct{}{}
	c.mu.Unlock()
}

func (c *lagCollector) untrack(s *DurableStream) {
	c.mu.Lock()
	delete(c.durables, s)
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tailDesc
	ch <- c.durDesc
	ch <- c.subs
}

type durablePos struct {
	tenant, topic, group string
}

// snapshot copies the positions of the tails (from the engine) and the
// open durable streams.
func (c *lagCollector) snapshot() ([]engine.TailPosition, []durablePos) {
	tails := c.e.eng.TailPositions()
	c.mu.Lock()
	durs := make([]durablePos, 0, len(c.durables))
	for s := range c.durables {
		durs = append(durs, durablePos{tenant: s.req.Tenant.String(), topic: s.topic, group: s.req.Group})
	}
	c.mu.Unlock()
	return tails, durs
}

// Collect implements prometheus.Collector: one ListOffsets for every topic
// and one OffsetFetch for every group, bounded by lagTimeout. A series
// whose offsets Kafka did not give is left out of this scrape.
func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	tails, durs := c.snapshot()
	if len(tails) == 0 && len(durs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	topics := map[string]bool{}
	for _, t := range tails {
		topics[t.Topic] = true
	}
	groups := make([]string, 0, len(durs))
	for _, d := range durs {
		topics[d.topic] = true
		groups = append(groups, d.group)
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	ends, err := c.e.adm.ListEndOffsets(ctx, names...)
	if err != nil {
		c.e.cfg.Logger.Debug().Err(err).Msg("durable: lag metrics: end offsets")
		return
	}
	end := func(topic string, p int32) (int64, bool) {
		lo, ok := ends[topic][p]
		return lo.Offset, ok && lo.Err == nil
	}

	tailLag := map[string]float64{}
	for _, t := range tails {
		l := c.e.eng.TenantLabel(t.Tenant)
		tailLag[l] += 0
		for p, pos := range t.Pos {
			if e, ok := end(t.Topic, int32(p)); ok && e > pos {
				tailLag[l] += float64(e - pos)
			}
		}
	}
	for l, v := range tailLag {
		ch <- prometheus.MustNewConstMetric(c.tailDesc, prometheus.GaugeValue, v, l)
	}
	if len(durs) == 0 {
		return
	}
	fetched := c.e.adm.FetchManyOffsets(ctx, groups...)
	type subLag struct {
		tenant, group string
		lag           float64
	}
	var subs []subLag
	durLag := map[string]float64{}
	for _, d := range durs {
		r, ok := fetched[d.group]
		if !ok || r.Err != nil {
			continue
		}
		var lag float64
		for p, o := range r.Fetched[d.topic] {
			if e, ok := end(d.topic, p); ok && o.Err == nil && o.At >= 0 && e > o.At {
				lag += float64(e - o.At)
			}
		}
		l := c.e.eng.TenantLabel(d.tenant)
		durLag[l] += lag
		subs = append(subs, subLag{tenant: l, group: d.group, lag: lag})
	}
	for l, v := range durLag {
		ch <- prometheus.MustNewConstMetric(c.durDesc, prometheus.GaugeValue, v, l)
	}
	sort.Slice(subs, func(i, j int) bool {
		if subs[i].lag != subs[j].lag {
			return subs[i].lag > subs[j].lag
		}
		return subs[i].group < subs[j].group
	})
	for _, s := range subs[:min(c.top, len(subs))] {
		ch <- prometheus.MustNewConstMetric(c.subs, prometheus.GaugeValue, s.lag, s.tenant, s.group)
	}
}
