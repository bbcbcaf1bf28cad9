package main

import (
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/oklog/ulid/v2"
)

func dLine(id, typ, session string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:test","session_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{"note":%q}}`,
		id, typ, session, id)
}

func rLine(id, session string, seq int) string {
	return fmt.Sprintf(`{"aep":"0.1","id":%q,"type":"progress.update","time":"2026-07-09T10:00:00Z","source":"aep://test/agent/t/session/%s","agent":"t","session":%q,"seq":%d,"epoch":0,"data":{"n":%d}}`,
		id, session, session, seq, seq)
}

var resumeRe = regexp.MustCompile(`tail: resume with (--from-cursor|--from) '([^']*)'`)

// aepctl tail against a running gateway, both dialects over both
// transports: events published while it runs are printed, the filter
// narrows them (the other session's or type's events never show), and the
// printed resume point resumes after the last event seen.
func TestTailAgainstGateway(t *testing.T) {
	newStreamGateway(t)
	for _, tc := range []struct {
		dialect, transport string
		filter             []string
	}{
		{"d", "sse", []string{"--types", "task.*", "--session", "sess_keep"}},
		{"d", "ws", []string{"--types", "task.*", "--session", "sess_keep"}},
		{"r", "sse", []string{"--filter", `{"session":"keep-%s"}`}},
		{"r", "ws", []string{"--filter", `{"session":"keep-%s"}`}},
	} {
		t.Run(tc.dialect+"-"+tc.transport, func(t *testing.T) {
			tag := tc.dialect + tc.transport
			keep, other := "sess_keep", "sess_other"
			filter := append([]string(nil), tc.filter...)
			if tc.dialect == "r" {
				keep, other = "keep-"+tag, "other-"+tag
				filter[1] = fmt.Sprintf(filter[1], tag)
			}
			var match, skip []string
			line := func(i int, session string, wanted bool) string {
				if tc.dialect == "d" {
					id := fmt.Sprintf("evt_%s_%d", tag, i)
					typ := "task.progress"
					if !wanted && session == keep {
						typ = "memo.note" // right session, type outside task.*
					}
					if wanted {
						match = append(match, id)
					} else {
						skip = append(skip, id)
					}
					return dLine(id, typ, session)
				}
				id := ulid.Make().String()
				if wanted {
					match = append(match, id)
				} else {
					skip = append(skip, id)
				}
				return rLine(id, session, i)
			}
			args := append([]string{"tail", "--dialect", tc.dialect, "--transport", tc.transport, "--count", "2", "--timeout", "30s", "-o", "ndjson"}, filter...)
			tail := startRun(t, args...)
			tail.waitStderr("stream of dialect")

			var batch []string
			if tc.dialect == "d" {
				batch = []string{line(0, other, false), line(1, keep, true), line(2, keep, false), line(3, keep, true)}
			} else {
				batch = []string{line(0, other, false), line(0, keep, true), line(1, other, false), line(1, keep, true)}
			}
			runOK(t, strings.Join(batch, "\n")+"\n", "publish", "--batch", "1")
			if code := tail.wait(); code != exitOK {
				t.Fatalf("tail: exit %d\n%s", code, tail.err.String())
			}
			out := tail.out.String()
			for _, id := range match {
				if !strings.Contains(out, id) {
					t.Errorf("tail did not print %s:\n%s", id, out)
				}
			}
			for _, id := range skip {
				if strings.Contains(out, id) {
					t.Errorf("the filter let %s through:\n%s", id, out)
				}
			}
			if n := strings.Count(out, "\n"); n != 2 {
				t.Errorf("tail printed %d lines, want 2:\n%s", n, out)
			}

			// Resume: an event published while no tail runs comes first.
			m := resumeRe.FindStringSubmatch(tail.err.String())
			if m == nil {
				t.Fatalf("no resume point on stderr:\n%s", tail.err.String())
			}
			next := []string{line(4, keep, true)}
			if tc.dialect == "r" {
				next = []string{line(2, keep, true)}
			}
			runOK(t, strings.Join(next, "\n")+"\n", "publish")
			args = append([]string{"tail", "--dialect", tc.dialect, "--transport", tc.transport, "--count", "1", "--timeout", "30s", "-o", "ndjson", m[1], m[2]}, filter...)
			out = runOK(t, "", args...)
			if !strings.Contains(out, match[len(match)-1]) || strings.Contains(out, match[0]) || strings.Contains(out, match[1]) {
				t.Errorf("resumed tail printed:\n%s\nwant only %s", out, match[len(match)-1])
			}
		})
	}
}

