package integration

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// crossOriginPage is the page of another site that uses the gateway with
// the three browser APIs and writes what happened into the DOM (one <li>
// per API, data-done on <body> at the end). Its query names the gateway,
// the key and a run id (the session of the event it publishes).
const crossOriginPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cross-origin client</title>
<style>body{font:14px system-ui,sans-serif;margin:1.5em} li{font-family:monospace}</style></head>
<body>
<h1>A page of <span id="origin"></span> using the gateway at <span id="gw"></span></h1>
<ul id="results"></ul>
<script type="module">
const q = new URLSearchParams(location.search);
const gw = q.get("gw"), key = q.get("key"), run = q.get("run");
document.getElementById("origin").textContent = location.origin;
document.getElementById("gw").textContent = gw;
const report = (name, value) => {
  const li = document.createElement("li");
  li.id = name;
  li.dataset.value = value;
  li.textContent = name + ": " + value;
  document.getElementById("results").append(li);
};
const within = (p, ms, what) => Promise.race([p, new Promise((resolve) => setTimeout(() => resolve(what + ": nothing in " + ms + " ms"), ms))]);
const envelope = (id, type, payload) => JSON.stringify({ aep_version: "0.1", id, type, source: "agent:browser",
  session_id: run, created_at: new Date().toISOString(), payload });

// EventSource: the streaming GET, the key in the query (a browser cannot
// set Authorization on it). Every SSE message is named: listen per type.
const es = new EventSource(gw + "/aep/events?types=browser.*&session_id=" + run + "&access_token=" + encodeURIComponent(key));
let opened;
const open = new Promise((resolve) => { opened = resolve; es.onopen = () => resolve("open"); });
const received = new Promise((resolve) => {
  es.addEventListener("browser.ping", (m) => resolve("received " + JSON.parse(m.data).id));
  es.onerror = () => {
    const state = ["connecting", "open", "closed"][es.readyState];
    opened("error (readyState " + state + ")");
    resolve("error (readyState " + state + ")");
  };
});
report("eventsource-open", await within(open, 10000, "EventSource"));

// fetch: POST ingest with Authorization and a JSON body, so the browser
// sends a preflight first.
try {
  const resp = await fetch(gw + "/aep/events", { method: "POST",
    headers: { "Authorization": "Bearer " + key, "Content-Type": "application/json" },
    body: envelope("evt_" + run + "_ping", "browser.ping", { via: "fetch" }) });
  const body = await resp.json();
  report("fetch", resp.status + " accepted " + body.accepted);
} catch (e) {
  report("fetch", "failed: " + e.name + ": " + e.message);
}
report("eventsource", await within(received, 10000, "EventSource"));
es.close();

