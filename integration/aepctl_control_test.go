package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// aepctlExit runs aepctl to its end and returns its exit code and stdout.
func aepctlExit(ctx context.Context, t *testing.T, g *gatewayProc, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := aepctlCmd(ctx, t, g, "", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	}
	t.Fatalf("aepctl %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb.String())
	return 0, ""
}

// AEP-0004 through the binaries, on an authenticated gateway: "aepctl
// target" claims a session, "aepctl control cancel" gets its ack (exit 0)
// and the run.cancelled outcome, a second cancel is the target's nack
// (exit 3); without the key the gateway refuses the connection (exit 1).
func TestAepctlControlThroughTheBinaries(t *testing.T) {
	const key = "k-aepctl-control"
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(keyFileLine("acme", key)), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--data-dir", t.TempDir(), "--embedded-kafka-listen", "127.0.0.1:0", "--api-keys", keys)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	target := aepctlCmd(ctx, t, g, "", "target", "--token", key, "--session", "s-it", "--run", "r-it", "--accepts", "control.cancel")
	stdout, err := target.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var terr bytes.Buffer
	target.Stderr = &terr
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "target ready: session s-it run r-it") {
		t.Fatalf("target: %q, stderr %s", lines.Text(), terr.String())
	}
	defer func() {
		_ = target.Process.Signal(os.Interrupt)
		if err := target.Wait(); err != nil {
			t.Errorf("target: %v\n%s", err, terr.String())
		}
	}()

	control := func(args ...string) (int, map[string]any) {
		t.Helper()
		code, out := aepctlExit(ctx, t, g, append([]string{"control", "--token", key, "-o", "json", "--session", "s-it"}, args...)...)
		var res map[string]any
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("control %v: exit %d, %q", args, code, out)
		}
		return code, res
	}
	// The claim is live once a command to the session is no longer no-route
	// (pause is outside the target's accepts: the gateway refuses it).
	for {
		code, res := control("pause", "--timeout", "5s")
		if res["reason"] == "unsupported" && code == 3 {
			break
		}
		if res["reason"] != "no-route" || ctx.Err() != nil {
			t.Fatalf("pause before the claim is live: exit %d, %v", code, res)
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, res := control("cancel", "--run", "r-it", "--reason", "integration test", "--outcome", "10s")
	outcome, _ := res["outcome"].(map[string]any)
	if code != 0 || res["result"] != "accepted" || outcome["type"] != "run.cancelled" || outcome["cause"] != res["command"] {
		t.Fatalf("cancel: exit %d, %v", code, res)
	}
	if code, res := control("cancel", "--run", "r-it"); code != 3 || res["result"] != "rejected" || res["reason"] != "invalid" {
		t.Fatalf("second cancel: exit %d, %v", code, res)
	}
	if code, out := aepctlExit(ctx, t, g, "control", "cancel", "--session", "s-it"); code != 1 || out != "" {
		t.Fatalf("without the key: exit %d, %q", code, out)
	}
}
