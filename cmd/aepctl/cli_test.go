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

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/clitest"
)

// "aepctl bench" is a usage error that names aepbench, where the
// benchmarks went.
func TestBenchMoved(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"bench", "fanout"}, nil, &out, &errb); code != exitUsage || out.Len() != 0 ||
		!strings.Contains(errb.String(), "aepbench ingest|fanout|latency|idle|cleanup") {
		t.Errorf("bench: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

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
		{"bench moved", []string{"bench", "ingest", "--max"}, exitUsage},
		{"bench alone", []string{"bench"}, exitUsage},
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
	for _, cmd := range [][]string{{"tail"}, {"publish"}, {"gen"}, {"subscriptions", "create"}, {"subscriptions", "get"}, {"consume"}, {"ack"}, {"reject"}, {"target"}, {"control"}, {"dead-letters"}, {"subscriptions", "list"}, {"subscriptions", "delete"}} {
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

// The CLI end to end over a real gateway: the environment twins and stdin.
func TestRunAgainstGateway(t *testing.T) {
	g := clitest.NewGateway(t)
	t.Setenv("AEPCTL_URL", g.URL)
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
	if n := g.Records(clitest.DevTopic); n != 30 {
		t.Fatalf("topic holds %d records, want 30", n)
	}
}

// --output json gives one JSON object per command; --progress reports on
// stderr while the work runs.
func TestJSONOutputAndProgress(t *testing.T) {
	g := clitest.NewGateway(t)
	t.Setenv("AEPCTL_URL", g.URL)
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
	c := &aepclient.Client{BaseURL: g.URL}
	if _, err := Publish(context.Background(), c, strings.NewReader(ndjson), PublishOptions{Batch: 10, Progress: &prog, ProgressEvery: time.Nanosecond}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(prog.String(), "events/s\n"); n != 3 || !strings.Contains(prog.String(), "publish: done in") {
		t.Errorf("progress lines (%d):\n%s", n, prog.String())
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
