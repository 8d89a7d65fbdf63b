package tlsfiles

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
)

// ClientCert is a client certificate read from a PEM certificate chain
// and key, read again when either file changes, so that a rotation (a
// cert-manager Certificate renewed into a mounted Secret, which the
// kubelet swaps in whole) reaches every new connection without a
// restart; connections already open keep the certificate they were made
// with. It is checked at each handshake, which a pooled client makes
// rarely: one stat of each file.
type ClientCert struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate // guarded by mu
	seen              [2]os.FileInfo   // the files as cert was read from them; guarded by mu
}

// LoadClientCert reads the pair; an unreadable or mismatched pair is an
// error naming both files.
func LoadClientCert(certFile, keyFile string) (*ClientCert, error) {
	c := &ClientCert{certFile: certFile, keyFile: keyFile}
	if err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// GetClientCertificate is tls.Config's: the pair as the files hold it
// now. While a new pair does not load (the two files written one after
// the other, and only one is new yet), the pair read last is presented,
// and the next handshake tries again.
func (c *ClientCert) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changed() {
		_ = c.reloadLocked()
	}
	return c.cert, nil
}

func (c *ClientCert) reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reloadLocked()
}

// reloadLocked reads the pair; mu is held.
func (c *ClientCert) reloadLocked() error {
	var seen [2]os.FileInfo
	for i, f := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		seen[i] = fi
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("client certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.seen = &cert, seen
	return nil
}

// changed says whether either file is another than when read (the
// kubelet's swap makes a new file), or was written since; mu is held.
func (c *ClientCert) changed() bool {
	for i, f := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return false // gone for now: keep the pair in use
		}
		was := c.seen[i]
		if !os.SameFile(fi, was) || !fi.ModTime().Equal(was.ModTime()) || fi.Size() != was.Size() {
			return true
		}
	}
	return false
}
