package main

import (
	"io"
	"testing"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

func TestTopicManagementFlag(t *testing.T) {
	if _, err := parseConfig([]string{"--topic-management", "sometimes"}, io.Discard); err == nil {
		t.Fatal("--topic-management sometimes accepted")
	}
	if _, err := parseConfig([]string{"--topic-retention-bytes", "-2"}, io.Discard); err == nil {
		t.Fatal("--topic-retention-bytes -2 accepted")
	}
	c, err := parseConfig([]string{"--kafka-brokers", "k:9092", "--topic-management", "verify"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tc := c.topicConfig(zerolog.Nop())
	if tc.Management != partitioning.ManageVerify || tc.RetentionBytes != 0 {
		t.Fatalf("cluster topic config = %+v, want verify and unbounded bytes", tc)
	}
}

// On the embedded broker the default byte retention bounds what a tenant
// keeps, and so the memory a restart needs; an explicit 0 lifts it.
func TestEmbeddedBoundsDefault(t *testing.T) {
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tc := c.topicConfig(zerolog.Nop())
	if tc.RetentionBytes != embeddedRetentionBytes || tc.DeadLetterRetentionBytes != embeddedRetentionBytes/4 {
		t.Fatalf("embedded topic config = %+v", tc)
	}
	l := c.embeddedBounds()
	if l.SegmentBytes != 4<<20 || l.TenantDisk != 12*(16+4+4+12)<<20 || l.AuditBytes != 4<<20 || l.TenantMemory != 2*l.TenantDisk {
		t.Fatalf("bounds = %+v", l)
	}
	c.TopicRetentionBytes = 0
	if l := c.embeddedBounds(); l.EventsBytes != 0 || l.TenantDisk != 0 {
		t.Fatalf("explicit 0: %+v", l)
	}
}
