package dialectd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// wsAckEnv is a gateway on kfake with the D WebSocket binding at /aep and
// the durable subscriptions API at /aep/subscriptions, one engine behind
// both, its metrics (and the binding's) in reg.
type wsAckEnv struct {
	*wsEnv
	st  *gatewaytest.Stack
	reg *prometheus.Registry
}

func newWSAckEnv(t *testing.T, cfg dialectd.WSConfig) *wsAckEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	e, st := newWSEnvOn(t, cfg, reg, func(st *gatewaytest.Stack, eng *engine.Engine) {
		subs := dialectd.NewSubscriptionsHandler(eng, st.Keyring, dialectd.SubscriptionsConfig{Logger: zerolog.New(io.Discard), CommitInterval: 50 * time.Millisecond})
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
// 32 per connection receives exactly the events of its type pattern, and
// the acks of all of them settle (the durable lag falls to 0).
func TestWSDAtLeastOnceSubscriptionsOfSeveralConnectionsDoNotCollide(t *testing.T) {
	for _, conns := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d connections", conns), func(t *testing.T) {
			testWSDNoCollision(t, conns, 32, 2)
		})
	}
}

func testWSDNoCollision(t *testing.T, conns, subs, perSub int) {
	e := newWSAckEnv(t, dialectd.WSConfig{AckPolicy: engine.AckPolicy{AckTimeout: time.Hour}})
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
