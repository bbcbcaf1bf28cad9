package main

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestParkIdleStreamsFlag: by default an idle SSE stream served by the
// binary's wiring is parked (aep_sse_parked_streams counts it); with
// --park-idle-streams=false the same stream keeps its goroutine and the
// gauge stays at zero, while the stream works the same.
func TestParkIdleStreamsFlag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flags  []string
		parked string
	}{
		{"default", nil, "aep_sse_parked_streams 1"},
		{"off", []string{"--park-idle-streams=false"}, "aep_sse_parked_streams 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := startGateway(t, tc.flags...)
			req, err := http.NewRequest(http.MethodGet, base+"/aep/events?types=*", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /aep/events: %d", resp.StatusCode)
			}
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, ":") {
				t.Fatalf("first line %q, %v; want the stream-open comment", line, err)
			}
			var page string
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, page = exportedNames(t, base)
				if strings.Contains(page, "\n"+tc.parked+"\n") {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("no %q on /metrics", tc.parked)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
