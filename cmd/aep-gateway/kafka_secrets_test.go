package main

import (
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
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// pki issues throwaway certificates: a CA, and leaves signed by it.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &pki{cert: c, key: key}
}

func (p *pki) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.cert.Raw})
}

// leaf is a certificate for 127.0.0.1 (a server's) or named cn (a
// client's), as PEM, and as a tls.Certificate.
func (p *pki) leaf(t *testing.T, cn string) (certPEM, keyPEM []byte, pair tls.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, pair
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The Kafka client's TLS material is read again at each handshake: a CA
// file or client certificate rotated on disk applies to the next
// connection, the broker's name is still checked, and a broken file keeps
// the last good material (issue 24: Strimzi and cert-manager rotate them).
func TestKafkaTLSFilesReloadAtEachHandshake(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := newPKI(t, "ca1"), newPKI(t, "ca2")
	_, _, server1 := ca1.leaf(t, "broker")
	_, _, server2 := ca2.leaf(t, "broker")
	c1, k1, _ := ca1.leaf(t, "client-one")
	c2, k2, _ := ca1.leaf(t, "client-two")
	caPath, certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	write(t, caPath, ca1.pem())
	write(t, certPath, c1)
	write(t, keyPath, k1)

	var serving atomic.Pointer[tls.Certificate]
	serving.Store(&server1)
	seen := make(chan string, 16) // the client certificate of each handshake the server completed
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Load(), nil },
		ClientAuth:     tls.RequireAnyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := c.(*tls.Conn)
				if tc.Handshake() == nil {
					seen <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
				}
				tc.Close()
			}()
		}
	}()
	cfg := config{KafkaTLS: true, KafkaTLSCA: caPath, KafkaTLSCert: certPath, KafkaTLSKey: keyPath}
	dialers := map[string]func(context.Context, string, string) (net.Conn, error){}
	for _, name := range []string{"", "broker.other"} { // "": the host, as franz-go dials it
		c := cfg
		c.KafkaTLSServerName = name
		d, err := kafkaTLSDialer(c, tlsConfig(c))
		if err != nil {
			t.Fatal(err)
		}
		dialers[name] = d
	}
	var client string // the certificate the server saw on the last successful dial
	dial := func(serverName string) error {
		conn, err := dialers[serverName](context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer conn.Close()
		select {
		case client = <-seen:
		case <-time.After(5 * time.Second):
			t.Fatal("the server did not complete the handshake")
		}
		return nil
	}
	if err := dial(""); err != nil || client != "client-one" {
		t.Fatalf("first handshake: %v, client %q", err, client)
	}
	if err := dial("broker.other"); err == nil {
		t.Fatal("a broker certificate for another name was accepted")
	}
	// The client certificate rotated: the next connection presents it.
	write(t, certPath, c2)
	write(t, keyPath, k2)
	if err := dial(""); err != nil || client != "client-two" {
		t.Fatalf("after the client certificate's rotation: %v, client %q", err, client)
	}
	// The CA rotated: the old broker certificate is refused, the new one
	// accepted.
	write(t, caPath, ca2.pem())
	if err := dial(""); err == nil {
		t.Fatal("a broker certificate of the retired CA was accepted")
	}
	serving.Store(&server2)
	if err := dial(""); err != nil {
		t.Fatalf("the new CA's broker certificate: %v", err)
	}
	// A broken CA file keeps the CA in use.
	write(t, caPath, []byte("not a certificate"))
	if err := dial(""); err != nil {
		t.Fatalf("a broken CA file replaced the pool in use: %v", err)
	}
}

// --kafka-sasl-password-file is read at each authentication; an empty or
// unreadable file keeps the last good password.
func TestSASLPasswordFileRereads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pw")
	write(t, path, []byte("first\n"))
	pw, err := saslPassword(config{KafkaSASLPasswordFile: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ content, want string }{{"second\n", "second"}, {"", "second"}, {"third", "third"}} {
		write(t, path, []byte(c.content))
		if got, err := pw(); err != nil || got != c.want {
			t.Fatalf("after %q: %q %v, want %q", c.content, got, err, c.want)
		}
	}
	os.Remove(path)
	if got, _ := pw(); got != "third" {
		t.Fatalf("a removed file: %q", got)
	}
	if _, err := saslPassword(config{KafkaSASLPasswordFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Fatal("a missing file at start was accepted")
	}
}
