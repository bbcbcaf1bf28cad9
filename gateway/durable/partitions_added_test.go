package durable

import (
	"context"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Partitions added to the topic while a durable stream runs are read from
// their start, their events delivered and acknowledged like any other and
// their offsets committed with the rest, so the next stream neither skips
// nor repeats them. Before, the stream read only the partitions it opened
// with and went on committing those: the added partitions' events reached
// the subscription only at a later open, if ever.
func TestDurablePartitionsAddedWhileStreaming(t *testing.T) {
	k := newKafkaEnv(t, 2)
	adm := newAdm(t, k)
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, partitioning.Naming{}.DeadLetter(testTenant)); err != nil {
		t.Fatal(err)
	}
	e := k.engine(func(c *Config) { c.PartitionCheck = 20 * time.Millisecond })
	const group = "g-grow"
	startDurable(t, e, group)
	long := AckPolicy{AckTimeout: time.Hour}
	s := openDurable(t, e, group, long, 0)
	k.produce(0, "task.updated", "s0", 0)
	if d := recvD(t, s); d.Event.Attrs.ID != "evt_s0_0" || s.Ack("evt_s0_0") != OutcomeApplied {
		t.Fatalf("before the change: %+v", d)
	}

	if _, err := adm.CreatePartitions(ctx, 2, k.topic); err != nil {
		t.Fatal(err)
	}
	g := k.g.WithNewProducer(t) // it knows the added partitions
	g.ProduceD(t, 2, "task.updated", "s2", 1)
	g.ProduceD(t, 3, "task.updated", "s3", 2)
	got := map[string]bool{}
	for range 2 {
		d := recvD(t, s)
		if d.Kind != DurableEvent || d.Attempt != 1 {
			t.Fatalf("added partition's delivery: %+v", d)
		}
		got[d.Event.Attrs.ID] = true
		if out := s.Ack(d.Event.Attrs.ID); out != OutcomeApplied {
			t.Fatalf("ack %s: %s", d.Event.Attrs.ID, out)
		}
	}
	if !got["evt_s2_1"] || !got["evt_s3_2"] {
		t.Fatalf("delivered %v, want the events of partitions 2 and 3", got)
	}
	gatewaytest.Poll(t, "the added partitions committed", func() bool {
		pcs := committed(t, e, group)
		return pcs[0].Offset == 1 && pcs[2].Offset == 1 && pcs[3].Offset == 1
	})
	s.Close()

	s2 := openDurable(t, e, group, long, 0)
	g.ProduceD(t, 3, "task.updated", "s3", 3)
	if d := recvD(t, s2); d.Event.Attrs.ID != "evt_s3_3" || d.Attempt != 1 {
		t.Fatalf("after reopening: %+v, want only the new evt_s3_3 (nothing repeated)", d)
	}
}
