package credentials

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// The CA is created once and loaded after; a server certificate verifies
// against it for its names, localhost and 127.0.0.1, as a server and as a
// client, and is kept on a second run; the CA's key is 0600, a server's
// 0644 (its container reads it; see writeMounted).
func TestCAAndServerCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := read(t, ca.CertFile)
	cert, key, err := ca.EnsureServer(dir, "redis-1", []string{"redis-1", "10.0.0.7"})
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]os.FileMode{filepath.Join(dir, "ca-key.pem"): 0o600, key: 0o644} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", f, fi.Mode().Perm(), err, want)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	leaf, err := readCert(cert)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"redis-1", "localhost", "127.0.0.1", "10.0.0.7"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s (usage %v): %v", name, usage, err)
			}
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "redis-2", Roots: pool}); err == nil {
		t.Error("valid for redis-2")
	}
	if !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("IPs %v", leaf.IPAddresses)
	}

	ca2, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	before := read(t, cert)
	if _, _, err := ca2.EnsureServer(dir, "redis-1", []string{"redis-1"}); err != nil {
		t.Fatal(err)
	}
	if read(t, ca2.CertFile) != caPEM || read(t, cert) != before {
		t.Fatal("a second run changed the CA or the certificate")
	}
}

// A CA certificate without its key (or the reverse) is an error, not a
// new CA that the existing certificates would not verify against.
func TestCAHalfMissing(t *testing.T) {
	dir := t.TempDir()
	if _, err := EnsureCA(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureCA(dir); err == nil {
		t.Fatal("a CA without its key loaded")
	}
}

// A server certificate the current CA did not sign (the CA was replaced)
// is refused, not kept.
func TestServerCertificateOfAnotherCA(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(filepath.Join(dir, "old"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.EnsureServer(dir, "nats-1", nil); err != nil {
		t.Fatal(err)
	}
	other, err := EnsureCA(filepath.Join(dir, "new"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.EnsureServer(dir, "nats-1", nil); err == nil {
		t.Fatal("kept a certificate of another CA")
	}
	if err := os.Remove(filepath.Join(dir, "nats-1-key.pem")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.EnsureServer(dir, "nats-1", nil); err == nil {
		t.Fatal("a certificate without its key was kept or replaced silently")
	}
}
