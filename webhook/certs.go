package webhook

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// Certificate serves a key pair from two PEM files, read again whenever
// their contents change: cert-manager renews the Secret, the kubelet swaps
// the mounted files, and the next handshake gets the new certificate.
type Certificate struct {
	certFile, keyFile string
	log               *slog.Logger

	mu              sync.Mutex
	certPEM, keyPEM []byte           // guarded by mu: the files' contents when last loaded
	cert            *tls.Certificate // guarded by mu
}

// LoadCertificate reads the pair once, failing if it is not valid.
func LoadCertificate(certFile, keyFile string, log *slog.Logger) (*Certificate, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Certificate{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := c.current(); err != nil {
		return nil, err
	}
	return c, nil
}

// GetCertificate is for tls.Config: the pair as the files hold it now, or,
// while they hold a pair that does not load (half-written), the last one
// that did.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, err := c.current()
	if err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.cert == nil {
			return nil, err
		}
		c.log.Warn("webhook: keeping the previous certificate", "err", err)
		return c.cert, nil
	}
	return cert, nil
}

// current reads both files and reloads the pair if either changed. Two
// small files per handshake cost little next to the handshake, and need
// no watcher that could miss the kubelet's symlink swap.
func (c *Certificate) current() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return nil, fmt.Errorf("webhook: certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("webhook: key: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return c.cert, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("webhook: key pair %s, %s: %w", c.certFile, c.keyFile, err)
	}
	if c.cert != nil {
		c.log.Info("webhook: certificate reloaded", "file", c.certFile)
	}
	c.cert, c.certPEM, c.keyPEM = &cert, certPEM, keyPEM
	return c.cert, nil
}
