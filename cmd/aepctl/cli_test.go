package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"no command", nil, exitUsage},
		{"unknown command", []string{"frobnicate"}, exitUsage},
		{"top help", []string{"--help"}, exitOK},
		{"publish help", []string{"publish", "--help"}, exitOK},
		{"gen help", []string{"gen", "--help"}, exitOK},
		{"bench help", []string{"bench", "--help"}, exitOK},
		{"bench ingest help", []string{"bench", "ingest", "--help"}, exitOK},
		{"bench without ingest", []string{"bench"}, exitUsage},
		{"bench unknown", []string{"bench", "egress"}, exitUsage},
		{"version", []string{"--version"}, exitOK},
		{"help config", []string{"help", "config"}, exitOK},
		{"help tail", []string{"help", "tail"}, exitOK},
		{"tail help", []string{"tail", "--help"}, exitOK},
		{"tail bad transport", []string{"tail", "--transport", "udp"}, exitUsage},
		{"tail bad output", []string{"tail", "-o", "xml"}, exitUsage},
		{"tail R filter on D", []string{"tail", "--dialect", "d", "--filter", "{}"}, exitUsage},
		{"tail D filter on R", []string{"tail", "--dialect", "r", "--types", "a.*"}, exitUsage},
		{"tail R filter not object", []string{"tail", "--filter", "[1]"}, exitUsage},
		{"tail bad from", []string{"tail", "--from", "s:0:1"}, exitUsage},
		{"tail at_least_once", []string{"tail", "--dialect", "d", "--mode", "at_least_once"}, exitUsage},
		{"subscriptions alone", []string{"subscriptions"}, exitUsage},
		{"subscriptions help", []string{"subscriptions", "--help"}, exitOK},
		{"subscriptions create help", []string{"subscriptions", "create", "--help"}, exitOK},
		{"subscriptions create no anchor", []string{"subscriptions", "create", "--session", "s"}, exitUsage},
		{"subscriptions get no id", []string{"subscriptions", "get"}, exitUsage},
		{"subscriptions unknown", []string{"subscriptions", "frob"}, exitUsage},
		{"ack no subscription", []string{"ack", "evt_1"}, exitUsage},
		{"reject no ids", []string{"reject", "--subscription", "sub_1"}, exitUsage},
		{"consume help", []string{"consume", "--help"}, exitOK},
		{"consume no subscription", []string{"consume"}, exitUsage},
		{"consume reject without ack", []string{"consume", "--subscription", "s", "--reject-types", "a.*"}, exitUsage},
		{"consume bad reject types", []string{"consume", "--subscription", "s", "--ack", "--reject-types", "a..b"}, exitUsage},
		{"publish bad output", []string{"publish", "-o", "yaml"}, exitUsage},
		{"publish bad flag", []string{"publish", "--nope"}, exitUsage},
		{"publish bad dialect", []string{"publish", "--dialect", "x"}, exitUsage},
		{"publish two files", []string{"publish", "a", "b"}, exitUsage},
		{"publish missing file", []string{"publish", "/nonexistent/aepctl-test"}, exitFailed},
		{"gen bad sessions", []string{"gen", "--sessions", "0"}, exitUsage},
		{"bench zero rate", []string{"bench", "ingest", "--rate", "0"}, exitUsage},
		{"bench long duration", []string{"bench", "ingest", "--duration", "11m"}, exitUsage},
		{"bench big batch", []string{"bench", "ingest", "--batch", "1001"}, exitUsage},
		{"bench remote", []string{"bench", "ingest", "--url", "http://192.0.2.1:8080"}, exitUsage},
		{"bench remote broker", []string{"bench", "ingest", "--baseline-kafka", "192.0.2.1:9092"}, exitUsage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if got := run(context.Background(), tc.args, strings.NewReader(""), &out, &errb); got != tc.want {
				t.Fatalf("exit %d, want %d; stderr: %s", got, tc.want, errb.String())
			}
		})
	}
}

