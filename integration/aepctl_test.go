package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	aepctlOnce sync.Once
	aepctlPath string
	aepctlErr  error
)

// aepctlBinary builds cmd/aepctl once per test binary, next to the gateway.
func aepctlBinary(t *testing.T) string {
	t.Helper()
	gatewayBinary(t) // makes buildDir
	aepctlOnce.Do(func() {
		aepctlPath = filepath.Join(buildDir, "aepctl")
		out, err := exec.Command("go", "build", "-ldflags", "-X main.version=v0.0.0-it", "-o", aepctlPath, "../cmd/aepctl").CombinedOutput()
		if err != nil {
			aepctlErr = fmt.Errorf("go build aepctl: %v\n%s", err, out)
		}
	})
	if aepctlErr != nil {
		t.Fatal(aepctlErr)
	}
	return aepctlPath
}

// aepctlCmd is aepctl pointed at g through the environment, with no config
// file.
func aepctlCmd(ctx context.Context, t *testing.T, g *gatewayProc, stdin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, aepctlBinary(t), args...)
	cmd.Env = append(os.Environ(), "AEPCTL_URL="+g.URL, "AEPCTL_TOKEN=", "AEPCTL_PROFILE=",
		"AEPCTL_CONFIG="+filepath.Join(t.TempDir(), "none"))
	cmd.Stdin = strings.NewReader(stdin)
	return cmd
}

// aepctlOK runs aepctl to its end and requires exit 0; it returns stdout.
func aepctlOK(ctx context.Context, t *testing.T, g *gatewayProc, stdin string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := aepctlCmd(ctx, t, g, stdin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("aepctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// The built aepctl against the built gateway: tail prints an event published
// while it runs and its filter keeps the other session out; consume --ack
// drains a durable subscription to lag 0, as "subscriptions get" reports.
func TestAepctlThroughTheBinaries(t *testing.T) {
	b := StartBroker(t)
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if v := aepctlOK(ctx, t, g, "", "--version"); !strings.HasPrefix(v, "aepctl v0.0.0-it ") {
		t.Errorf("--version: %q", v)
	}

	// tail: started before the events, stops after two.
	var tailOut, tailErr syncBuffer
	tail := aepctlCmd(ctx, t, g, "", "tail", "--dialect", "d", "--types", "task.*", "--session", "sess_tail", "--count", "2", "--timeout", "60s", "-o", "ndjson")
	tail.Stdout, tail.Stderr = &tailOut, &tailErr
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	tailDone := make(chan error, 1)
	go func() { tailDone <- tail.Wait() }()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(tailErr.String(), "open on"); {
		if time.Now().After(deadline) {
			t.Fatalf("tail did not open its stream:\n%s", tailErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var lines []string
	for i := range 4 {
		session := "sess_tail"
		if i%2 == 1 {
			session = "sess_elsewhere"
		}
		lines = append(lines, dEvent(i, session))
	}
	if out := aepctlOK(ctx, t, g, strings.Join(lines, "\n")+"\n", "publish"); !strings.Contains(out, "total: 4 events, 4 accepted") {
		t.Fatalf("publish:\n%s", out)
	}
	select {
	case err := <-tailDone:
		if err != nil {
			t.Fatalf("tail: %v\n%s", err, tailErr.String())
		}
	case <-ctx.Done():
		t.Fatalf("tail did not end:\n%s", tailErr.String())
	}
	got := tailOut.String()
	if !strings.Contains(got, `"evt_sess_tail_0000"`) || !strings.Contains(got, `"evt_sess_tail_0002"`) || strings.Contains(got, "sess_elsewhere") {
		t.Errorf("tail printed:\n%s", got)
	}
	if !strings.Contains(tailErr.String(), "tail: resume with --from-cursor '") {
		t.Errorf("tail gave no resume point:\n%s", tailErr.String())
	}

	// consume --ack drains a durable subscription.
	id := strings.TrimSpace(aepctlOK(ctx, t, g, "", "subscriptions", "create", "--types", "task.*"))
	lines = lines[:0]
	for i := range 30 {
		lines = append(lines, dEvent(100+i, fmt.Sprintf("sess_sub_%d", i%4)))
	}
	aepctlOK(ctx, t, g, strings.Join(lines, "\n")+"\n", "publish")
	lag := func() (int64, string) {
		var s struct {
			Lag *int64 `json:"lag"`
		}
		raw := aepctlOK(ctx, t, g, "", "subscriptions", "get", id, "-o", "json")
		if err := json.Unmarshal([]byte(raw), &s); err != nil || s.Lag == nil {
			t.Fatalf("subscriptions get -o json: %v: %s", err, raw)
		}
		return *s.Lag, raw
	}
	waitLag := func(want int64, when string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if n, raw := lag(); n == want {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("lag %s: %s, want %d", when, raw, want)
			}
		}
	}
	waitLag(30, "before consume")
	out := aepctlOK(ctx, t, g, "", "consume", "--subscription", id, "--ack", "--count", "30", "--timeout", "60s", "-o", "ndjson")
	if n := strings.Count(out, "\n"); n != 30 {
		t.Errorf("consume printed %d events, want 30", n)
	}
	waitLag(0, "after consume --ack")
	if text := aepctlOK(ctx, t, g, "", "subscriptions", "get", id); !strings.Contains(text, "lag           0") {
		t.Errorf("subscriptions get:\n%s", text)
	}
}
