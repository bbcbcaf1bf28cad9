package integration

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// gatewayBinary builds cmd/aep-gateway once per test binary: the tests run
// the product as operators do, as a process that can be killed.
// AEP_GATEWAY_BIN names a prebuilt binary to run instead.
func gatewayBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("AEP_GATEWAY_BIN"); bin != "" {
		return bin // a binary built elsewhere, e.g. a baseline to compare with
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "aep-gateway-it-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "aep-gateway")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/aep-gateway").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// gatewayProc is one running aep-gateway process.
type gatewayProc struct {
	t         testing.TB
	cmd       *exec.Cmd
	URL       string // http://host:port
	AdminURL  string // the --admin-listen listener's, if any
	KafkaAddr string // the embedded broker's address, if any
	logs      *syncBuffer
	exited    chan struct{}
	waitErr   error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startGateway runs the binary with args (plus --listen on a free port and
// JSON logs) and waits until it logs that it serves.
func startGateway(t *testing.T, args ...string) *gatewayProc {
	t.Helper()
	return startGatewayUnder(t, nil, args...)
}

// taskStatesGroup gives the task-state workers of the gateways of one test
// (one --topic-template on the shared external broker) a consumer group of
// their own, as separate deployments would have: every test's gateways in
// one group would rebalance each other all run long.
func taskStatesGroup(args []string) []string {
	tmpl := ""
	for i, a := range args {
		if a == "--task-states-group" || strings.HasPrefix(a, "--task-states-group=") {
			return nil
		}
		if a == "--topic-template" && i+1 < len(args) {
			tmpl = args[i+1]
		}
	}
	if tmpl == "" {
		return nil
	}
	return []string{"--task-states-group", "aep-task-states." + strings.NewReplacer("{", "", "}", "").Replace(tmpl)}
}

// startGatewayUnder is startGateway with the binary run by a wrapper
// command (for example prlimit, to give it a small descriptor limit).
func startGatewayUnder(t testing.TB, wrapper []string, args ...string) *gatewayProc {
	t.Helper()
	bin := gatewayBinary(t)
	args = append(args, taskStatesGroup(args)...)
	args = append([]string{bin, "--listen", "127.0.0.1:0", "--log-format", "json", "--shutdown-timeout", "20s"}, args...)
	args = append(append([]string{}, wrapper...), args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "AEP_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{t: t, cmd: cmd, logs: &syncBuffer{}, exited: make(chan struct{})}
	ready := make(chan struct{})
	var once sync.Once
	scanned := make(chan struct{}) // closed once stderr is read to its end
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = g.logs.Write([]byte(line + "\n"))
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			msg, _ := m["message"].(string)
			switch {
			case strings.HasPrefix(msg, "embedded Kafka-protocol broker started"):
				g.KafkaAddr, _ = m["kafka"].(string)
			case msg == "aep-gateway serving":
				g.URL, _ = m["listen"].(string)
				g.AdminURL, _ = m["admin"].(string)
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() {
		// Wait closes the pipe once the process exited: only after the
		// reader saw its end, or the last lines ("aep-gateway stopped")
		// could be lost (os/exec: StderrPipe).
		<-scanned
		g.waitErr = cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(func() {
		_ = g.cmd.Process.Kill()
		<-g.exited
		if t.Failed() {
			t.Logf("gateway logs:\n%s", g.logs.String())
		}
	})
	select {
	case <-ready:
	case <-g.exited:
		t.Fatalf("gateway exited before serving: %v\n%s", g.waitErr, g.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not start serving in time:\n%s", g.logs.String())
	}
	g.waitReady()
	return g
}

// waitReady polls /readyz (the admin listener's, with one) until the
// broker answers.
func (g *gatewayProc) waitReady() {
	g.t.Helper()
	var err error
	base := cmp.Or(g.AdminURL, g.URL)
	ready := gatewaytest.Eventually(30*time.Second, 50*time.Millisecond, func() bool {
		var resp *http.Response
		if resp, err = http.Get(base + "/readyz"); err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ready {
		g.t.Fatalf("gateway never became ready: %v\n%s", err, g.logs.String())
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (g *gatewayProc) kill() {
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.exited
}

// stop sends SIGTERM and requires a clean exit.
func (g *gatewayProc) stop() {
	g.t.Helper()
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		g.t.Fatalf("gateway did not stop on SIGTERM:\n%s", g.logs.String())
	}
	if g.waitErr != nil {
		g.t.Fatalf("gateway exited with %v:\n%s", g.waitErr, g.logs.String())
	}
}

type httpResult struct {
	status int
	body   []byte
}

func (g *gatewayProc) post(ctx context.Context, path, ctype string, hdr map[string]string, body string) (httpResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+path, strings.NewReader(body))
	if err != nil {
		return httpResult{}, err
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpResult{status: resp.StatusCode, body: b}, err
}
