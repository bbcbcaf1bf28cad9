package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// procCPU returns the user+system CPU time pid has used, from
// /proc/<pid>/stat (fields 14 and 15, counted after the command name, which
// may hold spaces and parentheses).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu of pid %d: malformed stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After ")": state(3) ppid(4) ... utime(14) stime(15): indexes 11 and 12.
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of pid %d: short stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procRSS returns pid's resident set size in bytes (VmRSS of
// /proc/<pid>/status).
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss of pid %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss of pid %d: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("rss of pid %d: no VmRSS", pid)
}

// loadAvg returns /proc/loadavg's 1, 5 and 15 minute figures as text.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// server is a process under measurement: one the bench started (cmd set)
// or one it was pointed at (pid only). Pid 0 means "not measured": CPU
// and memory figures are then absent from the report.
type server struct {
	name string
	url  string // base URL, http://host:port
	pid  int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *os.File
}

// startServer runs bin with args, logging to a file in dir, and waits until
// GET url+readyPath answers (any status) or ctx ends. The caller stops it
// with stop.
func startServer(ctx context.Context, name, bin string, args []string, dir, url, readyPath string) (*server, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if abs, err := filepath.Abs(bin); err == nil && strings.ContainsRune(bin, filepath.Separator) {
		bin = abs // the process runs in dir
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, url: url, pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() { _ = cmd.Wait(); close(s.done) }() // joined by stop through done
	if err := s.waitReady(ctx, readyPath); err != nil {
		s.stop()
		return nil, fmt.Errorf("%s did not start (log %s): %w", name, logf.Name(), err)
	}
	return s, nil
}

func (s *server) waitReady(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+path, nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-s.done:
			return errors.New("the process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends a started server (SIGTERM, SIGKILL after 15s) and waits for
// it; a no-op for one the bench was pointed at. Idempotent.
func (s *server) stop() {
	if s == nil || s.cmd == nil {
		return
	}
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.log.Close()
}

// cpu returns the server's CPU time so far, 0 when it is not measured.
func (s *server) cpu() (time.Duration, error) {
	if s.pid == 0 {
		return 0, nil
	}
	return procCPU(s.pid)
}

// rss returns the server's RSS, 0 when it is not measured.
func (s *server) rss() (int64, error) {
	if s.pid == 0 {
		return 0, nil
	}
	return procRSS(s.pid)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// raiseNoFile lifts the soft open-file limit to the hard one and returns
// the new soft limit; the idle bench needs one descriptor a connection.
func raiseNoFile() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return 0, err
		}
	}
	return r.Cur, nil
}