// --help goes to stdout (so it pages), a usage error's text to stderr.
func TestHelpGoesToStdout(t *testing.T) {
	for _, cmd := range [][]string{{"tail"}, {"publish"}, {"gen"}, {"bench", "ingest"}, {"subscriptions", "create"}, {"subscriptions", "get"}, {"consume"}, {"ack"}, {"reject"}, {"target"}, {"control"}, {"dead-letters"}, {"subscriptions", "list"}, {"subscriptions", "delete"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append(cmd, "--help"), nil, &out, &errb); code != exitOK || errb.Len() != 0 ||
			!strings.HasPrefix(out.String(), "Usage: aepctl "+strings.Join(cmd, " ")) || !strings.Contains(out.String(), "show this help") {
			t.Errorf("%v --help: exit %d, stdout %.60q, stderr %.60q", cmd, code, out.String(), errb.String())
		}
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), append(cmd, "--no-such-flag"), nil, &out, &errb); code != exitUsage || out.Len() != 0 ||
			!strings.Contains(errb.String(), "flag provided but not defined") {
			t.Errorf("%v bad flag: exit %d, stdout %.60q", cmd, code, out.String())
		}
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	run(context.Background(), []string{"version"}, nil, &out, &errb)
	if !strings.HasPrefix(out.String(), "aepctl ") || !strings.Contains(out.String(), runtime.Version()) {
		t.Errorf("version without ldflags: %q", out.String())
	}
	version = "v9.8.7"
	t.Cleanup(func() { version = "" })
	out.Reset()
	run(context.Background(), []string{"--version"}, nil, &out, &errb)
	if !strings.HasPrefix(out.String(), "aepctl v9.8.7 ") {
		t.Errorf("version with -X main.version: %q", out.String())
	}
}

func TestCheckLoopback(t *testing.T) {
	tests := []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1", true},
		{"127.9.9.9", true},
		{"::1", true},
		{"localhost", true},
		{"10.0.0.1", false},
		{"192.0.2.1", false},
		{"::ffff:10.0.0.1", false},
	}
	for _, tc := range tests {
		if err := checkLoopback(tc.host); (err == nil) != tc.ok {
			t.Errorf("checkLoopback(%q) = %v, want ok=%v", tc.host, err, tc.ok)
		}
	}
}

// The CLI end to end over a real gateway: the environment twins, stdin, and
// bench ingest's report.
func TestRunAgainstGateway(t *testing.T) {
	g := newTestGateway(t)
	t.Setenv("AEPCTL_URL", g.url)
	t.Setenv("AEPCTL_TOKEN", "") // dev mode: no key needed

	var events, errb bytes.Buffer
	if code := run(context.Background(), []string{"gen", "--events", "30", "--sessions", "4"}, nil, &events, &errb); code != exitOK {
		t.Fatalf("gen: exit %d: %s", code, errb.String())
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"publish", "--batch", "7", "-"}, &events, &out, &errb); code != exitOK {
		t.Fatalf("publish: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "total: 30 events, 30 accepted, 0 rejected, 0 failed, 5 batches, 5 requests") {
		t.Fatalf("publish output:\n%s", out.String())
	}
	if n := g.records(devTopic); n != 30 {
		t.Fatalf("topic holds %d records, want 30", n)
	}

	out.Reset()
	code := run(context.Background(), []string{"bench", "ingest", "--dialect", "d", "--events", "40", "--batch", "10", "--max", "--duration", "1m",
		"--baseline-kafka", strings.Join(g.cluster.ListenAddrs(), ",")}, nil, &out, &errb)
	if code != exitOK {
		t.Fatalf("bench: exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"gateway: " + g.url + "/aep/events", "accepted 40 events in", "requests by status: 202×4",
		"requests by status: ok×4", "ratio gateway/kafka"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, out.String())
		}
	}
}

