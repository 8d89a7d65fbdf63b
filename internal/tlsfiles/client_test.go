package tlsfiles

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-rl/sluice/internal/testca"
)

// A client certificate is read again when its files change, as a
// cert-manager rotation changes them; a pair half written (the new
// certificate beside the old key) keeps the pair in use until the key
// follows.
func TestClientCertRotation(t *testing.T) {
	ca := testca.New(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first, second := ca.Issue(t, "sluice"), ca.Issue(t, "sluice")
	first.Write(t, certFile, keyFile)
	c, err := LoadClientCert(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		t.Helper()
		got, err := c.GetClientCertificate(nil)
		if err != nil || got == nil {
			t.Fatalf("GetClientCertificate: %v, %v", got, err)
		}
		leaf := got.Leaf
		if leaf == nil {
			t.Fatal("no leaf")
		}
		return leaf.SerialNumber.Int64()
	}
	if got := serial(); got != first.TLS.Leaf.SerialNumber.Int64() {
		t.Fatalf("serial %d; want the first's", got)
	}
	// Half a rotation: the new certificate, the old key.
	write(t, certFile+".new", second.CertPEM)
	if err := os.Rename(certFile+".new", certFile); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != first.TLS.Leaf.SerialNumber.Int64() {
		t.Fatalf("with the key not yet written: serial %d; want the first pair still", got)
	}
	second.Write(t, certFile, keyFile)
	if got := serial(); got != second.TLS.Leaf.SerialNumber.Int64() {
		t.Fatalf("after the rotation: serial %d; want the second's", got)
	}
	if _, err := LoadClientCert(certFile, filepath.Join(dir, "missing.key")); err == nil {
		t.Error("a missing key loaded")
	}
}
