package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// testCA is a throwaway certificate authority for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "aep test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by the CA: a server
// certificate for 127.0.0.1, or a client certificate with the common name.
func (ca *testCA) issue(t testing.TB, cn string, serial int64, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// writeAtomic writes a file by rename, as a certificate manager does.
func writeAtomic(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The gateway's own TLS through the binary (issue 24): HTTPS with HTTP/2
// for SSE (Go's client and curl), a client certificate as a credential
// whose principal and scopes come from the key file's cert: line, and the
// server certificate rotated on disk taking effect without a restart.
func TestTLSThroughTheBinary(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certPEM, keyPEM := ca.issue(t, "gateway", 10, true)
	clientPEM, clientKey := ca.issue(t, "agent-a", 20, false)
	strangerPEM, strangerKey := ca.issue(t, "stranger", 21, false)
	files := map[string][]byte{"ca.pem": ca.pem, "tls.crt": certPEM, "tls.key": keyPEM,
		"keys": []byte(keyFileLine("acme", "k-admin") + "acme cert:agent-a scopes=emit:agent:a,write:tool\n")}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, "--data-dir", filepath.Join(dir, "data"), "--embedded-kafka-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--api-keys", filepath.Join(dir, "keys"),
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"),
		"--tls-client-ca", filepath.Join(dir, "ca.pem"), "--auth-reload-interval", "200ms")
	if !strings.HasPrefix(g.URL, "https://") {
		t.Fatalf("listen %q, want https", g.URL)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// SSE over HTTP/2, and an event published over HTTP/2 delivered on it.
	h2 := client()
	defer h2.CloseIdleConnections()
	sse := gatewaytest.RequestSSE(t, g.URL+"/aep/events?types=task.*", gatewaytest.SSEOptions{Client: h2,
		Header: http.Header{"Authorization": {"Bearer k-admin"}}})
	if sse.StatusCode != http.StatusOK || sse.ProtoMajor != 2 {
		t.Fatalf("SSE: %d over HTTP/%d.%d, want 200 over HTTP/2", sse.StatusCode, sse.ProtoMajor, sse.ProtoMinor)
	}
	stream := gatewaytest.NewSSEStream(t, sse, 16)
	defer stream.Close()
	post := func(c *http.Client, hdr http.Header, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/aep/events", strings.NewReader(body))
		req.Header = hdr.Clone()
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if st, body := post(h2, http.Header{"Authorization": {"Bearer k-admin"}}, dEvent(1, "s_tls")); st != http.StatusAccepted {
		t.Fatalf("publish over HTTP/2: %d %s", st, body)
	}
	stream.Until("the event over HTTP/2", func(m gatewaytest.SSEMessage) bool { return m.Event == "task.progress" })

	// curl, as an operator would try it: HTTP/2 negotiated, the stream open.
	out, _ := exec.CommandContext(ctx, "curl", "-sS", "-N", "--http2", "--max-time", "2", "-o", "/dev/null",
		"-w", "%{http_version} %{http_code}", "--cacert", filepath.Join(dir, "ca.pem"),
		"-H", "Authorization: Bearer k-admin", g.URL+"/aep/events?types=task.*").Output()
	if got := strings.TrimSpace(string(out)); got != "2 200" {
		t.Errorf("curl --http2 to SSE: %q, want \"2 200\"", got)
	}

	// A client certificate is a credential: its cert: line's principal
	// and scopes apply; a verified certificate no line names is refused.
	pair, err := tls.X509KeyPair(clientPEM, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	mtls := client(pair)
	defer mtls.CloseIdleConnections()
	asA := strings.Replace(dEvent(2, "s_tls"), `"agent:researcher"`, `"agent:a"`, 1)
	if st, body := post(mtls, http.Header{}, asA); st != http.StatusAccepted || strings.Contains(body, "unauthorized") {
		t.Fatalf("mTLS as agent:a: %d %s", st, body)
	}
	if st, body := post(mtls, http.Header{}, dEvent(3, "s_tls")); !strings.Contains(body, "unauthorized") {
		t.Fatalf("mTLS as agent:researcher: %d %s, want refused", st, body)
	}
	stranger, _ := tls.X509KeyPair(strangerPEM, strangerKey)
	sc := client(stranger)
	defer sc.CloseIdleConnections()
	if st, _ := post(sc, http.Header{}, asA); st != http.StatusUnauthorized {
		t.Fatalf("a certificate no cert: line names: %d, want 401", st)
	}
	if m := stream.Until("agent-a's event", func(m gatewaytest.SSEMessage) bool { return strings.Contains(m.Data, `"evt_s_tls_0002"`) }); len(m) == 0 {
		t.Fatal("no event")
	}

	// Rotation: new files on disk; a new connection gets the new
	// certificate within the reload interval, without a restart.
	newCert, newKey := ca.issue(t, "gateway", 11, true)
	writeAtomic(t, filepath.Join(dir, "tls.key"), newKey)
	writeAtomic(t, filepath.Join(dir, "tls.crt"), newCert)
	serial := func() int64 {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(g.URL, "https://"), &tls.Config{RootCAs: roots})
		if err != nil {
			return -1
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	start := time.Now()
	gatewaytest.PollFor(t, 10*time.Second, "the rotated certificate", func() bool { return serial() == 11 })
	t.Logf("rotated certificate served %s after the files changed", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(g.logs.String(), `"flag":"--tls-cert-file"`) && !strings.Contains(g.logs.String(), `"flag":"--tls-key-file"`) {
		t.Error("the reload was not logged")
	}
	g.stop()
}
