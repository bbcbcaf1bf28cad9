package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// KafkaProc is a single-node Apache Kafka of one test's own, run by scripts/kafka.sh, which the test may
// SIGKILL and start again (a broker restart): the shared broker (KAFKA_BROKERS) is used by every test and
// must never be. Its jars come from the Maven cache (or, when $KAFKA_DIR already holds a complete jar
// directory, as CI's does, that directory is linked); its data lives in t.TempDir(), and t.Cleanup stops it.
//
// Methods are called from the test's goroutines one at a time (Kill and Up are not safe concurrently with
// each other); Seeds is fixed for the life of the broker.
type KafkaProc struct {
	t     testing.TB
	dir   string
	port  int
	ctrl  int
	Seeds []string
}

// kafkaVersion is the version scripts/kafka.sh runs unless KAFKA_VERSION says otherwise.
const kafkaVersion = "4.1.1"

// StartKafkaProc starts an own broker for t. Without Java or Maven it skips t with the reason, except in
// CI (CI=true), where it fails t: the fault suite must run there.
func StartKafkaProc(t *testing.T) *KafkaProc {
	t.Helper()
	if reason := kafkaProcMissing(); reason != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("integration: an own Kafka broker is required in CI: %s", reason)
		}
		t.Skipf("integration: no own Kafka broker: %s (scripts/kafka.sh needs java 17+ and mvn or a filled $KAFKA_DIR)", reason)
	}
	k := &KafkaProc{t: t, dir: t.TempDir(), port: freePort(t)}
	for k.ctrl = freePort(t); k.ctrl == k.port; k.ctrl = freePort(t) {
	}
	k.Seeds = []string{"127.0.0.1:" + strconv.Itoa(k.port)}
	if ci := os.Getenv("KAFKA_DIR"); ci != "" {
		lib := filepath.Join(ci, "lib-"+kafkaVersion)
		if _, err := os.Stat(filepath.Join(lib, ".complete")); err == nil {
			if err := os.Symlink(lib, filepath.Join(k.dir, "lib-"+kafkaVersion)); err != nil {
				t.Fatalf("integration: link kafka jars: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		if err := k.script(2*time.Minute, "down"); err != nil {
			t.Logf("integration: own kafka down: %v", err)
		}
	})
	if err := k.Up(); err != nil {
		t.Fatalf("integration: own kafka: %v", err)
	}
	return k
}

// kafkaProcMissing says why no own broker can be started here, or "" when one can.
func kafkaProcMissing() string {
	if _, err := exec.LookPath("java"); err != nil {
		return "java not found"
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		if ci := os.Getenv("KAFKA_DIR"); ci == "" || !fileExists(filepath.Join(ci, "lib-"+kafkaVersion, ".complete")) {
			return "mvn not found and no complete jar directory in $KAFKA_DIR"
		}
	}
	return ""
}

// freePort returns a TCP port that was free a moment ago on 127.0.0.1.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("integration: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Up starts the broker (again, after Kill: the same data directory and ports) and waits until it answers
// the Kafka protocol.
func (k *KafkaProc) Up() error { return k.script(6*time.Minute, "up") }

// Kill sends SIGKILL to the broker's JVM and waits until it is gone: no controlled shutdown.
func (k *KafkaProc) Kill() error {
	b, err := os.ReadFile(filepath.Join(k.dir, "kafka.pid"))
	if err != nil {
		return fmt.Errorf("kafka pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("kafka pid %q: %w", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill kafka %d: %w", pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("kafka %d still there 30s after SIGKILL", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// script runs scripts/kafka.sh cmd with this broker's directory and ports.
func (k *KafkaProc) script(timeout time.Duration, cmd string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "../scripts/kafka.sh", cmd)
	c.Env = append(os.Environ(), "KAFKA_DIR="+k.dir, "KAFKA_PORT="+strconv.Itoa(k.port),
		"KAFKA_CONTROLLER_PORT="+strconv.Itoa(k.ctrl), "KAFKA_HOST=127.0.0.1", "KAFKA_HEAP_OPTS=-Xms256m -Xmx512m")
	out, err := c.CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w after %v", ctx.Err(), timeout)
		}
		return fmt.Errorf("kafka.sh %s: %w\n%s", cmd, err, out)
	}
	return nil
}