// --output json gives one JSON object per command; --progress reports on
// stderr while the work runs.
func TestJSONOutputAndProgress(t *testing.T) {
	g := newTestGateway(t)
	t.Setenv("AEPCTL_URL", g.url)
	t.Setenv("AEPCTL_TOKEN", "")
	events := runOK(t, "", "gen", "--events", "25", "-o", "json")
	var arr []map[string]any
	if err := json.Unmarshal([]byte(events), &arr); err != nil || len(arr) != 25 {
		t.Fatalf("gen -o json: %d events, %v", len(arr), err)
	}
	ndjson := runOK(t, "", "gen", "--events", "25")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"publish", "-o", "json", "--progress", "--batch", "10"}, strings.NewReader(ndjson), &out, &errb); code != exitOK {
		t.Fatalf("publish: exit %d: %s", code, errb.String())
	}
	var sum PublishSummary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum != (PublishSummary{Events: 25, Accepted: 25, Requests: 3, Batches: 3}) {
		t.Errorf("publish -o json: %s (%v)", out.String(), err)
	}
	if !strings.Contains(errb.String(), "publish: done in ") || !strings.Contains(errb.String(), "25 accepted") {
		t.Errorf("publish progress:\n%s", errb.String())
	}

	// Periodic lines: with a period shorter than a batch, one per batch.
	var prog bytes.Buffer
	c := &Client{BaseURL: g.url}
	if _, err := Publish(context.Background(), c, strings.NewReader(ndjson), PublishOptions{Batch: 10, Progress: &prog, ProgressEvery: time.Nanosecond}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(prog.String(), "events/s\n"); n != 3 || !strings.Contains(prog.String(), "publish: done in") {
		t.Errorf("progress lines (%d):\n%s", n, prog.String())
	}

	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"bench", "ingest", "-o", "json", "--progress", "--max", "--events", "40", "--batch", "10"}, nil, &out, &errb); code != exitOK {
		t.Fatalf("bench: exit %d: %s", code, errb.String())
	}
	var rep struct {
		Dialect string `json:"dialect"`
		Gateway struct {
			Accepted int            `json:"accepted"`
			ByStatus map[string]int `json:"requests_by_status"`
			Latency  struct {
				P50 float64 `json:"p50"`
			} `json:"latency_ms"`
		} `json:"gateway"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Dialect != "R" || rep.Gateway.Accepted != 40 || rep.Gateway.ByStatus["202"] != 4 || rep.Gateway.Latency.P50 <= 0 {
		t.Errorf("bench -o json: %s (%v)", out.String(), err)
	}
	for _, want := range []string{"bench: phase gateway (" + g.url + "/events) started", "bench: phase gateway done in", "40 accepted"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("bench progress lacks %q:\n%s", want, errb.String())
		}
	}
}

// Under --output json an error is one JSON object on stderr (it was text),
// with the gateway's status and code when it answered; text mode keeps the
// "aepctl: " line.
func TestErrorsAreJSONUnderOutputJSON(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":"not_found","detail":"no subscription sub_x"}`)
	}))
	defer hs.Close()
	for _, args := range [][]string{
		{"subscriptions", "get", "sub_x", "-o", "json", "--url", hs.URL},
		{"subscriptions", "get", "sub_x", "--output=json", "--url", hs.URL},
		{"publish", "/nonexistent/aepctl-test", "--output", "json"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &out, &errb); code != exitFailed {
			t.Fatalf("%v: exit %d, want %d", args, code, exitFailed)
		}
		var got struct {
			Error struct {
				Message string `json:"message"`
				Status  int    `json:"status"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(errb.Bytes(), &got); err != nil || got.Error.Message == "" {
			t.Fatalf("%v: stderr %q is not a JSON error (%v)", args, errb.String(), err)
		}
		if args[0] == "subscriptions" && (got.Error.Status != 404 || got.Error.Code == "") {
			t.Errorf("%v: %+v, want status 404 and the gateway's code", args, got.Error)
		}
	}
	var errb bytes.Buffer
	run(context.Background(), []string{"subscriptions", "get", "sub_x", "--url", hs.URL}, strings.NewReader(""), io.Discard, &errb)
	if !strings.HasPrefix(errb.String(), "aepctl: ") {
		t.Fatalf("text mode stderr %q", errb.String())
	}
}