// The pretty format: one line per event with time, type, source, session
// and the payload.
func TestTailPretty(t *testing.T) {
	newStreamGateway(t)
	tail := startRun(t, "tail", "--dialect", "d", "--types", "task.*", "--count", "1", "--timeout", "30s")
	tail.waitStderr("stream of dialect")
	runOK(t, dLine("evt_pretty_1", "task.progress", "sess_p")+"\n", "publish")
	if code := tail.wait(); code != exitOK {
		t.Fatalf("tail: exit %d\n%s", code, tail.err.String())
	}
	got := strings.Fields(tail.out.String())
	want := []string{"10:00:00.000", "task.progress", "agent:test", "sess_p", `{"note":"evt_pretty_1"}`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("pretty line %q, want fields %q", tail.out.String(), want)
	}
}

// --timeout before --count is exit 1 and names the shortfall; a filter the
// gateway refuses is exit 1 with its error.
func TestTailBoundsAndRefusals(t *testing.T) {
	newStreamGateway(t)
	var out, errb strings.Builder
	code := run(t.Context(), []string{"tail", "--dialect", "d", "--types", "nothing.*", "--count", "1", "--timeout", "1s"}, nil, &out, &errb)
	if code != exitFailed || !strings.Contains(errb.String(), "fewer events than --count") {
		t.Errorf("timeout: exit %d, stderr:\n%s", code, errb.String())
	}
	errb.Reset()
	code = run(t.Context(), []string{"tail", "--dialect", "d", "--types", "a..b"}, nil, &out, &errb)
	if code != exitFailed || !strings.Contains(errb.String(), "400 subscription_rejected") {
		t.Errorf("bad filter: exit %d, stderr:\n%s", code, errb.String())
	}
	errb.Reset()
	code = run(t.Context(), []string{"tail", "--dialect", "r", "--transport", "ws", "--filter", `{"agent":"claude*"}`}, nil, &out, &errb)
	if code != exitFailed || !strings.Contains(errb.String(), "invalid-filter") {
		t.Errorf("bad R filter over ws: exit %d, stderr:\n%s", code, errb.String())
	}
	// Cancelling (Ctrl-C) is a clean exit.
	tail := startRun(t, "tail", "--dialect", "r")
	tail.waitStderr("stream of dialect")
	tail.cancel()
	if code := tail.wait(); code != exitOK {
		t.Errorf("cancelled tail: exit %d\n%s", code, tail.err.String())
	}
}

