// Package tlsfiles turns the PEM files that TLS settings name into Go's
// TLS values: a door's server configuration, and a pool of CAs that a
// peer's certificate must chain to. It is the one place that reads them,
// so that every door and the upstream refuse a bad file with the same
// words, at start-up.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Server is a door's TLS configuration: nil without certFile (the door
// then serves in the clear); with clientCA, every client must present a
// certificate that chains to it. TLS 1.2 is the least version, as Go's
// own servers default to.
func Server(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s and key %s: %w", certFile, keyFile, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pool, err := Pool(clientCA)
		if err != nil {
			return nil, err
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Pool is the CAs in the PEM file at path. A file with no certificate is
// an error: an empty pool would trust nothing, and every handshake would
// fail later with a less helpful message.
func Pool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}
