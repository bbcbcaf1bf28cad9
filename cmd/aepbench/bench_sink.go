package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

// The http-floor phase of bench ingest measures HTTP itself: the same
// requests, over the same client, to a server that does the least any HTTP
// ingest endpoint must do (read the body, count its events, answer 202 with
// the count) and nothing else: no validation, no Kafka. It runs in a
// process of its own (this binary, "aepbench http-sink") so that its
// CPU time is measured apart from the client's, as the gateway's is. What
// the gateway spends beyond that floor and beyond the routed producer's
// work is its own; what the floor spends is what HTTP/1.1 costs on this
// machine before any gateway runs.

// sinkMaxBody bounds one request body the sink reads (the gateway's default
// batch is 1000 events of up to 512 KiB; the bench never sends more).
const sinkMaxBody = 512 << 20

// sinkBufs are the sink's read buffers: a request's body is streamed
// through one and counted, never held whole.
var sinkBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// sinkHandler answers POST with 202 and {"accepted":N,"rejected":0}, N
// being the body's non-empty NDJSON lines, and GET with 200 (readiness).
func sinkHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusOK)
			return
		}
		n, err := countLines(http.MaxBytesReader(w, r.Body, sinkMaxBody))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var buf [64]byte
		b := append(buf[:0], `{"accepted":`...)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, `,"rejected":0}`...)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(b)
	})
}

// countLines counts the non-empty lines of r, the last one with or without
// its newline.
func countLines(r io.Reader) (int, error) {
	bp := sinkBufs.Get().(*[]byte)
	defer sinkBufs.Put(bp)
	buf := *bp
	n, inLine := 0, false
	for {
		k, err := r.Read(buf)
		for _, c := range buf[:k] {
			if c == '\n' {
				if inLine {
					n++
				}
				inLine = false
			} else if c != '\r' && c != ' ' && c != '\t' {
				inLine = true
			}
		}
		if errors.Is(err, io.EOF) {
			if inLine {
				n++
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// cmdBenchHTTPSink runs the sink on --listen until ctx ends (SIGTERM or
// SIGINT), then shuts it down.
func cmdBenchHTTPSink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepbench", "http-sink", "http-sink --listen HOST:PORT", stdout, stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("http sink: %w", err)
	}
	srv := &http.Server{Handler: sinkHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	fmt.Fprintf(stdout, "http sink listening on %s\n", l.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }() // joined below
	select {
	case err := <-done:
		return fmt.Errorf("http sink: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-done //nolint:errcheck // Serve's http.ErrServerClosed: Shutdown's error is the one to report
	return err
}

// runHTTPFloor starts the sink as a child process, runs the phase against
// it with the sink's CPU time in the server's place, and stops it.
func runHTTPFloor(ctx context.Context, cfg BenchConfig, genStart time.Time) (PhaseReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return PhaseReport{}, err
	}
	port, err := freePort()
	if err != nil {
		return PhaseReport{}, err
	}
	dir, err := os.MkdirTemp("", "aepctl-http-sink-")
	if err != nil {
		return PhaseReport{}, err
	}
	defer os.RemoveAll(dir)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv, err := startServer(ctx, "http-sink", exe, []string{"http-sink", "--listen", addr}, dir, "http://"+addr, "/healthz")
	if err != nil {
		return PhaseReport{}, err
	}
	defer srv.stop()
	cs, ok := newConnSender(srv.url, "", cfg.Dialect, cfg.Concurrency)
	if !ok {
		return PhaseReport{}, fmt.Errorf("http sink at %s: not a plain-HTTP URL", srv.url)
	}
	defer cs.close()
	fc := cfg
	fc.GatewayPID, fc.BrokerPID = srv.pid, 0
	p := runPhase(ctx, fc, genStart, "http-floor", fmt.Sprintf("%s (%s: reads, counts, answers 202)", srv.url+aepclient.Endpoint(cfg.Dialect), filepath.Base(exe)), cs)
	p.Server = "sink"
	return p, nil
}
