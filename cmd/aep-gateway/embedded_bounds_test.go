package main

import (
	"context"
	"io"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/aep-gateway/aep-gateway/partitioning"
)

func retentionBytesOf(t *testing.T, adm *kadm.Client, topic string) string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rcs[0].Configs {
		if c.Key == "retention.bytes" && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

// A data dir carried over from a run without the byte bound (tenant
// topics with retention.bytes -1) gets the bound at the next start, so
// that it stops growing; a topic's own bound and other topics are kept.
func TestEmbeddedAlignsUnboundedTenantTopics(t *testing.T) {
	c, err := parseConfig([]string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--embedded-kafka-listen", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startEmbedded(c, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := func(v string) *string { return &v }
	for topic, bytes := range map[string]string{
		"aep.old.events": "-1", "aep.old.events.deadletter": "-1", "aep.mine.events": "67108864", "other": "-1",
	} {
		r, err := b.adm.CreateTopic(ctx, 2, 1, map[string]*string{"cleanup.policy": s("delete"), "retention.bytes": s(bytes)}, topic)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	b.Close()

	b, err = startEmbedded(c, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	want := map[string]string{
		"aep.old.events":            strconv.Itoa(embeddedRetentionBytes),
		"aep.old.events.deadletter": strconv.Itoa(embeddedRetentionBytes / 4),
		"aep.mine.events":           "67108864",
		"other":                     "-1",
	}
	for topic, w := range want {
		if got := retentionBytesOf(t, b.adm, topic); got != w {
			t.Errorf("%s retention.bytes = %s, want %s", topic, got, w)
		}
	}
}

func TestIsEventsTopic(t *testing.T) {
	n := partitioning.Naming{Template: "x-{tenant}-ev"}
	for topic, want := range map[string]bool{"x-acme-ev": true, "x--ev": false, "x-acme-ev.deadletter": false, "aep.acme.events": false} {
		if got := isEventsTopic(n, topic); got != want {
			t.Errorf("%s: %v, want %v", topic, got, want)
		}
	}
	if !isEventsTopic(partitioning.Naming{}, "aep.acme.events") {
		t.Error("default template not recognised")
	}
}
