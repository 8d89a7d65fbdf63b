// Package testca makes a certificate authority and the certificates it
// signs, for tests: TLS to Redis, the doors' TLS and mTLS, the xDS client
// and the injecting webhook all need a CA that the test controls. It is
// one package so that every test makes its certificates the same way, and
// a change of what a certificate must carry (a name, a key usage) is made
// once.
//
// Keys are ECDSA P-256; certificates are valid from an hour ago to an hour
// from now and name localhost and 127.0.0.1, for a server and a client.
package testca

import (
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
	"time"
)

// TB is what the package needs of its caller: a test's testing.TB, or a
// command (the bench) that makes its certificates the same way.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// Cert is a certificate and its key, in memory and as PEM.
type Cert struct {
	TLS     tls.Certificate // with Leaf set
	CertPEM []byte
	KeyPEM  []byte
	key     *ecdsa.PrivateKey
}

// CA is a self-signed certificate authority.
type CA struct {
	Cert
	// Pool holds the CA's certificate: what a peer that trusts it uses.
	Pool *x509.CertPool
	// Serial is the serial number of the next certificate Issue signs;
	// each Issue adds one. New sets it to 1.
	Serial int64
}

// New makes a CA.
func New(tb TB) *CA {
	tb.Helper()
	ca := &CA{Pool: x509.NewCertPool(), Serial: 1}
	tmpl := template("sluice test CA", big.NewInt(time.Now().UnixNano()))
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	ca.Cert = sign(tb, tmpl, nil, nil)
	ca.Pool.AddCert(ca.TLS.Leaf)
	return ca
}

// Issue signs a certificate named cn for localhost, 127.0.0.1 and names,
// good for a server and for a client.
func (ca *CA) Issue(tb TB, cn string, names ...string) *Cert {
	tb.Helper()
	tmpl := template(cn, big.NewInt(ca.Serial))
	ca.Serial++
	tmpl.DNSNames = append(tmpl.DNSNames, names...)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	c := sign(tb, tmpl, ca.TLS.Leaf, ca.key)
	return &c
}

// Write writes the certificate and its key as PEM files, each written
// beside its path and renamed into place, as the kubelet updates a mounted
// Secret: a reader never sees half a file.
func (c *Cert) Write(tb TB, certFile, keyFile string) {
	tb.Helper()
	for path, b := range map[string][]byte{certFile: c.CertPEM, keyFile: c.KeyPEM} {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			tb.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			tb.Fatal(err)
		}
	}
}

func template(cn string, serial *big.Int) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
}

// sign makes tmpl's certificate with a new key, signed by parent's key
// (nil: self-signed).
func sign(tb TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) Cert {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return Cert{
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		key:     key,
	}
}
