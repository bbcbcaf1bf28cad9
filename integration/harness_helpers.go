package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Client returns a franz-go client seeded with the broker, closed when t ends. opts come after the seeds.
func (b *Broker) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("integration: kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client for the broker, closed when t ends.
func (b *Broker) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(b.Client(t))
}

// TopicName returns a topic name unique to this test and run: "it.<test>.<random>", legal for Kafka.
func TopicName(t testing.TB) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			return c
		}
		return '_'
	}, t.Name())
	if len(name) > 200 {
		name = name[:200]
	}
	return "it." + name + "." + hex.EncodeToString(r[:])
}

// CreateTopic creates a fresh topic with the given partitions and replication factor 1, waits until every
// partition has a leader, and deletes it when t ends (on a shared broker, tests leave nothing behind).
func (b *Broker) CreateTopic(t testing.TB, partitions int32, configs map[string]*string) string {
	t.Helper()
	adm := b.Admin(t)
	topic := TopicName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("integration: create topic %s: %v", topic, err)
	}
	if b.Kind != KindEmbedded {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := adm.DeleteTopic(ctx, topic); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
				t.Logf("integration: delete topic %s: %v", topic, err)
			}
		})
	}
	if err := waitLeaders(ctx, adm, topic, int(partitions)); err != nil {
		t.Fatalf("integration: topic %s: %v", topic, err)
	}
	return topic
}

// waitLeaders polls metadata until topic lists want partitions, each with a leader.
func waitLeaders(ctx context.Context, adm *kadm.Client, topic string, want int) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		tds, err := adm.ListTopics(ctx, topic)
		if err == nil {
			td, ok := tds[topic]
			if ok && td.Err == nil && len(td.Partitions) == want && allLed(td.Partitions) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("partitions without a leader until the deadline")
		case <-tick.C:
		}
	}
}

func allLed(ps kadm.PartitionDetails) bool {
	for _, p := range ps {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}
