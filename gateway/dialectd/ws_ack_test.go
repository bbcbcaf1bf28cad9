package dialectd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// wsAckEnv is a gateway on kfake with the D WebSocket binding at /aep and
// the durable subscriptions API at /aep/subscriptions, one engine behind
// both, its metrics (and the binding's) in reg.
type wsAckEnv struct {
	*wsEnv
	st  *gatewaytest.Stack
	reg *prometheus.Registry
}

func newWSAckEnv(t testing.TB, cfg dialectd.WSConfig) *wsAckEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	e, st := newWSEnvOn(t, cfg, reg, func(st *gatewaytest.Stack, dc *durable.Cluster) {
		subs := dialectd.NewSubscriptionsHandler(dc, st.Keyring, dialectd.SubscriptionsConfig{Logger: zerolog.New(io.Discard), CommitInterval: 50 * time.Millisecond})
		st.Server.Mount(aep.DialectD, "/aep/subscriptions", subs)
		st.Server.Mount(aep.DialectD, "/aep/subscriptions/*", subs)
	})
	return &wsAckEnv{wsEnv: e, st: st, reg: reg}
}

// durableLag is aep_delivery_durable_lag_records of the dev tenant: the
// records after the committed offsets of the at_least_once streams of the
// engine, 0 once every delivered event is acknowledged and committed.
func (e *wsAckEnv) durableLag() float64 {
	v, _, ok := gatewaytest.MetricSeries(e.t, e.reg, "aep_delivery_durable_lag_records", map[string]string{"tenant": gateway.DevTenant})
	if !ok {
		return -1
	}
	return v
}

// ackMsg is event.acknowledged for the event id, with envelope id msgID.
func ackMsg(msgID, eventID string) string {
	return wsControl(msgID, "event.acknowledged", fmt.Sprintf(`{"acknowledged_event_id":%q}`, eventID))
}

// Ad-hoc at_least_once subscriptions of several connections of one
// tenant never cancel each other (issue 23, "subscriptions that cannot
// collide"): each has its own identity in the journal, so every one of
// them (32 per connection on 2 connections, the per-connection limit; 16
// on 3) receives exactly the events of its type pattern, and the acks of
// all of them settle (the durable lag falls to 0). 3 × 32 streams, each
// with its Kafka client and lease, overloaded the in-process broker under
// -race beside the integration tests in CI (renewals and produces past
// their bounds), which is not what this test is about.
func TestWSDAtLeastOnceSubscriptionsOfSeveralConnectionsDoNotCollide(t *testing.T) {
	for _, c := range []struct{ conns, subs int }{{2, 32}, {3, 16}} {
		t.Run(fmt.Sprintf("%d connections", c.conns), func(t *testing.T) {
			testWSDNoCollision(t, c.conns, c.subs, 2)
		})
	}
}

func testWSDNoCollision(t *testing.T, conns, subs, perSub int) {
	// warnings reach the test's log: a subscription that ends with an
	// error says why
	e := newWSAckEnv(t, dialectd.WSConfig{AckPolicy: durable.AckPolicy{AckTimeout: time.Hour},
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	type subKey struct{ conn, sub int }
	ws := make([]*gatewaytest.WSD, conns)
	wire := make([]map[string]int, conns) // subscription_id -> sub index, per connection
	for c := range ws {
		ws[c] = e.open()
		wire[c] = map[string]int{}
		for s := range subs {
			id := ws[c].MustSubscribe(fmt.Sprintf("evt_s_%d_%d", c, s), fmt.Sprintf(`{"types":["c%d.s%02d.*"],"delivery_mode":"at_least_once"}`, c, s))
			wire[c][id] = s
		}
	}
	var events []string
	want := map[string]subKey{} // event id -> the only subscription it is for
	for c := range conns {
		for s := range subs {
			for k := range perSub {
				id := fmt.Sprintf("evt_c%d_s%02d_%d", c, s, k)
				events = append(events, wsEvent(id, fmt.Sprintf("c%d.s%02d.done", c, s), "agent:x"))
				want[id] = subKey{c, s}
			}
		}
	}
	e.ingestHTTP(events...)
	for c, w := range ws {
		got := map[string]bool{}
		for len(got) < subs*perSub {
			m := w.Next()
			if !m.Delivered() {
				t.Fatalf("connection %d after %d events: %s", c, len(got), m.Raw)
			}
			k, ok := want[m.ID]
			s, known := wire[c][m.Delivery.SubscriptionID]
			switch {
			case !ok || !known || k != (subKey{c, s}):
				t.Fatalf("connection %d: event %s delivered to %s (sub %d): %s", c, m.ID, m.Delivery.SubscriptionID, s, m.Raw)
			case got[m.ID]:
				t.Fatalf("connection %d: %s delivered twice", c, m.ID)
			}
			got[m.ID] = true
			w.Send(ackMsg("evt_ack_"+m.ID, m.ID))
		}
	}
	gatewaytest.Poll(t, "every delivery acknowledged and committed (durable lag 0)", func() bool { return e.durableLag() == 0 })
	for c, w := range ws {
		w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
		if m := w.Next(); m.Type != "capabilities.declared" {
			t.Fatalf("connection %d after its acks: %s", c, m.Raw)
		}
	}
	// The ad-hoc subscriptions' consumer groups, one each, end with their
	// connections.
	if n := e.adHocGroups(); n != conns*subs {
		t.Fatalf("%d ad-hoc consumer groups, want %d", n, conns*subs)
	}
	for _, w := range ws {
		w.Close()
	}
	gatewaytest.Poll(t, "the ad-hoc consumer groups deleted", func() bool { return e.adHocGroups() == 0 })
}

// adHocGroups counts the consumer groups of ad-hoc WebSocket
// at_least_once subscriptions of the dev tenant.
func (e *wsAckEnv) adHocGroups() int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), gatewaytest.Wait)
	defer cancel()
	gs, err := e.st.Admin.ListGroups(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, g := range gs.Groups() {
		if strings.HasPrefix(g, "aep."+gateway.DevTenant+".ws.") {
			n++
		}
	}
	return n
}

