package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The console over HTTPS in a real headless Chromium (issue 24): the
// page is served over HTTP/2, and 8 EventSource streams open at once from
// it (over HTTP/1.1 a browser holds 6 connections per origin, so the 7th
// and 8th would wait) each receive an event published after they opened:
// they share one HTTP/2 connection.
func TestConsoleOverHTTP2Chromium(t *testing.T) {
	const key = "k-h2-browser"
	dir := t.TempDir()
	ca := newTestCA(t)
	cert, certKey := ca.issue(t, "gateway", 3, true)
	for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": certKey, "keys": []byte(keyFileLine("acme", key))} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The browser does not know the test CA: it is told to accept the
	// certificate (only that check is off; HTTP/2 is negotiated as usual).
	br := startBrowser(t, 60*time.Second, chromedp.Flag("ignore-certificate-errors", true))
	g := startGateway(t, "--data-dir", filepath.Join(dir, "data"), "--embedded-kafka-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--api-keys", filepath.Join(dir, "keys"), "--console",
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	br.run("open the console over HTTPS", chromedp.Navigate(g.URL+"/console/?access_token="+key))
	br.waitFor("the health badge", `document.getElementById("health").textContent === "node ready"`, `document.getElementById("health").textContent`, 15*time.Second)
	if proto := br.eval(`performance.getEntriesByType("navigation")[0].nextHopProtocol`); proto != "h2" {
		t.Fatalf("the console page came over %q, want h2", proto)
	}
	const streams = 8
	br.eval(fmt.Sprintf(`(() => {
		window.h2open = 0; window.h2got = new Array(%d).fill(0); window.h2streams = [];
		for (let i = 0; i < %d; i++) {
			const es = new EventSource("/aep/events?types=task.*&access_token=%s");
			es.addEventListener("open", () => { window.h2open++; });
			es.addEventListener("task.progress", () => { window.h2got[i]++; });
			window.h2streams.push(es);
		}
		return "ok";
	})()`, streams, streams, key))
	br.waitFor("8 streams open", fmt.Sprintf(`window.h2open === %d`, streams), `String(window.h2open)`, 15*time.Second)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	hc := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/aep/events",
		strings.NewReader(consoleEvent("evt_h2", "task.progress", "agent:planner", "sess_h2", `{"pct":50}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("publish: %v %v", err, resp)
	}
	resp.Body.Close()
	br.waitFor("the event on all 8 streams", `window.h2got.every(n => n === 1)`, `JSON.stringify(window.h2got)`, 15*time.Second)
	// 8 streams open at once from one origin: more than HTTP/1.1's 6
	// connections a browser allows, so they share the page's HTTP/2
	// connection.
	if p := br.problems(); len(p) > 0 {
		t.Errorf("page problems: %v", p)
	}
	br.screenshot("console-https-h2.png")
}
