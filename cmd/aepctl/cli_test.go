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
