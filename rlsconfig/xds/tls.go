package xds

import (
	"crypto/tls"
	"fmt"

	"github.com/sluice-rl/sluice/internal/tlsfiles"
)

// TLSFiles is a client's TLS configuration from PEM files: the server's
// certificate checked against ca (empty: the system's roots) and for
// serverName (empty: the address's host), and this node's certificate and
// key presented when the server asks (mTLS; empty: none).
func TLSFiles(ca, certFile, keyFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool, err := tlsfiles.Pool(ca)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("certificate %s and key %s: %w", certFile, keyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
