package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// startConsole starts a headless Chromium (skipping without one, before
// the gateway starts) and the built gateway with --console, an embedded
// broker and key as the API key of tenant acme; timeout bounds the
// browser's work.
func startConsole(t *testing.T, key string, timeout time.Duration) (*browser, *gatewayProc) {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(keyFileLine("acme", key)), 0o600); err != nil {
		t.Fatal(err)
	}
	br := startBrowser(t, timeout)
	return br, startGateway(t, "--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0", "--api-keys", keys, "--console")
}

// openSubscriptionStream opens the SSE stream of durable subscription id
// with key; it is closed when the test ends.
func openSubscriptionStream(ctx context.Context, t *testing.T, g *gatewayProc, key, id string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/subscriptions/"+id+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("subscription stream: %v %v", err, resp)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// jsRows reads a console table: one line per row, the cells joined by "|".
func jsRows(table string) string {
	return `[...document.querySelectorAll("#` + table + ` tbody tr")].map((r) => [...r.cells].map((c) => c.textContent).join("|")).join("\n")`
}

// The console's sessions, redeliveries and dead-letters panels in a real
// headless Chromium, against the built binary with --api-keys --console:
// a dialect R session published during the test shows with its latest
// event and (epoch, seq) and its event count, a dialect D session with "-"
// for the position; a durable subscription whose stream holds an
// unacknowledged event shows redeliveries; an event rejected on that
// stream appears in the dead-letters panel with its subscription, type and
// error (read from GET /aep/dead-letters). Screenshots (AEP_SCREENSHOT_DIR).
func TestConsolePanelsChromium(t *testing.T) {
	const key = "k-console-panels"
	br, g := startConsole(t, key, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	auth := map[string]string{"Authorization": "Bearer " + key, "AEP-Version": "0.1"}
	post := func(path, ctype, body string, want int) []byte {
		t.Helper()
		res, err := g.post(ctx, path, ctype, auth, body)
		if err != nil || res.status != want {
			t.Fatalf("POST %s: %v %d %s", path, err, res.status, res.body)
		}
		return res.body
	}

	br.run("open the console", chromedp.Navigate(g.URL+"/console/?access_token="+key))
	br.waitFor("both session streams live", `document.getElementById("sessions-status").textContent.endsWith("R stream live, D stream live")`,
		`document.getElementById("sessions-status").textContent`, 15*time.Second)
	br.waitFor("the dead-letters status", `document.getElementById("dl-status").textContent.startsWith("0 dead letters")`,
		`document.getElementById("dl-status").textContent`, 10*time.Second)

	// Sessions: three events of R session spanel in epoch 1, one D event.
	post("/events", "application/x-ndjson", rEventE("spanel", 1, 0)+"\n"+rEventE("spanel", 1, 1)+"\n"+rEventE("spanel", 1, 2)+"\n", http.StatusAccepted)
	post("/aep/events", "application/x-ndjson", consoleEvent("evt_p1", "task.progress", "agent:planner", "sess_dpanel", `{"pct":10}`)+"\n", http.StatusAccepted)
	br.waitFor("both sessions listed", `document.querySelectorAll("#sessions tbody tr").length === 2`, jsRows("sessions"), 10*time.Second)
	rows := br.eval(jsRows("sessions"))
	for _, want := range []string{"spanel|R|claude-code|tool.requested|1:2|10:14:00.000|3", "sess_dpanel|D|agent:planner|task.progress|-|"} {
		if !strings.Contains(rows, want) {
			t.Errorf("sessions table lacks %q:\n%s", want, rows)
		}
	}
	// Most recently active first: the D event was published last.
	if r := strings.Split(rows, "\n"); !strings.HasPrefix(r[0], "sess_dpanel|") || strings.Split(r[0], "|")[6] != "1" {
		t.Errorf("the D session is not first with 1 event:\n%s", rows)
	}
	br.screenshot("console-sessions.png")

	// A durable subscription redelivering after 200 ms; its stream is held
	// open here: evt_dl_keep is never acknowledged, evt_dl_bad is rejected.
	body := post("/aep/subscriptions", "application/json", `{"types":["task.*"],"ack_timeout_ms":200,"max_attempts":100}`, http.StatusCreated)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatal(err)
	}
	stream := openSubscriptionStream(ctx, t, g, key, created.ID)
	post("/aep/events", "application/x-ndjson", consoleEvent("evt_dl_keep", "task.progress", "agent:indexer", "sess_dl", `{"n":1}`)+"\n"+
		consoleEvent("evt_dl_bad", "task.failed", "agent:indexer", "sess_dl", `{"n":2}`)+"\n", http.StatusAccepted)
	readSSE(ctx, t, stream, 2)
	post("/aep/subscriptions/"+created.ID+"/acks", "application/json",
		`{"aep_version":"0.1","id":"evt_rej_1","type":"event.rejected","source":"agent:console-test","created_at":"2026-07-09T10:00:00Z","payload":{"acknowledged_event_id":"evt_dl_bad","error":{"code":"task_error","message":"cannot index","retryable":false}}}`,
		http.StatusOK)

	// The subscriptions table counts the redeliveries of evt_dl_keep (the
	// 6th cell) and the dead letter (the 7th).
	deadline := time.Now().Add(15 * time.Second)
	for {
		br.click("refresh the subscriptions", "#subs-refresh")
		time.Sleep(300 * time.Millisecond)
		cells := strings.Split(br.eval(jsRows("subscriptions")), "|")
		if len(cells) == 9 && cells[0] == created.ID && cells[3] == "yes" {
			redelivered, _ := strconv.Atoi(cells[5])
			if redelivered >= 1 && cells[6] == "1" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscriptions table: want %s streaming with redeliveries >= 1 and 1 dead letter, got %q", created.ID, cells)
		}
	}

	br.click("refresh the dead letters", "#dl-refresh")
	br.waitFor("the dead letter listed", `document.querySelectorAll("#dead-letters tbody tr").length === 1`, jsRows("dead-letters"), 10*time.Second)
	dl := br.eval(jsRows("dead-letters"))
	if want := fmt.Sprintf("|%s|evt_dl_bad|task.failed|1|task_error: cannot index", created.ID); !strings.Contains(dl, want) {
		t.Errorf("dead letters panel: want %q, got %q", want, dl)
	}
	if got := br.eval(`document.getElementById("dl-status").textContent`); !strings.HasPrefix(got, "1 dead letter,") {
		t.Errorf("dead letters status %q", got)
	}
	br.screenshot("console-dead-letters.png")

	if p := br.problems("favicon.ico"); len(p) > 0 {
		t.Errorf("the page reported problems: %v", p)
	}
}
