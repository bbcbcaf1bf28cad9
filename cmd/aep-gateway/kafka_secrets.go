package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/aep-gateway/aep-gateway/gateway"
)

// reread is a value parsed from files that are read again at each use and
// parsed again when their bytes changed: a rotated file takes effect at
// the next use (a Kafka connection's handshake, its SASL authentication),
// without a restart or a watcher. Files that cannot be read or parsed
// leave the last good value in use; the first load must succeed.
type reread[T any] struct {
	paths []string
	parse func(raws [][]byte) (T, error)

	mu  sync.Mutex
	sum [32]byte
	val T
}

func newReread[T any](parse func([][]byte) (T, error), paths ...string) (*reread[T], error) {
	r := &reread[T]{paths: paths, parse: parse}
	if _, err := r.get(); err != nil {
		return nil, err
	}
	return r, nil
}

// get is the value of the files' current bytes, or the last good one.
func (r *reread[T]) get() (T, error) {
	raws := make([][]byte, len(r.paths))
	h := sha256.New()
	var readErr error
	for i, p := range r.paths {
		b, err := gateway.ReadFileLimited(p, maxCredentialsFileBytes)
		if err != nil {
			readErr = err
			break
		}
		raws[i] = b
		h.Write(b)
		h.Write([]byte{0})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if readErr != nil {
		if r.sum == ([32]byte{}) {
			return r.val, readErr
		}
		return r.val, nil // the last good value
	}
	var sum [32]byte
	h.Sum(sum[:0])
	if sum == r.sum {
		return r.val, nil
	}
	v, err := r.parse(raws)
	if err != nil {
		if r.sum == ([32]byte{}) {
			return v, err
		}
		return r.val, nil
	}
	r.sum, r.val = sum, v
	return v, nil
}

// kafkaTLSDialer dials brokers over TLS with base's settings and the CA
// (--kafka-tls-ca) and client certificate (--kafka-tls-cert,
// --kafka-tls-key) files read again at every connection (reread): Strimzi
// and cert-manager rotate them in the mounted Secret, and a connection
// made after the rotation uses the new ones. Verification is crypto/tls's
// own, against the broker's host name or IP (or --kafka-tls-server-name).
func kafkaTLSDialer(c config, base *tls.Config) (func(ctx context.Context, network, host string) (net.Conn, error), error) {
	var pool *reread[*x509.CertPool]
	if c.KafkaTLSCA != "" {
		var err error
		if pool, err = newReread(func(raws [][]byte) (*x509.CertPool, error) {
			p := x509.NewCertPool()
			if !p.AppendCertsFromPEM(raws[0]) {
				return nil, errors.New("no PEM certificates found")
			}
			return p, nil
		}, c.KafkaTLSCA); err != nil {
			return nil, fmt.Errorf("--kafka-tls-ca: %w", err)
		}
	}
	var pair *reread[*tls.Certificate]
	if c.KafkaTLSCert != "" {
		var err error
		if pair, err = newReread(func(raws [][]byte) (*tls.Certificate, error) {
			p, err := tls.X509KeyPair(raws[0], raws[1])
			return &p, err
		}, c.KafkaTLSCert, c.KafkaTLSKey); err != nil {
			return nil, fmt.Errorf("--kafka-tls-cert/--kafka-tls-key: %w", err)
		}
	}
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		cfg := base.Clone()
		if cfg.ServerName == "" {
			h, _, err := net.SplitHostPort(host)
			if err != nil {
				return nil, err
			}
			cfg.ServerName = h
		}
		if pool != nil {
			cfg.RootCAs, _ = pool.get()
		}
		if pair != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get() }
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}, Config: cfg}
		return d.DialContext(ctx, network, host)
	}, nil
}

// saslPassword is the SASL password: --kafka-sasl-password-file read at
// each authentication (reread), else the flag's or environment's.
func saslPassword(c config) (func() (string, error), error) {
	if c.KafkaSASLPasswordFile == "" {
		return func() (string, error) { return c.KafkaSASLPassword, nil }, nil
	}
	pw, err := newReread(func(raws [][]byte) (string, error) {
		s := strings.TrimRight(string(raws[0]), "\r\n")
		if s == "" {
			return "", errors.New("empty")
		}
		return s, nil
	}, c.KafkaSASLPasswordFile)
	if err != nil {
		return nil, fmt.Errorf("--kafka-sasl-password-file: %w", err)
	}
	return pw.get, nil
}

// scramAuth is a SCRAM authentication with the password in use.
func scramAuth(user string, pw func() (string, error)) func(context.Context) (scram.Auth, error) {
	return func(context.Context) (scram.Auth, error) {
		p, err := pw()
		return scram.Auth{User: user, Pass: p}, err
	}
}
