package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// Partitions added to a tenant topic during a run (issue 29; kafka-topics
// --alter --partitions): a durable subscription, a replayable D stream and
// an R stream stay open on gateway A while events are published through
// gateway B. After the change B restarts (its producer then hashes over
// the new count, so sessions move to the new partitions); A keeps running
// and picks the new partitions up (--partition-check). Every event reaches
// each stream once, in per-session order: the change is made between two
// phases, as docs/operations-kafka.md ("Adding partitions") asks of an
// operator who needs order across it. Before, A's readers never read the
// new partitions: their events reached no stream and the durable
// subscription committed past them on the old partitions only.
func TestPartitionsAddedDuringARun(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	topic := prefix + ".default.events"
	args := []string{"--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix + ".{tenant}.events", "--topic-partitions", "2", "--topic-replication-factor", "1",
		"--partition-check", "200ms"}
	gA := startGateway(t, args...)
	gB := startGateway(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	res, err := gA.post(ctx, "/aep/subscriptions", "application/json", nil,
		`{"type":"subscription.requested","payload":{"types":["task.*"],"delivery_mode":"at_least_once","ack_timeout_ms":60000}}`)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err != nil || res.status != http.StatusCreated || json.Unmarshal(res.body, &created) != nil {
		t.Fatalf("create: %v %d %s", err, res.status, res.body)
	}
	durable := gatewaytest.MustOpenSSE(t, gA.URL+"/aep/subscriptions/"+created.ID+"/stream", gatewaytest.SSEOptions{Buffer: 4096})
	dLive := gatewaytest.MustOpenSSE(t, gA.URL+"/aep/events?types=task.*&delivery_mode=replayable", gatewaytest.SSEOptions{Buffer: 4096})
	rLive := openRStream(t, gA, url.Values{"filter": {`{"type":["tool.*"]}`}}, "")

	const sessions, perPhase = 16, 5
	d := &orderedSink{t: t, next: map[string]int{}}
	dd := &orderedSink{t: t, next: map[string]int{}}
	r := &orderedSink{t: t, next: map[string]int{}}
	// publish posts one phase of both dialects through g and returns the
	// partitions the D events landed in; moved gets a session that landed
	// in an added partition.
	var moved string
	publish := func(g *gatewayProc, phase int) map[int32]bool {
		var dBody strings.Builder
		var rEvents []string
		for i := phase * perPhase; i < (phase+1)*perPhase; i++ {
			for s := range sessions {
				dBody.WriteString(dEvent(i, fmt.Sprintf("grow_%d", s)) + "\n")
				rEvents = append(rEvents, rEvent(fmt.Sprintf("grow_%d", s), i))
			}
		}
		res, err := g.post(ctx, "/aep/events", "application/x-ndjson", nil, dBody.String())
		var rep ingestReply
		if err != nil || res.status != http.StatusAccepted || json.Unmarshal(res.body, &rep) != nil || rep.Accepted != sessions*perPhase {
			t.Fatalf("phase %d: %v %d %s", phase, err, res.status, res.body)
		}
		postR(ctx, t, g, rEvents...)
		parts := map[int32]bool{}
		for _, p := range rep.Positions {
			parts[p.Partition] = true
			if p.Partition >= 2 && moved == "" {
				moved = strings.TrimSuffix(p.ID[len("evt_"):], p.ID[strings.LastIndexByte(p.ID, '_'):]) // evt_<session>_<i>
			}
		}
		return parts
	}
	// receive reads phase's events from the three streams (acking the
	// durable ones) and checks per-session order on each.
	receive := func(phase int) {
		want := sessions * perPhase * (phase + 1)
		var acks []string
		for dd.n < want {
			m := durable.NextSkipping("heartbeat", "stream open")
			if m.Event == "task.progress" {
				id := dd.addD(m.Data, "durable")
				acks = append(acks, id)
			}
		}
		if res, err := gA.post(ctx, "/aep/subscriptions/"+created.ID+"/acks", "application/json", nil, ackBatch(acks)); err != nil || res.status != http.StatusOK {
			t.Fatalf("acks: %v %d %s", err, res.status, res.body)
		}
		for d.n < want {
			m := dLive.NextSkipping("heartbeat", "stream open")
			if m.Event == "task.progress" {
				d.addD(m.Data, "D stream")
			}
		}
		for r.n < want {
			m := rLive.nextEvent()
			r.addR(m.id, "R stream")
		}
	}

	phase0 := publish(gB, 0)
	receive(0)
	adm := kadm.NewClient(mustClient(t, b.Seeds))
	if _, err := adm.CreatePartitions(ctx, 2, topic); err != nil {
		t.Fatal(err)
	}
	gB.stop() // its producer knew 2 partitions; the next process hashes over 4
	gB2 := startGateway(t, args...)
	var phase1 map[int32]bool
	gatewaytest.Poll(t, "gateway B's successor to see 4 partitions", func() bool {
		st, err := adm.ListEndOffsets(ctx, topic)
		return err == nil && len(st[topic]) == 4
	})
	phase1 = publish(gB2, 1)
	if !phase1[2] && !phase1[3] {
		t.Fatalf("phase 1 landed in partitions %v only: no session moved to an added partition, the test proves nothing", phase1)
	}
	receive(1)
	// An R resume into a session that moved to an added partition: the
	// cursor index covers the added partition (its group learns of it
	// within --partition-check), so the strict tail comes back exactly.
	resume := fmt.Sprintf("%s:0:%d", moved, perPhase+1) // after the second event of phase 1
	q := url.Values{"filter": {`{"type":["tool.*"]}`}, "from": {fmt.Sprintf(`[{"session":%q,"epoch":0,"seq":%d}]`, moved, perPhase+1)}}
	rs := openRStream(t, gA, q, "")
	for seq := perPhase + 2; seq < 2*perPhase; seq++ {
		m := rs.next()
		for m.comment == "ping" {
			m = rs.next()
		}
		// The resolver marks a position of a topic whose partition count
		// changed (docs/relay.md): the marker then names where delivery
		// starts, which must still be the strict tail.
		if want := fmt.Sprintf("replay-exhausted %s 0:%d", moved, seq); m.comment == want && seq == perPhase+2 {
			m = rs.next()
		}
		if m.id != fmt.Sprintf("%s:0:%d", moved, seq) {
			t.Fatalf("R resume after %s (a moved session): got %q, want seq %d", resume, m.id, seq)
		}
	}
	rs.close()
	// Nothing more than once: one more event per stream after the lot.
	publish(gB2, 2)
	receive(2)
	t.Logf("partitions before %v, after %v; %d events per stream in per-session order, none twice", phase0, phase1, d.n)
}

// orderedSink counts the events of one stream and checks per-session
// order: each session's i goes up by one.
type orderedSink struct {
	t    *testing.T
	mu   sync.Mutex
	next map[string]int // session -> next i
	n    int
}

func (o *orderedSink) addD(data, what string) string {
	o.t.Helper()
	var e struct {
		ID      string          `json:"id"`
		Session string          `json:"session_id"`
		Payload struct{ I int } `json:"payload"`
	}
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		o.t.Fatalf("%s: %v: %s", what, err, data)
	}
	o.check(e.Session, e.Payload.I, what)
	return e.ID
}

func (o *orderedSink) addR(id, what string) {
	o.t.Helper()
	sess, rest, _ := strings.Cut(id, ":")
	var epoch, seq int
	if _, err := fmt.Sscanf(rest, "%d:%d", &epoch, &seq); err != nil {
		o.t.Fatalf("%s: id %q", what, id)
	}
	o.check(sess, seq, what)
}

func (o *orderedSink) check(sess string, i int, what string) {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if want := o.next[sess]; i != want {
		o.t.Fatalf("%s: session %s event %d after %d events of it (out of order, repeated or lost)", what, sess, i, want)
	}
	o.next[sess] = i + 1
	o.n++
}

func mustClient(t *testing.T, seeds []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
