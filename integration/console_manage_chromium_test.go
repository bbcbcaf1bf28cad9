package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// listSubscriptions is GET /aep/subscriptions' ids.
func listSubscriptions(ctx context.Context, t *testing.T, g *gatewayProc, key string) []string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/subscriptions", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Subscriptions []struct {
			ID string `json:"subscription_id"`
		} `json:"subscriptions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list subscriptions: %d %v", resp.StatusCode, err)
	}
	var ids []string
	for _, s := range out.Subscriptions {
		ids = append(ids, s.ID)
	}
	return ids
}

// publisher returns a function that publishes dialect D events (NDJSON) to
// g with key, failing t unless they are accepted.
func publisher(ctx context.Context, t *testing.T, g *gatewayProc, key string) func(events ...string) {
	auth := map[string]string{"Authorization": "Bearer " + key}
	return func(events ...string) {
		t.Helper()
		res, err := g.post(ctx, "/aep/events", "application/x-ndjson", auth, strings.Join(events, "\n")+"\n")
		if err != nil || res.status != http.StatusAccepted {
			t.Fatalf("publish: %v %d %s", err, res.status, res.body)
		}
	}
}

// The console creates and deletes durable subscriptions through the API,
// shows the gateway's refusal of a bad body and the browser's of text that
// is not JSON, and its search narrows the tail to the rows whose event
// contains the text (rows that arrive later included), in headless
// Chromium against the built binary.
func TestConsoleManagesSubscriptionsAndSearchesChromium(t *testing.T) {
	const key = "k-console-manage"
	br, g := startConsole(t, key, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	status := `document.getElementById("subs-status").textContent`
	setBody := func(body string) {
		br.run("type a subscription body", chromedp.SetValue(chromedp.CSS("#sub-body"), body))
	}

	br.run("open the console", chromedp.Navigate(g.URL+"/console/?access_token="+key))
	br.waitFor("the subscriptions status", status+`.startsWith("0 subscriptions")`, status, 10*time.Second)

	// Failure paths first: not JSON, then a body the gateway refuses.
	setBody(`{"types":`)
	br.click("create", "#sub-create")
	br.waitFor("the JSON error", status+`.startsWith("not JSON")`, status, 5*time.Second)
	setBody(`{"types":"task.*","ack_timeout_ms":-5}`)
	br.click("create", "#sub-create")
	br.waitFor("the gateway's refusal", status+`.startsWith("create: HTTP 400")`, status, 5*time.Second)
	if ids := listSubscriptions(ctx, t, g, key); len(ids) != 0 {
		t.Fatalf("refused creations left subscriptions %v", ids)
	}

	setBody(`{"types":["tool.*"],"max_attempts":3}`)
	br.click("create", "#sub-create")
	br.waitFor("the creation", status+`.startsWith("created ")`, status, 10*time.Second)
	ids := listSubscriptions(ctx, t, g, key)
	if len(ids) != 1 || !strings.Contains(br.eval(status), ids[0]) {
		t.Fatalf("API lists %v; console says %q", ids, br.eval(status))
	}
	br.waitFor("its row", `document.querySelectorAll("#subscriptions tbody tr").length === 1`, jsRows("subscriptions"), 10*time.Second)
	if row := br.eval(jsRows("subscriptions")); !strings.HasPrefix(row, ids[0]+`|{"types":["tool.*"]}|`) || !strings.HasSuffix(row, "|Delete") {
		t.Fatalf("subscriptions row %q", row)
	}

	// One click arms Delete (nothing deleted), the second deletes.
	br.click("click Delete once", "#subscriptions button.delete")
	br.waitFor("the confirmation", `document.querySelector("#subscriptions button.delete").textContent === "Confirm delete"`, jsRows("subscriptions"), 5*time.Second)
	time.Sleep(3500 * time.Millisecond) // a periodic refresh in between keeps it armed
	if got := listSubscriptions(ctx, t, g, key); len(got) != 1 {
		t.Fatalf("one click deleted: %v", got)
	}
	br.click("confirm", "#subscriptions button.delete")
	br.waitFor("the row gone", `document.querySelectorAll("#subscriptions tbody tr").length === 0`, jsRows("subscriptions"), 10*time.Second)
	if got := listSubscriptions(ctx, t, g, key); len(got) != 0 {
		t.Fatalf("after delete the API lists %v", got)
	}

	// Search over the tail.
	publish := publisher(ctx, t, g, key)
	visible := `[...document.querySelectorAll("#events tbody tr")].filter((r) => !r.hidden).map((r) => r.cells[1].textContent + ":" + r.cells[3].textContent).join(",")`
	br.click("start the tail", "#start")
	br.waitFor("the tail to open", `document.getElementById("tail-status").textContent.startsWith("live")`, `document.getElementById("tail-status").textContent`, 10*time.Second)
	publish(consoleEvent("evt_s1", "task.progress", "agent:planner", "sess_one", `{"note":"Needle in a haystack"}`),
		consoleEvent("evt_s2", "task.progress", "agent:planner", "sess_two", `{"note":"hay only"}`))
	br.waitFor("2 rows", `document.querySelectorAll("#events tbody tr").length === 2`, jsRows("events"), 10*time.Second)
	br.run("search", chromedp.SendKeys(chromedp.CSS("#search"), "needle"))
	br.waitFor("one row shown", visible+` === "task.progress:sess_one"`, visible, 5*time.Second)
	// A later event: shown only when it matches.
	publish(consoleEvent("evt_s3", "tool.invoked", "agent:coder", "sess_three", `{"tool":"grep needle"}`),
		consoleEvent("evt_s4", "tool.invoked", "agent:coder", "sess_four", `{"tool":"ls"}`))
	br.waitFor("4 rows", `document.querySelectorAll("#events tbody tr").length === 4`, jsRows("events"), 10*time.Second)
	if got := br.eval(visible); got != "tool.invoked:sess_three,task.progress:sess_one" {
		t.Fatalf("visible under the search: %q", got)
	}
	br.eval(`(() => { const s = document.getElementById("search"); s.value = ""; return String(s.dispatchEvent(new Event("input"))); })()`)
	br.waitFor("every row shown", `[...document.querySelectorAll("#events tbody tr")].every((r) => !r.hidden)`, visible, 5*time.Second)
	// The refused creation's 400 is the one expected problem.
	if p := br.problems("favicon.ico", "status of 400 (Bad Request) ("+g.URL+"/aep/subscriptions)"); len(p) > 0 {
		t.Errorf("the page reported problems: %v", p)
	}
}