// cutProxy is a TCP proxy in front of the gateway whose connections the
// test can cut, as a restarting gateway or a dropped network would.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(target, "http://")}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
		}
	})
	t.Cleanup(func() { ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

// cut closes every connection made so far.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// tail --reconnect survives a lost connection: it reopens from the last
// event seen, so the event published while it was away arrives and the one
// before is not repeated.
func TestTailReconnects(t *testing.T) {
	gw := newStreamGateway(t)
	for _, tc := range []struct{ dialect, transport string }{{"d", "sse"}, {"d", "ws"}, {"r", "sse"}, {"r", "ws"}} {
		t.Run(tc.dialect+"-"+tc.transport, func(t *testing.T) {
			proxy := newCutProxy(t, gw)
			tag := "rc-" + tc.dialect + tc.transport
			var ids, lines []string
			for i := range 2 {
				if tc.dialect == "d" {
					ids = append(ids, fmt.Sprintf("evt_%s_%d", tag, i))
					lines = append(lines, dLine(ids[i], "task.progress", "sess_"+tag))
				} else {
					ids = append(ids, ulid.Make().String())
					lines = append(lines, rLine(ids[i], tag, i))
				}
			}
			filter := []string{"--types", "task.*", "--session", "sess_" + tag}
			if tc.dialect == "r" {
				filter = []string{"--filter", `{"session":"` + tag + `"}`}
			}
			tail := startRun(t, append([]string{"tail", "--url", proxy.url(), "--reconnect", "--dialect", tc.dialect, "--transport", tc.transport,
				"--count", "2", "--timeout", "30s", "-o", "ndjson"}, filter...)...)
			tail.waitStderr("open on")
			runOK(t, lines[0]+"\n", "publish")
			if !gatewaytest.Eventually(20*time.Second, 10*time.Millisecond, func() bool { return strings.Contains(tail.out.String(), ids[0]) }) {
				t.Fatalf("first event not printed:\n%s", tail.err.String())
			}
			proxy.cut()
			tail.waitStderr("reconnecting")
			runOK(t, lines[1]+"\n", "publish")
			if code := tail.wait(); code != exitOK {
				t.Fatalf("tail: exit %d\n%s", code, tail.err.String())
			}
			out := tail.out.String()
			events := strings.Count(out, "\n") - strings.Count(out, `"type":"event.replayed"`) // D tells its replay
			once := func(id string) bool { return strings.Count(out, `"id":"`+id+`"`) == 1 }
			if !once(ids[0]) || !once(ids[1]) || events != 2 {
				t.Errorf("printed:\n%s\nstderr:\n%s", out, tail.err.String())
			}
			if strings.Count(tail.err.String(), "open on") < 2 {
				t.Errorf("no second open:\n%s", tail.err.String())
			}
		})
	}
}

// aepctl tail without --dialect (issue 27: a newcomer tailing a gateway
// that receives dialect D events saw nothing): both dialects' streams at
// once, --count over both; a dialect's own flags choose it, both kinds at
// once are a usage error.
func TestTailBothDialectsByDefault(t *testing.T) {
	newStreamGateway(t)
	tail := startRun(t, "tail", "--count", "2", "--timeout", "30s", "-o", "ndjson")
	for range 2 { // each stream says it is open
		tail.waitStderr("stream of dialect")
	}
	gatewaytest.PollFor(t, 10*time.Second, "both streams open", func() bool {
		return strings.Contains(tail.err.String(), "dialect R") && strings.Contains(tail.err.String(), "dialect D")
	})
	rid := ulid.Make().String()
	runOK(t, dLine("evt_both_d", "task.progress", "sess_both")+"\n"+rLine(rid, "both-r", 0)+"\n", "publish", "--batch", "1")
	if code := tail.wait(); code != exitOK {
		t.Fatalf("tail: exit %d\n%s", code, tail.err.String())
	}
	out := tail.out.String()
	if !strings.Contains(out, "evt_both_d") || !strings.Contains(out, rid) || strings.Count(out, "\n") != 2 {
		t.Fatalf("tail printed:\n%s\nwant the D event and the R event", out)
	}
	if n := strings.Count(tail.err.String(), "tail: resume with"); n != 2 {
		t.Errorf("%d resume points on stderr, want one per dialect:\n%s", n, tail.err.String())
	}
	var o, e strings.Builder
	if code := run(t.Context(), []string{"tail", "--types", "task.*", "--filter", "{}"}, nil, &o, &e); code != exitUsage || !strings.Contains(e.String(), "choose one with --dialect") {
		t.Errorf("D and R flags together: exit %d, stderr:\n%s", code, e.String())
	}
}