// createDurable creates a durable subscription over HTTP and returns its id.
func (e *wsAckEnv) createDurable(filter string) string {
	e.t.Helper()
	resp, err := http.Post(e.url+"/aep/subscriptions", "application/json", strings.NewReader(`{"type":"subscription.requested","payload":`+filter+`}`))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var created struct {
		ID string `json:"subscription_id"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &created) != nil || created.ID == "" {
		e.t.Fatalf("create %s: %d %s", filter, resp.StatusCode, b)
	}
	return created.ID
}

// A durable subscription is claimed by its real id only, once per session:
// attaching it a second time on the same connection is refused (the
// second claim would fence the first), and the first goes on.
func TestWSDAttachTwiceOnOneSessionIsRefused(t *testing.T) {
	e := newWSAckEnv(t, dialectd.WSConfig{})
	id := e.createDurable(`{"types":["task.*"],"delivery_mode":"at_least_once","ack_timeout_ms":3600000}`)
	w := e.open()
	if got := w.MustSubscribe("evt_a1", fmt.Sprintf(`{"subscription_id":%q}`, id)); got != id {
		t.Fatalf("attached as %s, want %s", got, id)
	}
	m := w.Subscribe("evt_a2", fmt.Sprintf(`{"subscription_id":%q}`, id))
	if m.Type != "subscription.rejected" || m.ErrCode() != "subscription_rejected" || !strings.Contains(string(m.Raw), "already attached") {
		t.Fatalf("second attach: %s", m.Raw)
	}
	e.ingestHTTP(wsEvent("evt_1", "task.started", "agent:x"))
	if d := w.Event(); d.ID != "evt_1" || d.Delivery.SubscriptionID != id {
		t.Fatalf("delivered after the refused attach: %s", d.Raw)
	}
}

// journalAcks reads the tenant's subscription journal: the acks records
// of subscription sub and every id they acknowledge.
func (e *wsAckEnv) journalAcks(sub string) (records int, ids []string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), gatewaytest.Wait)
	defer cancel()
	return gatewaytest.JournalAcks(ctx, e.t, e.st.Admin, []kgo.Opt{e.st.Seeds}, e.dc.JournalTopic(tenant.MustParse(gateway.DevTenant)), sub)
}

// attachWithEvents creates a durable subscription of task.* events,
// attaches a new session to it, publishes n events and reads them: it
// returns the session, the subscription's id and the events' ids.
func (e *wsAckEnv) attachWithEvents(n int) (*gatewaytest.WSD, string, []string) {
	e.t.Helper()
	id := e.createDurable(`{"types":["task.*"],"delivery_mode":"at_least_once","ack_timeout_ms":3600000}`)
	w := e.open()
	w.MustSubscribe("evt_attach", fmt.Sprintf(`{"subscription_id":%q}`, id))
	var ids, evs []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("evt_%04d", i))
		evs = append(evs, wsEvent(ids[i], "task.updated", "agent:x"))
		if len(evs) == 500 || i == n-1 {
			e.ingestHTTP(evs...)
			evs = evs[:0]
		}
	}
	for i := range n {
		if d := w.Event(); d.Delivery.SubscriptionID != id {
			e.t.Fatalf("delivery %d: %s", i, d.Raw)
		}
	}
	return w, id, ids
}

// A burst of 1000 acks over the socket is written as a few journal
// records, not one each, and every ack is applied: once the gateway
// answers the next message, all of them are in the journal.
func TestWSDAckBurstIsBatchedInTheJournal(t *testing.T) {
	// 50 ms: the client's burst of 1000 writes lasts up to a few hundred
	// ms under -race on a shared machine (the 5 ms default then gives ~25
	// records, 4 without -race)
	e := newWSAckEnv(t, dialectd.WSConfig{AckLinger: 50 * time.Millisecond})
	w, id, ids := e.attachWithEvents(1000)
	for _, ev := range ids {
		w.Send(ackMsg("evt_ack_"+ev, ev))
	}
	w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	if m := w.Next(); m.Type != "capabilities.declared" {
		t.Fatalf("after the acks: %s", m.Raw)
	}
	records, acked := e.journalAcks(id)
	seen := map[string]bool{}
	for _, a := range acked {
		seen[a] = true
	}
	t.Logf("1000 acks in %d journal records", records)
	if len(acked) != len(ids) || len(seen) != len(ids) {
		t.Fatalf("the journal holds %d acks (%d distinct) before the answer, want %d", len(acked), len(seen), len(ids))
	}
	if records > 20 {
		t.Fatalf("1000 acks took %d journal records, want a few (at most 20)", records)
	}
	gatewaytest.Poll(t, "every ack applied and committed (durable lag 0)", func() bool { return e.durableLag() == 0 })
}

// failJournal makes the broker refuse every produce to the tenant's
// journal topic (INVALID_RECORD, not retried) while fail holds.
func (e *wsAckEnv) failJournal(fail *atomic.Bool) {
	e.t.Helper()
	topic := e.dc.JournalTopic(tenant.MustParse(gateway.DevTenant))
	ctx, cancel := context.WithTimeout(context.Background(), gatewaytest.Wait)
	defer cancel()
	tds, err := e.st.Admin.ListTopics(ctx, topic)
	if err != nil || tds.Error() != nil {
		e.t.Fatalf("journal topic: %v %v", err, tds.Error())
	}
	tid := tds[topic].ID
	e.st.Cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.ProduceRequest)
		hit := false
		for _, t := range req.Topics {
			hit = hit || t.Topic == topic || t.TopicID == tid
		}
		if !fail.Load() || !hit {
			return nil, nil, false
		}
		e.st.Cluster.KeepControl()
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.InvalidRecord.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// nextAnswer is the next message that answers a client message (skipping
// what the subscription sends on its own: deliveries, redeliveries,
// subscription.expired when its own journal writes fail too).
func nextAnswer(w *gatewaytest.WSD) gatewaytest.DEnvelope {
	for {
		m := w.Next()
		if m.CausationID != "" {
			return m
		}
	}
}

// An ack whose journal write fails is not silent: the client gets
// event.rejected answering its ack (internal_error, retryable, naming the
// event), the failure is counted, and the ack sent again once the journal
// works is written.
func TestWSDAckJournalFailureIsAnswered(t *testing.T) {
	e := newWSAckEnv(t, dialectd.WSConfig{SetupTimeout: 2 * time.Second})
	w, id, ids := e.attachWithEvents(2)
	var fail atomic.Bool
	fail.Store(true)
	e.failJournal(&fail)
	w.Send(ackMsg("evt_ack_1", ids[0]))
	w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	m := nextAnswer(w)
	det, _ := m.Payload["error"].(map[string]any)
	details, _ := det["details"].(map[string]any)
	if m.Type != "event.rejected" || m.CausationID != "evt_ack_1" || m.Str("acknowledged_event_id") != "evt_ack_1" ||
		m.ErrCode() != "internal_error" || det["retryable"] != true || details["event_id"] != ids[0] || details["subscription_id"] != id {
		t.Fatalf("answer to an ack whose journal write failed: %s", m.Raw)
	}
	if m := nextAnswer(w); m.Type != "capabilities.declared" {
		t.Fatalf("after the failed ack: %s", m.Raw)
	}
	if v, _, _ := gatewaytest.MetricSeries(t, e.reg, "aep_websocket_ack_journal_errors_total", nil); v != 1 {
		t.Fatalf("aep_websocket_ack_journal_errors_total %v, want 1", v)
	}
	fail.Store(false)
	w.Send(ackMsg("evt_ack_2", ids[0]))
	w.Send(wsControl("evt_cap2", "capabilities.requested", `{}`))
	if m := nextAnswer(w); m.Type != "capabilities.declared" {
		t.Fatalf("after the ack sent again: %s", m.Raw)
	}
	if _, acked := e.journalAcks(id); fmt.Sprint(acked) != fmt.Sprint([]string{ids[0]}) {
		t.Fatalf("journal acks %v, want [%s]", acked, ids[0])
	}
}

// An ack the gateway cannot use is answered, not dropped silently: no
// acknowledged_event_id, or one over the limits of POST .../acks.
func TestWSDMalformedAckIsAnswered(t *testing.T) {
	e := newWSAckEnv(t, dialectd.WSConfig{})
	w := e.open()
	for _, tc := range []struct{ typ, payload string }{
		{"event.acknowledged", `{}`},
		{"event.acknowledged", `{"acknowledged_event_id":"` + strings.Repeat("x", dialectd.MaxAckIDBytes+1) + `"}`},
		{"event.rejected", `{"acknowledged_event_id":"evt_1","error":{"code":"task_error","message":"` + strings.Repeat("m", dialectd.MaxRejectMessageBytes+1) + `","retryable":false}}`},
		{"event.rejected", `{"acknowledged_event_id":7}`},
		// error-model.md: code, message and retryable are required
		{"event.rejected", `{"acknowledged_event_id":"evt_1"}`},
		{"event.rejected", `{"acknowledged_event_id":"evt_1","error":{"code":"task_error","message":"no"}}`},
		{"event.rejected", `{"acknowledged_event_id":"evt_1","error":{"code":"task_error","retryable":true}}`},
	} {
		w.Send(wsControl("evt_bad_ack", tc.typ, tc.payload))
		if m := w.Next(); m.Type != "event.rejected" || m.CausationID != "evt_bad_ack" || m.ErrCode() != "invalid_envelope" {
			t.Fatalf("%s %.60s: %s", tc.typ, tc.payload, m.Raw)
		}
	}
}

// A retryable rejection over the socket redelivers the event on the
// attached subscription (marked, attempt 2) instead of dead-lettering it.
func TestWSDRetryableRejectionRedelivers(t *testing.T) {
	e := newWSAckEnv(t, dialectd.WSConfig{AckLinger: -1})
	w, _, ids := e.attachWithEvents(1)
	w.Send(wsControl("evt_n1", "event.rejected", `{"acknowledged_event_id":"`+ids[0]+`","error":{"code":"tool_timeout","message":"later","retryable":true}}`))
	n := w.Next()
	if n.Type != "event.redelivered" || n.Str("original_event_id") != ids[0] {
		t.Fatalf("after a retryable rejection: %s (want event.redelivered of %s)", n.Raw, ids[0])
	}
	if a, _ := n.Payload["attempt"].(float64); a != 2 {
		t.Fatalf("redelivery notice: %s (want attempt 2)", n.Raw)
	}
	if d := w.Event(); d.ID != ids[0] {
		t.Fatalf("redelivered: %s", d.Raw)
	}
}

// Batching keeps the client's order: a rejection followed by an ack of
// the same event in one batch dead-letters it (the ack comes too late), as
// when each was applied on its own.
func TestWSDRejectThenAckInOneBatchKeepsOrder(t *testing.T) {
	// an attached subscription: its acks linger (1 s here), so all four
	// are one batch
	e := newWSAckEnv(t, dialectd.WSConfig{AckLinger: time.Second})
	w, _, ids := e.attachWithEvents(2)
	w.Send(wsControl("evt_n1", "event.rejected", `{"acknowledged_event_id":"`+ids[0]+`","error":{"code":"tool_error","message":"cannot","retryable":false}}`))
	w.Send(ackMsg("evt_a1", ids[0]))
	w.Send(ackMsg("evt_a2", ids[1]))
	w.Send(wsControl("evt_n2", "event.rejected", `{"acknowledged_event_id":"`+ids[1]+`","error":{"code":"tool_error","message":"late","retryable":false}}`))
	if n := w.Next(); n.Type != "event.dead_lettered" || n.Str("original_event_id") != ids[0] {
		t.Fatalf("after reject+ack of the first event and ack+reject of the second: %s", n.Raw)
	}
	w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	if m := w.Next(); m.Type != "capabilities.declared" {
		t.Fatalf("evt_2 was acknowledged first, then: %s", m.Raw)
	}
}

// A full ack queue holds the reader back instead of dropping acks: with
// room for 8 and a journal that takes 20 ms per write, 200 acks sent at
// once all reach the journal.
func TestWSDFullAckQueueLosesNothing(t *testing.T) {
	e := newWSAckEnv(t, dialectd.WSConfig{AckQueue: 8, AckBatch: 4, AckLinger: -1})
	w, id, _ := e.attachWithEvents(1)
	topic := e.dc.JournalTopic(tenant.MustParse(gateway.DevTenant))
	var slow atomic.Bool
	slow.Store(true)
	e.st.Cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if slow.Load() {
			for _, t := range r.(*kmsg.ProduceRequest).Topics {
				if t.Topic == topic || t.Topic == "" { // v13+ names topics by id
					e.st.Cluster.SleepControl(func() { time.Sleep(20 * time.Millisecond) })
					break
				}
			}
		}
		return nil, nil, false
	})
	want := map[string]bool{}
	for i := range 200 {
		ev := fmt.Sprintf("evt_unknown_%03d", i) // journaled whether or not the stream knows them
		want[ev] = true
		w.Send(ackMsg("evt_ack_"+ev, ev))
	}
	w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
	if m := nextAnswer(w); m.Type != "capabilities.declared" {
		t.Fatalf("after the acks: %s", m.Raw)
	}
	slow.Store(false)
	records, acked := e.journalAcks(id)
	for _, a := range acked {
		delete(want, a)
	}
	if len(want) != 0 || records < 200/4 {
		t.Fatalf("%d acks in %d journal records; missing %d", len(acked), records, len(want))
	}
}

// BenchmarkWSDAcks measures acks over one socket to an attached durable
// subscription (each one written to the journal on kfake), from the
// client's first write to the answer of the message after the last ack
// (which comes once every ack is in the journal). "each" writes every ack
// as its own journal record, one at a time: the cost of the path before
// batching (one synchronous produce per ack on the reader); "batched" is
// the default (up to 1024 acks a record, 5 ms linger).
func BenchmarkWSDAcks(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  dialectd.WSConfig
	}{
		{"each", dialectd.WSConfig{AckBatch: 1, AckLinger: -1}},
		{"batched", dialectd.WSConfig{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newWSAckEnv(b, bc.cfg)
			w, _, _ := e.attachWithEvents(0)
			msgs := make([]string, b.N)
			for i := range msgs {
				msgs[i] = ackMsg(fmt.Sprintf("evt_ack_%d", i), fmt.Sprintf("evt_%d", i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for _, m := range msgs {
				w.Send(m)
			}
			w.Send(wsControl("evt_cap", "capabilities.requested", `{}`))
			if m := nextAnswer(w); m.Type != "capabilities.declared" {
				b.Fatalf("after the acks: %s", m.Raw)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "acks/s")
		})
	}
}

// A durable subscription attached on a second session takes the stream
// over (newest wins); the first session is told to attach again, which
// keeps the acknowledgement state.
func TestWSDAttachedStreamTakenOverSaysAttachAgain(t *testing.T) {
	e := newWSAckEnv(t, dialectd.WSConfig{})
	w1, id, _ := e.attachWithEvents(1)
	w2 := e.open()
	w2.MustSubscribe("evt_attach2", fmt.Sprintf(`{"subscription_id":%q}`, id))
	m := w1.Next()
	msg, _ := m.Payload["error"].(map[string]any)["message"].(string)
	if m.Type != "subscription.expired" || m.Str("subscription_id") != id || m.Str("reason") != "error" || !strings.Contains(msg, "attach to it again") {
		t.Fatalf("the first session after a second attached: %s", m.Raw)
	}
}

// Acks still queued when the client goes away are written before the
// connection's subscriptions close: the connection's end drains the queue.
func TestWSDAcksQueuedAtCloseAreWritten(t *testing.T) {
	e := newWSAckEnv(t, dialectd.WSConfig{AckLinger: time.Hour}) // only the end writes them
	w, id, ids := e.attachWithEvents(50)
	for _, ev := range ids {
		w.Send(ackMsg("evt_ack_"+ev, ev))
	}
	w.Close()
	gatewaytest.Poll(t, "the 50 acks in the journal", func() bool {
		_, acked := e.journalAcks(id)
		return len(acked) == len(ids)
	})
}
