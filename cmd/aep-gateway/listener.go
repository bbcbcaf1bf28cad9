package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/gateway/connlimit"
)

// listenHTTP opens the HTTP listener within the connection caps
// (--max-connections, --max-connections-per-ip): a connection over a cap
// gets a 503 and is closed, the open ones are served on. Accept errors
// (a process out of descriptors) are backed off and logged, never fatal.
func listenHTTP(cfg config, reg prometheus.Registerer, log zerolog.Logger) (*connlimit.Listener, error) {
	proxies, err := cfg.trustedProxies() // checked by validate
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aep_connections_refused_total", Help: "HTTP connections refused over a connection cap, by reason (max-connections, max-connections-per-ip).",
	}, []string{"reason"})
	acceptErrs := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "aep_accept_errors_total", Help: "Accept errors of the HTTP listener (for example EMFILE), each backed off and retried.",
	})
	var l *connlimit.Listener
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "aep_connections_open", Help: "HTTP connections open now (streams and WebSockets included).",
	}, func() float64 { return float64(l.Open()) })
	reg.MustRegister(refused, acceptErrs, open)
	for _, r := range []string{connlimit.ReasonGlobal, connlimit.ReasonPerHost} {
		refused.WithLabelValues(r)
	}
	l = connlimit.New(ln, connlimit.Config{
		Max: cfg.MaxConnections, MaxPerHost: cfg.MaxConnectionsPerIP, PerHostExempt: proxies,
		Refusal:  httpRefusal,
		OnRefuse: func(reason string) { refused.WithLabelValues(reason).Inc() },
		OnAcceptError: func(err error, backoff time.Duration) {
			acceptErrs.Inc()
			log.Warn().Err(err).Dur("backoff", backoff).Msg("http listener: accept failed; retrying")
		},
	})
	return l, nil
}

// httpRefusal is the whole HTTP response a connection over a cap gets
// (docs/security.md): 503 with a JSON body naming the cap.
func httpRefusal(reason string) []byte {
	detail := "the gateway holds as many connections as it allows; retry later"
	if reason == connlimit.ReasonPerHost {
		detail = "too many connections from this address; close idle ones or retry later"
	}
	body := `{"error":"` + reason + `","detail":"` + detail + `"}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/json\r\n" +
		"Cache-Control: no-store\r\n" +
		"Retry-After: 1\r\n" +
		"Connection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// serveAdmin serves h on --admin-listen, when given, until the lifecycle
// stops it. It returns the listener's URL ("" without one) and a channel
// that receives Serve's error should it fail (nil without one).
func serveAdmin(cfg config, h http.Handler, lc *lifecycle) (string, <-chan error, error) {
	if cfg.AdminListen == "" {
		return "", nil, nil
	}
	ln, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return "", nil, fmt.Errorf("admin listen: %w", err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	failed := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			failed <- err
		}
	}()
	lc.add("admin server", func(ctx context.Context) error {
		err := hs.Shutdown(ctx)
		<-done
		return err
	})
	return "http://" + ln.Addr().String(), failed, nil
}
