package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

// topicConfig is how tenant topics are created and checked: the flags,
// with the embedded broker's byte bounds (embeddedBounds) when
// --topic-retention-bytes is left at -1.
func (c config) topicConfig(log zerolog.Logger) partitioning.TopicConfig {
	mgmt, _ := partitioning.ParseTopicManagement(c.TopicManagement) // validated by parseConfig
	tc := partitioning.TopicConfig{
		Partitions:        int32(c.TopicPartitions),
		ReplicationFactor: int16(c.TopicReplicationFactor),
		Retention:         c.TopicRetention,
		RetentionBytes:    max(c.TopicRetentionBytes, 0),
		Management:        mgmt,
		Report:            logMismatches(log),
	}
	if c.embedded() {
		b := c.embeddedBounds()
		tc.RetentionBytes, tc.DeadLetterRetentionBytes = b.EventsBytes, b.DeadLetterBytes
	}
	return tc
}

// logMismatches logs each check of a tenant's topics: fatal mismatches
// as errors, the others as warnings.
func logMismatches(log zerolog.Logger) func(string, []partitioning.Mismatch) {
	return func(tenant string, ms []partitioning.Mismatch) {
		for _, m := range ms {
			ev := log.Warn()
			msg := "tenant topic differs from what the gateway needs"
			if m.Fatal {
				ev = log.Error()
				msg = "tenant topic unusable as it is: the tenant is refused and /readyz is not ready until it is fixed"
			}
			ev.Str("tenant", tenant).Str("topic", m.Topic).Str("setting", m.Setting).Str("want", m.Want).Str("got", m.Got).
				Str("why", m.Why).Msg(msg)
		}
	}
}

// topicCheckCollector exports the provisioner's mismatches as
// aep_topic_config_mismatches{kind,setting,severity}: how many tenant
// topics differ that way, as last checked.
type topicCheckCollector struct {
	prov *partitioning.Provisioner
	desc *prometheus.Desc
}

func newTopicCheckCollector(prov *partitioning.Provisioner) *topicCheckCollector {
	return &topicCheckCollector{prov: prov, desc: prometheus.NewDesc("aep_topic_config_mismatches",
		"Tenant topics that differ from what the gateway needs, by topic kind, setting and severity (fatal: the tenant is refused and /readyz is not ready), as last checked (docs/operations-kafka.md).",
		[]string{"kind", "setting", "severity"}, nil)}
}

func (c *topicCheckCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *topicCheckCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ kind, setting, severity string }
	n := map[key]int{}
	for _, m := range c.prov.Mismatches() {
		sev := "warning"
		if m.Fatal {
			sev = "fatal"
		}
		n[key{m.Kind, m.Setting, sev}]++
	}
	for k, v := range n {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v), k.kind, k.setting, k.severity)
	}
}
