package console_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/console"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest/streamtest"
)

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestHandlerServesThePageAndItsAssets(t *testing.T) {
	hs := httptest.NewServer(http.StripPrefix("/console", console.Handler()))
	defer hs.Close()

	resp, body := get(t, hs.URL+"/console/?access_token=k%2By%26z")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %v", resp.StatusCode, resp.Header)
	}
	for _, want := range []string{`src="console.js?access_token=k%2by%26z"`, `href="console.css?access_token=k%2by%26z"`, `href="favicon.svg?access_token=k%2by%26z"`, `id="events"`, `id="subscriptions"`, `id="health"`, `id="sessions"`, `id="dead-letters"`} {
		if !strings.Contains(strings.ToLower(body), strings.ToLower(want)) {
			t.Errorf("page lacks %s", want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("headers: %v", resp.Header)
	}
	if _, body := get(t, hs.URL+"/console/"); strings.Contains(body, "access_token") {
		t.Errorf("page without a key mentions one")
	}
	// The key is the query's access_token only; nothing else of the query
	// is reflected.
	if _, body := get(t, hs.URL+"/console/?x=%22%3E%3Cscript%3E"); strings.Contains(body, "<script>") {
		t.Errorf("page reflects the query")
	}
	for path, ctype := range map[string]string{"/console/console.js": "javascript", "/console/stream.js": "javascript", "/console/panels.js": "javascript", "/console/fleet.js": "javascript", "/console/fleetview.js": "javascript", "/console/console.css": "text/css", "/console/favicon.svg": "image/svg+xml"} {
		resp, body := get(t, hs.URL+path)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), ctype) || len(body) < 100 {
			t.Errorf("%s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	for _, path := range []string{"/console/nope.js", "/console/static/index.html", "/console/../console.go", "/console/index.html/x"} {
		if resp, _ := get(t, hs.URL+path); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", path, resp.StatusCode)
		}
	}
	resp, err := http.Post(hs.URL+"/console/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

// stack is a gateway on kfake with the streaming bindings and the console
// mounted as cmd/aep-gateway mounts them; with key set, behind API keys.
func stack(t *testing.T, key string) string {
	t.Helper()
	o := gatewaytest.Options{Partitions: 3, Config: func(c *gateway.Config) {
		if key != "" {
			sum := sha256.Sum256([]byte(key))
			ks, err := gateway.ParseKeyStore(strings.NewReader("default sha256:" + hex.EncodeToString(sum[:]) + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			c.Keys = ks
		}
	}}
	return streamtest.New(t, o, func(srv *gateway.Server) {
		srv.Mount(aep.DialectD, "/console/*", http.StripPrefix("/console", console.Handler()))
	}).URL
}

// Behind API keys the page and its assets need the key, given as
// access_token, as the API does.
func TestConsoleBehindAuthentication(t *testing.T) {
	base := stack(t, "k-console")
	if resp, _ := get(t, base+"/console/"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a key: %d", resp.StatusCode)
	}
	resp, body := get(t, base+"/console/?access_token=k-console")
	if resp.StatusCode != 200 || !strings.Contains(body, "console.js?access_token=k-console") {
		t.Fatalf("with a key: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := get(t, base+"/console/console.js?access_token=k-console"); resp.StatusCode != 200 {
		t.Errorf("asset with the key: %d", resp.StatusCode)
	}
	if resp, _ := get(t, base+"/console/stream.js?access_token=wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("asset with a wrong key: %d", resp.StatusCode)
	}
}

// nodeRun is a Node process running a test script; the test reads its
// stdout line by line and unblocks it with go().
type nodeRun struct {
	t      *testing.T
	stdin  io.Writer
	lines  *bufio.Scanner
	stderr *lockedBuffer
}

// lockedBuffer is the process's stderr, written by exec's copier and read
// by the test when it fails.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNode runs script as an ES module with args, or skips the test when
// node is not installed. The process is killed at the test's end.
func startNode(t *testing.T, script string, args ...string) *nodeRun {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the console's scripts are not run")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	cmd := exec.CommandContext(ctx, node, append([]string{"--input-type=module", "-e", script}, args...)...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	n := &nodeRun{t: t, stdin: stdin, lines: bufio.NewScanner(stdout), stderr: &lockedBuffer{}}
	cmd.Stderr = n.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	return n
}

// next returns the next line, failing when there is none.
func (n *nodeRun) next() string {
	n.t.Helper()
	if !n.lines.Scan() {
		n.t.Fatalf("node ended early: %v\n%s", n.lines.Err(), n.stderr.String())
	}
	return n.lines.Text()
}

// goOn unblocks the script's next wait for a line on stdin.
func (n *nodeRun) goOn() { _, _ = io.WriteString(n.stdin, "go\n") }

// publish posts NDJSON events of dialect d ("d" or "r") with the key.
func publish(t *testing.T, base, key, d string, events ...string) {
	t.Helper()
	path := "/aep/events"
	if d == "r" {
		path = "/events"
	}
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(strings.Join(events, "\n")+"\n"))
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("AEP-Version", "0.1")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
}

// nodeScript drives stream.js, the console's streaming client, under Node
// against a running gateway: it prints "open" when the stream is
// subscribed, then each event id; after two it "pauses" (aborts) and
// resumes from the Resume point, printing what came meanwhile.
const nodeScript = `
import { tail, Resume, getJSON } from %q;
const [base, token, dialect, filter] = process.argv.slice(1);
const resume = new Resume();
let ctrl = new AbortController(), n = 0;
try {
  for await (const m of tail({ base, token, dialect, filter, resume, signal: ctrl.signal, onOpen: () => console.log("open") })) {
    console.log("event " + m.event.id + " " + m.type);
    if (++n === 2) ctrl.abort();
  }
} catch (e) { if (!ctrl.signal.aborted) throw e; }
console.log("paused");
await new Promise((r) => process.stdin.once("data", r)); // the test published meanwhile
ctrl = new AbortController();
for await (const m of tail({ base, token, dialect, filter, resume, signal: ctrl.signal })) {
  console.log("event " + m.event.id + " " + m.type);
  break;
}
const subs = await getJSON(base, token, "/aep/subscriptions");
console.log("subscriptions " + subs.subscriptions.length);
process.exit(0);
`

// The console's stream client against a real gateway, both dialects: events
// published during the test arrive whatever their type (no EventSource
// listener list), the filter narrows them, and pause/resume misses nothing.
func TestStreamJSAgainstGateway(t *testing.T) {
	base := stack(t, "k-node")
	script, err := filepath.Abs("static/stream.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dialect, filter string
		events          func(i int, keep bool) (id, line string)
	}{
		{"d", "types=task.*&session_id=sess_keep", func(i int, keep bool) (string, string) {
			id, s, typ := fmt.Sprintf("evt_node_%d", i), "sess_keep", "task.progress"
			if !keep {
				// another event, so another id: one source's ids are unique, and
				// the gateway writes an event it already has once
				s, id = "sess_other", fmt.Sprintf("evt_other_%d", i)
			}
			if i == 1 {
				typ = "task.completed" // another type: the wildcard still gets it
			}
			return id, fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:t","session_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{}}`, id, typ, s)
		}},
		{"r", `{"session":"keep"}`, func(i int, keep bool) (string, string) {
			id, s := fmt.Sprintf("01JX9YB0AAAA0000000000%04d", i), "keep"
			if !keep {
				s, id = "other", fmt.Sprintf("01JX9YB0AAAA0000000001%04d", i)
			}
			return id, fmt.Sprintf(`{"aep":"0.1","id":%q,"type":"progress.update","time":"2026-07-09T10:00:00Z","source":"aep://t/agent/a/session/%s","agent":"a","session":%q,"seq":%d,"epoch":0,"data":{}}`, id, s, s, i)
		}},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			n := startNode(t, fmt.Sprintf(nodeScript, "file://"+script), base, "k-node", tc.dialect, tc.filter)
			next := n.next
			if l := next(); l != "open" {
				t.Fatalf("first line %q\n%s", l, n.stderr.String())
			}
			var want []string
			var batch []string
			for i := range 2 {
				_, skip := tc.events(i, false)
				id, keep := tc.events(i, true)
				want = append(want, id)
				batch = append(batch, skip, keep)
			}
			for _, ev := range batch {
				publish(t, base, "k-node", tc.dialect, ev)
			}
			for _, id := range want {
				if l := next(); !strings.HasPrefix(l, "event "+id+" ") {
					t.Errorf("got %q, want event %s", l, id)
				}
			}
			if l := next(); l != "paused" {
				t.Fatalf("got %q, want paused", l)
			}
			_, skip := tc.events(2, false)
			id, keep := tc.events(2, true)
			publish(t, base, "k-node", tc.dialect, skip, keep) // while paused
			n.goOn()
			if l := next(); !strings.HasPrefix(l, "event "+id+" ") {
				t.Errorf("after resume: %q, want event %s", l, id)
			}
			if l := next(); l != "subscriptions 0" {
				t.Errorf("getJSON: %q", l)
			}
		})
	}
}

// The page's DOM code has no browser to run in here; Node checks its syntax.
func TestConsoleJSSyntax(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	for _, f := range []string{"console.js", "stream.js", "panels.js", "fleet.js", "fleetview.js"} {
		src, err := os.ReadFile(filepath.Join("static", f))
		if err != nil {
			t.Fatal(err)
		}
		mjs := filepath.Join(t.TempDir(), strings.TrimSuffix(f, ".js")+".mjs") // an ES module for any Node version
		if err := os.WriteFile(mjs, src, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(node, "--check", mjs).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
	}
}

// domScript runs console.js, the page itself, under Node with a minimal
// stand-in for the few DOM calls it makes, against a running gateway: the
// test drives the form and the Pause button as a user would and reads what
// the page put in its tables.
const domScript = `
const [base, token, consoleJS] = process.argv.slice(1);
class El {
  constructor(tag) {
    Object.assign(this, { tagName: tag, children: [], textContent: "", className: "", dataset: {}, listeners: {}, value: "", disabled: false, placeholder: "" });
    this.classList = { toggle: (c, on) => { this.className = on ? c : ""; } };
  }
  append(...cs) { for (const c of cs) { c.parent = this; this.children.push(c); } }
  prepend(c) { c.parent = this; this.children.unshift(c); }
  replaceChildren(...cs) { this.children = []; this.append(...cs); }
  remove() { this.parent.children = this.parent.children.filter((c) => c !== this); }
  get rows() { return this.children; }
  get lastElementChild() { return this.children[this.children.length - 1]; }
  addEventListener(type, f) { this.listeners[type] = f; }
  setAttribute(k, v) { this[k] = v; }
  text() { return this.children.map((c) => c.textContent).join("|"); }
}
const els = {};
for (const id of ["health", "tail-form", "dialect", "filter", "start", "pause", "clear", "tail-status", "events", "subs-status", "subs-refresh", "subscriptions", "sessions", "sessions-status", "dead-letters", "dl-status", "dl-refresh", "search", "sub-form", "sub-body", "sub-create", "fleet-summary", "agents", "rates", "timeline-title", "timeline"]) els[id] = new El("x");
for (const id of ["events", "subscriptions", "sessions", "dead-letters", "agents", "timeline"]) els[id].tBodies = [new El("tbody")];
els.dialect.value = "d";
els.filter.value = "types=task.*&session_id=sess_dom";
els.pause.textContent = "Pause";
globalThis.document = { getElementById: (id) => els[id], createElement: (t) => new El(t), createElementNS: (_, t) => new El(t) };
globalThis.location = { search: "?access_token=" + token, origin: base };
const realFetch = globalThis.fetch;
globalThis.fetch = (u, o) => realFetch(new URL(u, base), o);
const until = async (f) => { for (let i = 0; i < 1000 && !f(); i++) await new Promise((r) => setTimeout(r, 20)); };
const line = () => new Promise((r) => process.stdin.once("data", r));

await import(consoleJS + "?access_token=" + token);
await until(() => els.health.textContent !== "" && els["subs-status"].textContent !== "");
console.log("health " + els.health.textContent + " (" + els.health.className + ")");
console.log("subs " + els.subscriptions.tBodies[0].children.map((r) => r.text()).join(" / "));
els["tail-form"].listeners.submit({ preventDefault() {} });
await until(() => els["tail-status"].textContent.startsWith("live"));
console.log("open " + els["tail-status"].textContent);
await line(); // the test published one event
const rows = els.events.tBodies[0];
await until(() => rows.children.length >= 1);
console.log("row " + rows.children[0].text());
els.pause.listeners.click();
console.log("status " + els["tail-status"].textContent + "; button " + els.pause.textContent);
await line(); // the test published another event while paused
els.pause.listeners.click();
await until(() => rows.children.length >= 3); // the event missed while paused, then event.replayed
console.log("rows " + rows.children.length + ": " + rows.children.map((r) => r.text()).join(" / "));
const sessions = els.sessions.tBodies[0];
await until(() => sessions.children.some((r) => r.text().split("|")[6] === "2"));
console.log("sessions " + sessions.children.map((r) => r.text()).join(" / "));
const subsRow = () => els.subscriptions.tBodies[0].children.map((r) => r.text()).join(" / ");
await els["subs-refresh"].listeners.click();
console.log("subs " + subsRow());
await line(); // the test acknowledged both events on the subscription's stream
await els["subs-refresh"].listeners.click();
console.log("subs " + subsRow());
process.exit(0);
`

// The page itself (console.js) against a gateway, under a stand-in DOM: the
// health badge, the subscriptions table with its lag, the live tail showing
// an event published during the test, and pause/resume missing nothing.
func TestConsolePageAgainstGateway(t *testing.T) {
	base := stack(t, "k-dom")
	req, _ := http.NewRequest(http.MethodPost, base+"/aep/subscriptions", strings.NewReader(`{"types":["task.*"]}`))
	req.Header.Set("Authorization", "Bearer k-dom")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create subscription: %d %v", resp.StatusCode, err)
	}
	event := func(id string) string {
		return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":"task.progress","source":"agent:dom","session_id":"sess_dom","created_at":"2026-07-09T10:00:01Z","payload":{"n":%q}}`, id, id)
	}
	script, err := filepath.Abs("static/console.js")
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, domScript, base, "k-dom", "file://"+script)
	next := func(prefix string) string {
		t.Helper()
		l := n.next()
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("got %q, want %s...", l, prefix)
		}
		return l
	}
	if l := next("health "); l != "health node ready (badge ok)" {
		t.Errorf("%s", l)
	}
	if l := next("subs "); !strings.Contains(l, "sub_") || !strings.Contains(l, `{"types":["task.*"]}|0|no`) {
		t.Errorf("subscriptions table: %s", l)
	}
	next("open live")
	publish(t, base, "k-dom", "d", event("evt_dom_1"))
	n.goOn()
	if l := next("row "); l != `row 10:00:01.000|task.progress|agent:dom|sess_dom|{"n":"evt_dom_1"}` {
		t.Errorf("%s", l)
	}
	if l := next("status "); l != "status paused after 1 events; button Resume" {
		t.Errorf("%s", l)
	}
	publish(t, base, "k-dom", "d", event("evt_dom_2"))
	n.goOn()
	// Resume replays from the cursor of evt_dom_1: evt_dom_2 once, and the
	// gateway's event.replayed (newest first). evt_dom_2 is replayed
	// (events_replayed 1), or live when the node's shared tail reader, kept
	// open by the page's sessions panel, had not read it yet at the request
	// moment (events_replayed 0): once either way.
	l := next("rows ")
	if !strings.HasPrefix(l, "rows 3: ") || strings.Count(l, "evt_dom_2") != 1 || strings.Count(l, `"n":"evt_dom_1"`) != 1 ||
		!strings.Contains(l, `|event.replayed|aep-gateway|-|{"from_cursor":`) ||
		!(strings.Contains(l, `"events_replayed":1}`) || strings.Contains(l, `"events_replayed":0}`)) {
		t.Errorf("after resume: %s", l)
	}
	// The sessions panel followed the D stream all along: sess_dom, its
	// latest event, no position (dialect D), 2 events.
	if l := next("sessions "); l != "sessions sess_dom|D|agent:dom|task.progress|-|10:00:01.000|2|0|0|0|0|progress" {
		t.Errorf("%s", l)
	}
	// Both events match the durable subscription: its lag is 2 until they
	// are acknowledged on its stream, then 0.
	if l := next("subs "); !strings.Contains(l, "|2|no|") {
		t.Errorf("lag before acks: %s", l)
	}
	ackAll(t, base, "k-dom", created.ID, 2)
	n.goOn()
	if l := next("subs "); !strings.Contains(l, "|0|no|") {
		t.Errorf("lag after acks: %s", l)
	}
}

// ackAll reads n events of a durable subscription's stream, acknowledges
// them, closes the stream and waits until the gateway reports lag 0.
func ackAll(t *testing.T, base, key, id string, n int) {
	t.Helper()
	s := gatewaytest.MustOpenSSE(t, base+"/aep/subscriptions/"+id+"/stream", gatewaytest.SSEOptions{Header: http.Header{"Authorization": {"Bearer " + key}}})
	var acks []string
	for len(acks) < n {
		if m := s.Next(); m.HasData {
			var ev struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal([]byte(m.Data), &ev)
			acks = append(acks, fmt.Sprintf(`{"type":"event.acknowledged","payload":{"acknowledged_event_id":%q}}`, ev.ID))
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/aep/subscriptions/"+id+"/acks", strings.NewReader("["+strings.Join(acks, ",")+"]"))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	ar, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(ar.Body)
	ar.Body.Close()
	if strings.Count(string(b), `"applied"`) != n {
		t.Fatalf("acks: %d %s", ar.StatusCode, b)
	}
	s.Close() // the stream's end commits what was acknowledged
	var lag int64
	if !gatewaytest.Eventually(20*time.Second, 50*time.Millisecond, func() bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/aep/subscriptions/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Lag       int64 `json:"lag"`
			Streaming bool  `json:"streaming"`
		}
		_ = json.NewDecoder(r.Body).Decode(&st)
		r.Body.Close()
		lag = st.Lag
		return st.Lag == 0 && !st.Streaming
	}) {
		t.Fatalf("lag stayed %d", lag)
	}
}
