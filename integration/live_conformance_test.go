package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvLiveJS overrides the live endpoint checker run by TestLiveConformance
// (default: the vendored copy, testdata/aep-r-live/live.js);
// scripts/live-check.sh runs it by hand the same way.
const EnvLiveJS = "AEP_LIVE_JS"

// EnvLiveRequired=1 makes TestLiveConformance fail rather than skip when
// node (with a WebSocket client) is missing: CI sets it.
const EnvLiveRequired = "AEP_LIVE_REQUIRED"

// EnvLiveReport names a file that gets one line per live.js run saying
// every check passed (go test shows a passing test's log only with -v):
// CI sets it and prints the file.
const EnvLiveReport = "AEP_IT_LIVE_REPORT"

// vendoredLiveJS is the checker's copy in this repository
// (testdata/aep-r-live/README.md names its source and licence).
const vendoredLiveJS = "testdata/aep-r-live/live.js"

// liveModes are the live-delivery modes the checker runs against: the
// default, and filter workers in every node (--role all).
var liveModes = []string{"tail", "workers"}

// liveReport is the aep-conformance-report live.js writes with --json.
type liveReport struct {
	Checks []struct {
		Name, Status, Detail string
	}
	OK bool
}

// The R spec's live endpoint checker against two gateway nodes on one
// Kafka, with --token, --evict (a --replay-buffer 256 deployment) and a
// control-capable target (aepctl target) connected to the other node, then
// to the checker's node: every check passes; the only one skipped is
// control-auth-gate, which live.js skips on an authenticated run by design
// and which passes on an unauthenticated run against a development-mode
// node. All of it in each live-delivery mode: tail, and workers with every
// node also running a filter worker (--live-delivery workers --role all).
func TestLiveConformance(t *testing.T) {
	liveJS := os.Getenv(EnvLiveJS)
	if liveJS == "" {
		liveJS = vendoredLiveJS
	}
	liveJS, err := filepath.Abs(liveJS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(liveJS); err != nil {
		t.Fatalf("live.js: %v", err)
	}
	nodeArgs, err := nodeWithWebSocket()
	if err != nil {
		if os.Getenv(EnvLiveRequired) == "1" {
			t.Fatalf("%v (%s=1)", err, EnvLiveRequired)
		}
		t.Skip(err.Error())
	}
	b := StartBroker(t)
	aepctl := buildAepctl(t, t.TempDir())
	for _, mode := range liveModes {
		t.Run(mode, func(t *testing.T) { testLiveConformance(t, b, nodeArgs, liveJS, aepctl, mode) })
	}
}

func testLiveConformance(t *testing.T, b *Broker, nodeArgs []string, liveJS, aepctl, mode string) {
	dir := t.TempDir()
	var raw [24]byte
	_, _ = rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(token))
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("default sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	common := append([]string{"--kafka-brokers", strings.Join(b.Seeds, ","), "--topic-template", prefix + ".{tenant}.events",
		"--topic-partitions", "3", "--topic-replication-factor", "1", "--replay-buffer", "256"}, liveModeArgs(mode, prefix)...)
	gA := startGateway(t, append(common, "--api-keys", keys, "--node-id", "a")...)
	gB := startGateway(t, append(common, "--api-keys", keys, "--node-id", "b")...)
	gDev := startGateway(t, append(common, "--node-id", "dev")...)

	for _, c := range []struct {
		name   string
		target *gatewayProc
	}{{"target on the other node", gB}, {"target on the same node", gA}} {
		t.Run(c.name, func(t *testing.T) {
			session := fmt.Sprintf("live-target-%d", time.Now().UnixNano())
			run := session + "-run"
			startTarget(t, aepctl, c.target.URL, token, session, run)
			rep := runLive(t, nodeArgs, liveJS, gA.URL, "--token", token, "--evict",
				"--control-session", session, "--control-cancel", run, "--ack-window", "3000")
			passed := 0
			for _, ch := range rep.Checks {
				t.Logf("%s %s: %s", ch.Status, ch.Name, ch.Detail)
				if ch.Status == "fail" || ch.Status == "skip" && ch.Name != "control-auth-gate" {
					t.Errorf("%s %s: %s", ch.Status, ch.Name, ch.Detail)
				}
				if ch.Status == "pass" {
					passed++
				}
			}
			if len(rep.Checks) != 19 {
				t.Errorf("%d checks ran, want live.js's 19", len(rep.Checks))
			}
			if !t.Failed() {
				reportLive(t, fmt.Sprintf("live.js %s mode, %s: %d of %d checks passed (control-auth-gate skipped: authenticated run)",
					mode, c.name, passed, len(rep.Checks)))
			}
		})
	}
	rep := runLive(t, nodeArgs, liveJS, gDev.URL, "--checks", "control-auth-gate")
	if len(rep.Checks) != 1 || rep.Checks[0].Status != "pass" {
		t.Errorf("unauthenticated control-auth-gate: %+v", rep.Checks)
	} else {
		reportLive(t, fmt.Sprintf("live.js %s mode, unauthenticated: control-auth-gate passed", mode))
	}
}

