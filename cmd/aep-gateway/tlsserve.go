package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway"
)

// certSource is the gateway's own TLS certificate (--tls-cert-file,
// --tls-key-file), swapped whole when the files are reloaded: a handshake
// takes the pair in use at its start.
type certSource struct {
	certPath, keyPath string
	cur               atomic.Pointer[tls.Certificate]
}

// loadTLS reads the certificate pair, or returns nil without
// --tls-cert-file.
func loadTLS(cfg config) (*certSource, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	cs := &certSource{certPath: cfg.TLSCertFile, keyPath: cfg.TLSKeyFile}
	certPEM, err := gateway.ReadFileLimited(cs.certPath, maxCredentialsFileBytes)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file: %w", err)
	}
	if _, err := cs.reload(certPEM, nil); err != nil {
		return nil, err
	}
	return cs, nil
}

// reload parses the pair, one side of which the reloader read (the other
// is read from its file), and swaps it in. A pair that does not match (one
// file rewritten, the other not yet) is refused and the pair in use stays;
// the other file's reload completes the rotation.
func (cs *certSource) reload(certPEM, keyPEM []byte) (int, error) {
	var err error
	if certPEM == nil {
		certPEM, err = gateway.ReadFileLimited(cs.certPath, maxCredentialsFileBytes)
	} else if keyPEM == nil {
		keyPEM, err = gateway.ReadFileLimited(cs.keyPath, maxCredentialsFileBytes)
	}
	if err != nil {
		return 0, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return 0, fmt.Errorf("TLS certificate and key: %w", err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return 0, err
		}
	}
	if time.Now().After(pair.Leaf.NotAfter) {
		return 0, fmt.Errorf("TLS certificate expired at %s", pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cs.cur.Store(&pair)
	return 1, nil
}

// NotAfter is when the certificate in use expires.
func (cs *certSource) NotAfter() time.Time { return cs.cur.Load().Leaf.NotAfter }

// serverTLS is the listener's TLS configuration: TLS 1.2 or later, the
// certificate in use at each handshake, and with --tls-client-ca client
// certificates verified when offered (a verified certificate is a
// credential: gateway.KeyStore's cert: lines). HTTP/2 is offered by
// http.Server.ServeTLS.
func serverTLS(cfg config, cs *certSource) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cs.cur.Load(), nil },
	}
	if cfg.TLSClientCA != "" {
		pool, err := loadCertPool("--tls-client-ca", cfg.TLSClientCA)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

// loadCertPool reads the PEM CA certificates of flag's file.
func loadCertPool(flag, path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("%s: no PEM certificates found", flag)
	}
	return pool, nil
}
