package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/internal/clitest"
)

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"help", []string{"--help"}, exitOK},
		{"ingest help", []string{"ingest", "--help"}, exitOK},
		{"no benchmark", nil, exitUsage},
		{"unknown", []string{"egress"}, exitUsage},
		{"zero rate", []string{"ingest", "--rate", "0"}, exitUsage},
		{"long duration", []string{"ingest", "--duration", "11m"}, exitUsage},
		{"big batch", []string{"ingest", "--batch", "1001"}, exitUsage},
		{"remote", []string{"ingest", "--url", "http://192.0.2.1:8080"}, exitUsage},
		{"remote broker", []string{"ingest", "--baseline-kafka", "192.0.2.1:9092"}, exitUsage},
		{"help ingest", []string{"help", "ingest"}, exitOK},
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
	for _, cmd := range []string{"ingest", "fanout", "latency", "idle", "cleanup", "http-sink"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{cmd, "--help"}, nil, &out, &errb); code != exitOK || errb.Len() != 0 ||
			!strings.HasPrefix(out.String(), "Usage: aepbench "+cmd) || !strings.Contains(out.String(), "show this help") {
			t.Errorf("%v --help: exit %d, stdout %.60q, stderr %.60q", cmd, code, out.String(), errb.String())
		}
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), []string{cmd, "--no-such-flag"}, nil, &out, &errb); code != exitUsage || out.Len() != 0 ||
			!strings.Contains(errb.String(), "flag provided but not defined") {
			t.Errorf("%v bad flag: exit %d, stdout %.60q", cmd, code, out.String())
		}
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

// ingest end to end over a real gateway, the URL from $AEPCTL_URL as
// aepctl takes it.
func TestIngestAgainstGateway(t *testing.T) {
	g := clitest.NewGateway(t)
	t.Setenv("AEPCTL_URL", g.URL)
	t.Setenv("AEPCTL_TOKEN", "") // dev mode: no key needed
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"ingest", "--dialect", "d", "--events", "40", "--batch", "10", "--max", "--duration", "1m",
		"--baseline-kafka", strings.Join(g.Cluster.ListenAddrs(), ",")}, nil, &out, &errb)
	if code != exitOK {
		t.Fatalf("bench: exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"gateway: " + g.URL + "/aep/events", "accepted 40 events in", "requests by status: 202×4",
		"requests by status: ok×4", "ratio gateway/kafka"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, out.String())
		}
	}
}

// --output json gives one JSON object; --progress reports on stderr while
// the work runs.
func TestIngestJSONOutputAndProgress(t *testing.T) {
	g := clitest.NewGateway(t)
	t.Setenv("AEPCTL_URL", g.URL)
	t.Setenv("AEPCTL_TOKEN", "")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"ingest", "-o", "json", "--progress", "--max", "--events", "40", "--batch", "10"}, nil, &out, &errb); code != exitOK {
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
	for _, want := range []string{"bench: phase gateway (" + g.URL + "/events) started", "bench: phase gateway done in", "40 accepted"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("bench progress lacks %q:\n%s", want, errb.String())
		}
	}
}

// Under --output json a failure is one JSON object on stderr, as aepctl's
// errors are; in text it is the "aepbench: " line.
func TestErrorsAreJSONUnderOutputJSON(t *testing.T) {
	args := []string{"latency", "--url", "http://127.0.0.1:1", "--kafka-brokers", "127.0.0.1:1", "--duration", "1s"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), append(args, "-o", "json"), nil, &out, &errb); code != exitFailed {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitFailed, errb.String())
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(errb.Bytes(), &e); err != nil || !strings.Contains(e.Error.Message, "connection refused") {
		t.Errorf("stderr %q is not the JSON error (%v)", errb.String(), err)
	}
	errb.Reset()
	if code := run(context.Background(), args, nil, &out, &errb); code != exitFailed || !strings.HasPrefix(errb.String(), "aepbench: ") {
		t.Errorf("text: exit %d, stderr %q", code, errb.String())
	}
}