// reportLive logs line and appends it to the EnvLiveReport file, if set.
func reportLive(t *testing.T, line string) {
	t.Helper()
	line = "TestLiveConformance: " + line
	t.Log(line)
	appendReport(t, EnvLiveReport, line)
}

// appendReport appends line to the file the environment variable env
// names, if set: go test shows a passing test's log only with -v, so CI
// prints these files after the tests.
func appendReport(t testing.TB, env, line string) {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("%s: %v", env, err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		t.Errorf("%s: %v", env, err)
	}
}

// nodeWithWebSocket returns the node flags that give live.js its global
// WebSocket: none on node 22, --experimental-websocket on 20 and 21, and
// on older ones (Debian's nodejs 18) the ws package (Debian's node-ws)
// installed as the global by testdata/aep-r-live/ws-global.js.
func nodeWithWebSocket() ([]string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return nil, fmt.Errorf("node is not installed: live.js needs node >= 20, or an older one with the ws package")
	}
	shim, err := filepath.Abs("testdata/aep-r-live/ws-global.js")
	if err != nil {
		return nil, err
	}
	for _, flags := range [][]string{nil, {"--experimental-websocket"}, {"--require", shim}} {
		out, err := exec.Command("node", append(flags, "-e", "process.stdout.write(typeof WebSocket)")...).Output()
		if err == nil && string(out) == "function" {
			return flags, nil
		}
	}
	return nil, fmt.Errorf("this node has no WebSocket client: live.js needs node >= 22, 20/21 with --experimental-websocket, or the ws package (Debian: node-ws)")
}

func buildAepctl(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "aepctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/aepctl").CombinedOutput(); err != nil {
		t.Fatalf("go build aepctl: %v\n%s", err, out)
	}
	return bin
}

// startTarget runs aepctl target until the test ends; it returns once the
// target has claimed its session.
func startTarget(t *testing.T, bin, url, token, session, run string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "target", "--url", url, "--token", token, "--session", session, "--run", run)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		for l := range lines {
			t.Logf("target: %s", l)
		}
	})
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, "target ready") {
			t.Fatalf("target did not start: %q", l)
		}
		t.Logf("target: %s", l)
	case <-time.After(30 * time.Second):
		t.Fatal("target did not start in time")
	}
	time.Sleep(500 * time.Millisecond) // its claim reaches the other nodes through Kafka
}

// runLive runs live.js with --json - and returns its report.
func runLive(t *testing.T, nodeArgs []string, liveJS, base string, args ...string) liveReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	argv := append(append(append([]string(nil), nodeArgs...), liveJS, base, "--json", "-"), args...)
	cmd := exec.CommandContext(ctx, "node", argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var rep liveReport
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		t.Fatalf("live.js: %v (%v)\n%s\n%s", jerr, err, out, stderr.String())
	}
	return rep
}
