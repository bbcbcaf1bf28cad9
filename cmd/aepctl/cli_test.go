package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