// WebSocket: dialect D's /aep with its subprotocol, the key in the query.
report("websocket", await within(new Promise((resolve) => {
  const ws = new WebSocket(gw.replace(/^http/, "ws") + "/aep?access_token=" + encodeURIComponent(key), "aep-0.1");
  ws.onopen = () => ws.send(envelope("evt_" + run + "_open", "session.opened", { session_id: run, version: "0.1" }));
  ws.onmessage = (m) => { resolve("subprotocol " + ws.protocol + ", got " + JSON.parse(m.data).type); ws.close(1000); };
  ws.onclose = (c) => resolve("closed " + c.code + " before any message");
}), 10000, "WebSocket"));
document.body.dataset.done = "1";
</script>
</body></html>
`

// accessLine is one access log line of the gateway.
type accessLine struct {
	Message string `json:"message"`
	Method  string `json:"method"`
	Path    string `json:"path"`
	Status  int    `json:"status"`
}

// accessLog returns the access log lines the gateway wrote so far.
func (g *gatewayProc) accessLog() []accessLine {
	var out []accessLine
	for _, l := range strings.Split(g.logs.String(), "\n") {
		var a accessLine
		if json.Unmarshal([]byte(l), &a) == nil && a.Message == "request" {
			out = append(out, a)
		}
	}
	return out
}

// In a real headless Chromium: a page served from an origin listed in
// --cors-allowed-origins reads a stream with EventSource (?access_token=),
// publishes with fetch (Authorization: a preflight, then the POST) and
// receives its own event on that stream, and opens dialect D's WebSocket
// with subprotocol aep-0.1; the same page from another origin (another
// port of 127.0.0.1) gets nothing: its preflight, its EventSource request
// and its WebSocket handshake are answered 403 (the gateway's access log)
// and its POST is never sent.
func TestBrowserChromiumCrossOrigin(t *testing.T) {
	started := time.Now()
	const key = "k-browser-cors"
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(keyFileLine("acme", key)), 0o600); err != nil {
		t.Fatal(err)
	}
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(crossOriginPage))
	})
	allowed, foreign := httptest.NewServer(page), httptest.NewServer(page)
	defer allowed.Close()
	defer foreign.Close()
	br := startBrowser(t, 30*time.Second) // skips without chromium, before the gateway starts
	g := startGateway(t, "--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0",
		"--api-keys", keys, "--cors-allowed-origins", allowed.URL)
	t.Logf("gateway %s, allowed origin %s, other origin %s", g.URL, allowed.URL, foreign.URL)

	visit := func(origin, run string) map[string]string {
		t.Helper()
		u := origin + "/?" + url.Values{"gw": {g.URL}, "key": {key}, "run": {run}}.Encode()
		br.run("open "+u, chromedp.Navigate(u))
		br.waitFor("the page's results", `document.body.dataset.done === "1"`, `document.body.innerText`, 25*time.Second)
		got := map[string]string{}
		for _, name := range []string{"eventsource-open", "fetch", "eventsource", "websocket"} {
			got[name] = get(br, "result "+name, chromedp.AttributeValue(chromedp.CSS("#"+name), "data-value")).Value
		}
		t.Logf("page of %s: %v", origin, got)
		return got
	}

	got := visit(allowed.URL, "sess_allowed")
	want := map[string]string{
		"eventsource-open": "open",
		"fetch":            "202 accepted 1",
		"eventsource":      "received evt_sess_allowed_ping",
		"websocket":        "subprotocol aep-0.1, got session.ready",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("allowed origin, %s: %q, want %q", k, got[k], v)
		}
	}
	br.screenshot("browser-cors-allowed.png")
	before := len(g.accessLog())

	got = visit(foreign.URL, "sess_foreign")
	if !strings.HasPrefix(got["eventsource-open"], "error") || !strings.HasPrefix(got["eventsource"], "error") {
		t.Errorf("other origin, EventSource: %q then %q, want an error", got["eventsource-open"], got["eventsource"])
	}
	if got["fetch"] != "failed: TypeError: Failed to fetch" {
		t.Errorf("other origin, fetch: %q, want a CORS failure", got["fetch"])
	}
	if got["websocket"] != "closed 1006 before any message" {
		t.Errorf("other origin, WebSocket: %q, want a refused handshake (1006)", got["websocket"])
	}
	br.screenshot("browser-cors-refused.png")

	// What the gateway saw from the other origin's page: three refusals and
	// no POST (the browser does not send it after a refused preflight).
	seen := map[string]int{}
	for _, a := range g.accessLog()[before:] {
		seen[a.Method+" "+a.Path+" "+http.StatusText(a.Status)]++
	}
	for _, k := range []string{"OPTIONS /aep/events Forbidden", "GET /aep/events Forbidden", "GET /aep Forbidden"} {
		if seen[k] == 0 {
			t.Errorf("gateway access log for the other origin lacks %q: %v", k, seen)
		}
	}
	for k := range seen {
		if strings.HasPrefix(k, "POST ") || !strings.HasSuffix(k, " Forbidden") {
			t.Errorf("gateway access log for the other origin: %q answered (%v)", k, seen)
		}
	}
	if ex := br.problems("Access-Control-Allow-Origin", "CORS", "EventSource", "WebSocket", "net::ERR_FAILED", "favicon.ico"); len(ex) > 0 {
		t.Errorf("page problems: %v", ex)
	}
	t.Logf("access log of the other origin's page: %v; test took %v", seen, time.Since(started).Round(time.Millisecond))
}
