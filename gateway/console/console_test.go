package console_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	for _, want := range []string{`src="console.js?access_token=k%2by%26z"`, `href="console.css?access_token=k%2by%26z"`, `id="events"`, `id="subscriptions"`, `id="health"`} {
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
	for path, ctype := range map[string]string{"/console/console.js": "javascript", "/console/stream.js": "javascript", "/console/console.css": "text/css"} {
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
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the console's stream client is not run")
	}
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
				s = "sess_other"
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
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "--input-type=module", "-e", fmt.Sprintf(nodeScript, "file://"+script), base, "k-node", tc.dialect, tc.filter)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Wait() }()
			lines := bufio.NewScanner(stdout)
			next := func() string {
				t.Helper()
				if !lines.Scan() {
					t.Fatalf("node ended early: %v\n%s", lines.Err(), stderr.String())
				}
				return lines.Text()
			}
			publish := func(ev ...string) {
				t.Helper()
				path := "/aep/events"
				if tc.dialect == "r" {
					path = "/events"
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(strings.Join(ev, "\n")+"\n"))
				req.Header.Set("Content-Type", "application/x-ndjson")
				req.Header.Set("AEP-Version", "0.1")
				req.Header.Set("Authorization", "Bearer k-node")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Fatalf("publish: %d", resp.StatusCode)
				}
			}
			if l := next(); l != "open" {
				t.Fatalf("first line %q\n%s", l, stderr.String())
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
				publish(ev) // one request each: R would refuse nothing, but keeps each in order
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
			publish(skip, keep) // while paused
			io.WriteString(stdin, "go\n")
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
	for _, f := range []string{"console.js", "stream.js"} {
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
