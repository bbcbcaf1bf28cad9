package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// consoleEvent is a dialect D event as the console test publishes it.
func consoleEvent(id, typ, source, session, payload string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":%q,"session_id":%q,"created_at":%q,"payload":%s}`,
		id, typ, source, session, time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"), payload)
}

// The web console (/console/, --console) in a real headless Chromium,
// against the built binary with --api-keys: the page loads under its CSP
// with ?access_token=; the live tail shows events published over HTTP
// during the test, each row with its time, type, source, session and
// payload; a filter typed into the box narrows the tail (an event of an
// excluded type, published before one that matches in the same session,
// never shows); a durable subscription's lag appears in the subscriptions
// table (5 after 5 matching events) and falls to 0 once the test has read
// them on the subscription's stream and acknowledged them, with the stream
// and its 5 acks shown. No uncaught exception, CSP violation or failed
// load on the page. Screenshots (AEP_SCREENSHOT_DIR) of each stage.
func TestConsoleChromium(t *testing.T) {
	started := time.Now()
	const key, lagN = "k-console-browser", 5
	br, g := startConsole(t, key, 40*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	auth := map[string]string{"Authorization": "Bearer " + key}
	publish := publisher(ctx, t, g, key)
	tail := func() []string { return strings.Split(br.eval(jsRows("events")), "\n") }
	subs := func() string { return br.eval(jsRows("subscriptions")) }

	br.run("open the console", chromedp.Navigate(g.URL+"/console/?access_token="+key))
	br.waitFor("the health badge", `document.getElementById("health").textContent === "node ready"`, `document.getElementById("health").textContent`, 10*time.Second)
	br.waitFor("the subscriptions status", `document.getElementById("subs-status").textContent.startsWith("0 subscriptions")`, `document.getElementById("subs-status").textContent`, 10*time.Second)

	// The live tail, every type (an empty filter is types=*).
	br.click("start the tail", "#start")
	br.waitFor("the tail to open", `document.getElementById("tail-status").textContent.startsWith("live")`, `document.getElementById("tail-status").textContent`, 10*time.Second)
	publish(
		consoleEvent("evt_c1", "task.progress", "agent:planner", "sess_alpha", `{"step":"collect sources","pct":40}`),
		consoleEvent("evt_c2", "tool.invoked", "agent:coder", "sess_beta", `{"tool":"go test","args":["./..."]}`),
		consoleEvent("evt_c3", "task.progress", "agent:planner", "sess_alpha", `{"step":"summarize","pct":80}`),
		consoleEvent("evt_c4", "task.completed", "agent:planner", "sess_alpha", `{"result":"report.md"}`),
	)
	br.waitFor("4 events in the tail", `document.querySelectorAll("#events tbody tr").length === 4`, jsRows("events"), 10*time.Second)
	rows := tail()
	for _, want := range []string{
		`|task.completed|agent:planner|sess_alpha|{"result":"report.md"}`,
		`|task.progress|agent:planner|sess_alpha|{"step":"summarize","pct":80}`,
		`|tool.invoked|agent:coder|sess_beta|{"tool":"go test","args":["./..."]}`,
		`|task.progress|agent:planner|sess_alpha|{"step":"collect sources","pct":40}`,
	} {
		found := false
		for _, r := range rows {
			found = found || strings.HasSuffix(r, want)
		}
		if !found {
			t.Errorf("tail lacks a row ending %s:\n%s", want, strings.Join(rows, "\n"))
		}
	}
	if got := br.eval(`document.getElementById("tail-status").textContent`); got != "live: 4 events" {
		t.Errorf("tail status %q", got)
	}
	br.screenshot("console-tail.png")

	// A filter that excludes task.*: the tail restarted with it shows the
	// tool event and not the task event published just before it in the
	// same session (one partition, so the task event would have come first).
	br.run("type a filter and restart the tail",
		chromedp.SendKeys(chromedp.CSS("#filter"), "types=tool.*"),
		chromedp.Click(chromedp.CSS("#start")),
		chromedp.Click(chromedp.CSS("#clear")))
	br.waitFor("the filtered tail to open", `document.getElementById("tail-status").textContent === "live (0 events so far)"`, `document.getElementById("tail-status").textContent`, 10*time.Second)
	publish(
		consoleEvent("evt_c5", "task.progress", "agent:planner", "sess_beta", `{"step":"excluded by the filter"}`),
		consoleEvent("evt_c6", "tool.completed", "agent:coder", "sess_beta", `{"tool":"go test","exit":0}`),
	)
	br.waitFor("the tool event in the filtered tail", `document.querySelectorAll("#events tbody tr").length >= 1`, jsRows("events"), 10*time.Second)
	if rows := tail(); len(rows) != 1 || !strings.HasSuffix(rows[0], `|tool.completed|agent:coder|sess_beta|{"tool":"go test","exit":0}`) {
		t.Errorf("filtered tail: want the tool.completed row only:\n%s", strings.Join(rows, "\n"))
	}
	br.screenshot("console-tail-filtered.png")

	// A durable subscription: lag 0, then lagN after lagN matching events.
	res, err := g.post(ctx, "/aep/subscriptions", "application/json", auth, `{"types":["task.*"]}`)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err != nil || res.status != http.StatusCreated || json.Unmarshal(res.body, &created) != nil {
		t.Fatalf("create subscription: %v %d %s", err, res.status, res.body)
	}
	lagIs := func(want, detail string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			br.click("refresh the subscriptions", "#subs-refresh")
			time.Sleep(200 * time.Millisecond)
			got := subs()
			if strings.HasPrefix(got, created.ID+"|") && strings.Contains(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("subscriptions table: want a row of %s with %s (%s), got:\n%s", created.ID, want, detail, got)
			}
		}
	}
	lagIs(`|{"types":["task.*"]}|0|no|`, "lag 0 when created")
	var events []string
	for i := range lagN {
		events = append(events, consoleEvent(fmt.Sprintf("evt_lag_%d", i), "task.progress", "agent:indexer", "sess_gamma", fmt.Sprintf(`{"chunk":%d}`, i)))
	}
	publish(events...)
	lagIs(fmt.Sprintf(`|{"types":["task.*"]}|%d|no|`, lagN), "lag after the events")
	br.screenshot("console-subscriptions-lag.png")

	// Read them on the subscription's stream (this node serves it) and
	// acknowledge them: the lag falls to 0 while the stream stays open.
	stream := openSubscriptionStream(ctx, t, g, key, created.ID)
	var acks []string
	for _, m := range readSSE(ctx, t, stream, lagN) {
		var ev struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil || !strings.HasPrefix(ev.ID, "evt_lag_") {
			t.Fatalf("subscription stream: %s %s (%v)", m.event, m.data, err)
		}
		acks = append(acks, fmt.Sprintf(`{"aep_version":"0.1","id":"evt_ack_%s","type":"event.acknowledged","source":"agent:console-test","created_at":"2026-07-09T10:00:00Z","payload":{"acknowledged_event_id":%q}}`, ev.ID, ev.ID))
	}
	res, err = g.post(ctx, "/aep/subscriptions/"+created.ID+"/acks", "application/json", auth, "["+strings.Join(acks, ",")+"]")
	if err != nil || res.status != http.StatusOK || strings.Count(string(res.body), `"applied"`) != lagN {
		t.Fatalf("acks: %v %d %s", err, res.status, res.body)
	}
	lagIs(fmt.Sprintf(`|{"types":["task.*"]}|0|yes|0|0|0|%d`, lagN), "lag 0 after the acks, the stream open with its acks counted")
	br.screenshot("console-subscriptions-acked.png")

	if p := br.problems("favicon.ico"); len(p) > 0 {
		t.Errorf("the page reported problems: %v", p)
	}
	t.Logf("test took %v", time.Since(started).Round(time.Millisecond))
}
