package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Two principals of one tenant through the built binary (issue 24): an
// agent bound to agent:a (and R's agent "claude-code") that may send to
// tools, and a dashboard that may only subscribe to task.* and progress.*;
// an admin key of the same tenant has the tenant-wide default policy.
//
//   - the agent publishing as another source or agent, to a target outside
//     its write: scopes, with an event-level authorization of an unknown
//     scheme or an unverifiable bearer, or another tenant_id is refused
//     unauthorized on HTTP and the dialect D WebSocket, and nothing of it is
//     in the log (no token either); an event with a verified bearer lands
//     without its token, on a stream and in the log;
//   - the dashboard subscribing to memory.* is refused on D SSE (403), the
//     D WebSocket (subscription.rejected) and as a durable subscription;
//   - a durable subscription another principal made for memory.* is
//     neither listed to the dashboard nor readable by it;
//   - the dashboard's dialect R streams (SSE and WebSocket) show only
//     progress.* events; its AEP-0004 command (no control scope) is
//     refused unauthorized; the agent's R WebSocket event as another agent
//     is refused;
//   - every record names its publisher (aep-principal, aep-auth, aep-via).
func TestPrincipalsThroughTheBinary(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	line := func(key, opts string) string {
		return strings.TrimSuffix(keyFileLine("acme", key), "\n") + " " + opts + "\n"
	}
	if err := os.WriteFile(keys, []byte(line("k-agent", "principal=agent-a scopes=emit:agent:a,emit:claude-code,write:tool")+
		line("k-dash", "principal=dashboard scopes=subscribe:task.*,subscribe:progress.*")+
		keyFileLine("acme", "k-admin")), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--data-dir", filepath.Join(dir, "data"), "--embedded-kafka-listen", "127.0.0.1:0", "--api-keys", keys)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bearer := func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }
	asA := func(i int, members string) string {
		ev := strings.Replace(dEvent(i, "s_p"), `"agent:researcher"`, `"agent:a"`, 1)
		if members != "" {
			ev = strings.Replace(ev, `"aep_version":"0.1",`, `"aep_version":"0.1",`+members+`,`, 1)
		}
		return ev
	}

	// D over HTTP: one event of six lands.
	batch := []string{
		asA(0, ""),
		strings.Replace(asA(1, ""), `"agent:a"`, `"agent:b"`, 1),
		strings.Replace(asA(2, ""), `"tool:crawler"`, `"agent:ui"`, 1),
		asA(3, `"authorization":{"scheme":"weird","token":"tok-weird"}`),
		asA(4, `"authorization":{"scheme":"bearer","token":"tok-bearer"}`),
		asA(5, `"tenant_id":"org_other"`),
	}
	res, err := g.post(ctx, "/aep/events", "application/x-ndjson", bearer("k-agent"), strings.Join(batch, "\n")+"\n")
	if err != nil || res.status != http.StatusAccepted {
		t.Fatalf("agent batch: %v %d %s", err, res.status, res.body)
	}
	var out struct {
		Accepted int `json:"accepted"`
		Errors   []struct {
			EventIndex int `json:"event_index"`
			Error      struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Accepted != 1 || len(out.Errors) != 5 {
		t.Fatalf("accepted %d, %d errors: want 1 and 5: %s", out.Accepted, len(out.Errors), res.body)
	}
	for i, e := range out.Errors {
		if e.EventIndex != i+1 || e.Error.Code != "unauthorized" {
			t.Errorf("error %d: %+v, want event %d unauthorized", i, e, i+1)
		}
	}

	// A verified event-level bearer (the agent's own key, over the admin's
	// request): accepted, and its token reaches neither a stream nor the log.
	adminSSE := gatewaytest.MustOpenSSE(t, g.URL+"/aep/events?types=task.*&session_id=s_bearer", gatewaytest.SSEOptions{Buffer: 8,
		Header: http.Header{"Authorization": {"Bearer k-admin"}}})
	withBearer := strings.Replace(asA(20, `"authorization":{"scheme":"bearer","token":"k-agent"}`), `"s_p"`, `"s_bearer"`, 1)
	if res, err := g.post(ctx, "/aep/events", "application/json", bearer("k-admin"), withBearer); err != nil || res.status != http.StatusAccepted || strings.Contains(string(res.body), "unauthorized") {
		t.Fatalf("a verified event-level bearer: %v %d %s", err, res.status, res.body)
	}
	got := adminSSE.Until("the bearer event", func(m gatewaytest.SSEMessage) bool { return m.Event == "task.progress" })
	if last := got[len(got)-1].Data; strings.Contains(last, "k-agent") || strings.Contains(last, "authorization") {
		t.Fatalf("the event-level token reached a stream: %s", last)
	}
	adminSSE.Close()

	// D over the WebSocket: the agent's own event is acknowledged, one as
	// agent:b rejected unauthorized.
	ws := gatewaytest.DialWSD(t, gatewaytest.WSURL(g.URL, "/aep"), gatewaytest.WSOptions{Header: http.Header{"Authorization": {"Bearer k-agent"}}})
	ws.Send(asA(10, ""))
	if m := ws.Next(); m.Type != "event.acknowledged" {
		t.Fatalf("own event over the socket: %s", m.Raw)
	}
	ws.Send(strings.Replace(asA(11, ""), `"agent:a"`, `"agent:b"`, 1))
	if m := ws.Next(); m.Type != "event.rejected" || m.ErrCode() != "unauthorized" {
		t.Fatalf("spoofed event over the socket: %s", m.Raw)
	}

	// The dashboard: memory.* refused everywhere, task.* allowed.
	sse := func(types string) *http.Response {
		return gatewaytest.RequestSSE(t, g.URL+"/aep/events?types="+url.QueryEscape(types), gatewaytest.SSEOptions{Header: http.Header{"Authorization": {"Bearer k-dash"}}})
	}
	if r := sse("memory.*"); r.StatusCode != http.StatusForbidden {
		t.Errorf("dashboard SSE memory.*: %d, want 403", r.StatusCode)
	} else if b := readBody(t, r); !strings.Contains(b, `"unauthorized"`) || !strings.Contains(b, "memory.*") {
		t.Errorf("dashboard SSE memory.*: %s", b)
	}
	if r := sse("task.*"); r.StatusCode != http.StatusOK {
		t.Errorf("dashboard SSE task.*: %d", r.StatusCode)
	} else {
		r.Body.Close()
	}
	dws := gatewaytest.DialWSD(t, gatewaytest.WSURL(g.URL, "/aep"), gatewaytest.WSOptions{Header: http.Header{"Authorization": {"Bearer k-dash"}}})
	if m := dws.Subscribe("evt_sub_mem", `{"types":["memory.*"]}`); m.Type != "subscription.rejected" || m.ErrCode() != "unauthorized" {
		t.Errorf("dashboard WebSocket memory.*: %s", m.Raw)
	}
	if res, err := g.post(ctx, "/aep/subscriptions", "application/json", bearer("k-dash"), `{"types":["memory.*"]}`); err != nil || res.status != http.StatusForbidden {
		t.Errorf("dashboard durable memory.*: %v %d %s", err, res.status, res.body)
	}
	// A durable subscription the admin made for memory.* is neither listed
	// to the dashboard nor read by it; its own task.* one is.
	var created struct {
		ID string `json:"subscription_id"`
	}
	res, err = g.post(ctx, "/aep/subscriptions", "application/json", bearer("k-admin"), `{"types":["memory.*"]}`)
	if err != nil || res.status != http.StatusCreated || json.Unmarshal(res.body, &created) != nil || created.ID == "" {
		t.Fatalf("admin durable memory.*: %v %d %s", err, res.status, res.body)
	}
	if res, err := g.post(ctx, "/aep/subscriptions", "application/json", bearer("k-dash"), `{"types":["task.*"]}`); err != nil || res.status != http.StatusCreated {
		t.Fatalf("dashboard durable task.*: %v %d %s", err, res.status, res.body)
	}
	if st, body := getWith(t, g.URL+"/aep/subscriptions", "k-dash"); st != http.StatusOK || strings.Contains(body, created.ID) || !strings.Contains(body, `"task.*"`) {
		t.Errorf("the dashboard's list: %d %s", st, body)
	}
	if st, body := getWith(t, g.URL+"/aep/subscriptions/"+created.ID, "k-dash"); st != http.StatusForbidden {
		t.Errorf("the dashboard reading the admin's memory.* subscription: %d %s", st, body)
	}

	// Dialect R: the agent's batch naming another agent is refused whole;
	// the dashboard's stream shows only progress.* of what the admin posts.
	rHdr := func(k string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + k, "AEP-Version": "0.1"}
	}
	other := strings.Replace(rEvent("s_r", 1), `"agent":"claude-code"`, `"agent":"codex"`, 1)
	if res, err := g.post(ctx, "/events", "application/x-ndjson", rHdr("k-agent"), rEvent("s_r", 0)+"\n"+other+"\n"); err != nil || res.status != http.StatusForbidden {
		t.Fatalf("agent R batch naming codex: %v %d %s", err, res.status, res.body)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/stream?filter="+url.QueryEscape(`{"session":"s_rp"}`), nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer k-dash")
	stream, err := http.DefaultClient.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("dashboard R stream: %v %v", err, stream)
	}
	var rb strings.Builder
	for seq := range 6 {
		ev := rEvent("s_rp", seq)
		if seq%2 == 1 {
			ev = strings.Replace(ev, `"type":"tool.requested"`, `"type":"progress.updated"`, 1)
		}
		rb.WriteString(ev + "\n")
	}
	if res, err := g.post(ctx, "/events", "application/x-ndjson", rHdr("k-admin"), rb.String()); err != nil || res.status != http.StatusAccepted {
		t.Fatalf("admin R batch: %v %d %s", err, res.status, res.body)
	}
	for i, m := range readSSE(ctx, t, stream, 3) {
		if m.event != "progress.updated" || m.id != fmt.Sprintf("s_rp:0:%d", 2*i+1) {
			t.Errorf("dashboard R message %d: %s %s, want progress.updated s_rp:0:%d", i, m.event, m.id, 2*i+1)
		}
	}
	stream.Body.Close()

	// Dialect R over the WebSocket: the agent's event as another agent is
	// refused, its own accepted; the dashboard's subscription is narrowed;
	// its command (no control scope) refused.
	socket := "ws" + strings.TrimPrefix(g.URL, "http") + "/socket"
	emitterHello := `{"type":"hello","versions":["0.1"],"role":"emitter","identity":{"agent":"claude-code"}}`
	em := gatewaytest.DialWSR(t, socket, emitterHello, gatewaytest.WSOptions{Header: http.Header{"Authorization": {"Bearer k-agent"}}})
	em.Send(strings.Replace(rEvent("s_rw", 0), `"agent":"claude-code"`, `"agent":"codex"`, 1))
	if f := em.Next(); f.Str("type") != "error" || f.Str("code") != "unauthorized" {
		t.Fatalf("R WebSocket event as codex: %v", f)
	}
	dashWS := gatewaytest.DialWSR(t, socket, gatewaytest.RConsumerHello, gatewaytest.WSOptions{Header: http.Header{"Authorization": {"Bearer k-dash"}}})
	dashWS.Subscribe("sub-rw", `"filter":{"session":"s_rw"}`)
	for seq := range 4 {
		ev := rEvent("s_rw", seq)
		if seq%2 == 1 {
			ev = strings.Replace(ev, `"type":"tool.requested"`, `"type":"progress.updated"`, 1)
		}
		em.Send(ev) // accepted events get no answer
	}
	for i := range 2 {
		if f := dashWS.Next(); f.Str("type") != "progress.updated" {
			t.Fatalf("dashboard R WebSocket frame %d: %v, want only progress.updated", i, f)
		}
	}
	dashWS.Send(`{"aep":"0.1","id":"c-dash","type":"control.cancel","time":"2026-07-03T10:14:00.000Z","source":"aep://ops/agent/dash","agent":"dash","session":"s_rw","run":"r1","data":{"scope":"run"}}`)
	if f := dashWS.Next(); f.Str("type") != "error" || f.Str("code") != "unauthorized" || f.Str("cause") != "c-dash" {
		t.Fatalf("the dashboard's command: %v", f)
	}

	// The log: the two D events of agent-a, the admin's event with agent-a's
	// bearer, the admin's six R events and agent-a's four over the R
	// WebSocket, each naming its publisher; none of the refused events, nor
	// a token.
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.KafkaAddr), kgo.ConsumeTopics(partitioning.Naming{}.Events("acme")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < 13 && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		recs = append(recs, cl.PollFetches(pctx).Records()...)
		pcancel()
	}
	if len(recs) != 13 {
		t.Fatalf("%d records in the log, want 13", len(recs))
	}
	for _, r := range recs {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		v := string(r.Value)
		if strings.Contains(v, "tok-") || strings.Contains(v, "k-agent") || strings.Contains(v, "org_other") || strings.Contains(v, "agent:b") || strings.Contains(v, "codex") {
			t.Errorf("a refused event is in the log: %s", v)
		}
		want := map[string]string{partitioning.HeaderAuth: "api_key", partitioning.HeaderVia: "http"}
		switch h[partitioning.HeaderDialect] {
		case "D":
			want[partitioning.HeaderPrincipal] = "agent-a"
			switch {
			case strings.Contains(v, `"evt_s_p_0010"`):
				want[partitioning.HeaderVia] = "ws"
			case strings.Contains(v, `"s_bearer"`):
				delete(want, partitioning.HeaderPrincipal) // the admin key's
				want[partitioning.HeaderEventPrincipal] = "agent-a"
			}
		case "R":
			if h[partitioning.HeaderSession] == "s_rw" {
				want[partitioning.HeaderPrincipal], want[partitioning.HeaderVia] = "agent-a", "ws"
			} else if !strings.HasPrefix(h[partitioning.HeaderPrincipal], "key:") {
				t.Errorf("the admin key's record names %q, want key:<digest prefix>", h[partitioning.HeaderPrincipal])
			}
		}
		for k, w := range want {
			if h[k] != w {
				t.Errorf("record %s: header %s = %q, want %q", r.Value[:40], k, h[k], w)
			}
		}
	}
}

func readBody(t *testing.T, r *http.Response) string {
	t.Helper()
	defer r.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// getWith GETs url with key and returns the status and body.
func getWith(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readBody(t, resp)
}
