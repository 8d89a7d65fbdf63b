package tlsfiles

import (
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testca"
)

// issuer is a certificate and its key, written as PEM files.
type issuer struct{ certFile, keyFile string }

// files writes c to dir as name.crt and name.key.
func files(t *testing.T, dir, name string, c *testca.Cert) *issuer {
	t.Helper()
	is := &issuer{certFile: filepath.Join(dir, name+".crt"), keyFile: filepath.Join(dir, name+".key")}
	c.Write(t, is.certFile, is.keyFile)
	return is
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServerAsksForClientCertificates: with a client CA, a client with a
// certificate the CA signed gets through and one without is refused, over
// a real handshake.
func TestServerAsksForClientCertificates(t *testing.T) {
	dir := t.TempDir()
	authority := testca.New(t)
	ca := files(t, dir, "ca", &authority.Cert)
	server := files(t, dir, "server", authority.Issue(t, "server"))
	client := files(t, dir, "client", authority.Issue(t, "client"))
	stranger := files(t, dir, "stranger", testca.New(t).Issue(t, "stranger"))

	cfg, err := Server(server.certFile, server.keyFile, ca.certFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
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
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	roots, err := Pool(ca.certFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		client *issuer
		ok     bool
	}{{"signed client", client, true}, {"no certificate", nil, false}, {"certificate of another CA", stranger, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ccfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
			if tc.client != nil {
				pair, err := tls.LoadX509KeyPair(tc.client.certFile, tc.client.keyFile)
				if err != nil {
					t.Fatal(err)
				}
				ccfg.Certificates = []tls.Certificate{pair}
			}
			c, err := tls.Dial("tcp", ln.Addr().String(), ccfg)
			if err != nil {
				t.Fatal(err) // the client's side ends before the server checks it
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			got, _ := io.ReadAll(c)
			if (string(got) == "ok") != tc.ok {
				t.Errorf("answer %q; want it to get through: %v", got, tc.ok)
			}
		})
	}
}

// TestServerFiles: no certificate means no TLS; every bad file is an
// error that names it.
func TestServerFiles(t *testing.T) {
	dir := t.TempDir()
	authority := testca.New(t)
	ca := files(t, dir, "ca", &authority.Cert)
	server := files(t, dir, "server", authority.Issue(t, "server"))
	notPEM := filepath.Join(dir, "not.pem")
	write(t, notPEM, []byte("hello"))

	if cfg, err := Server("", "", ""); cfg != nil || err != nil {
		t.Errorf("no certificate: %v, %v; want nil, nil", cfg, err)
	}
	cfg, err := Server(server.certFile, server.keyFile, "")
	if err != nil || len(cfg.Certificates) != 1 || cfg.ClientAuth != tls.NoClientCert || cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("certificate without client CA: %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		name                string
		cert, key, clientCA string
		want                string
	}{
		{"missing certificate", filepath.Join(dir, "nope.crt"), server.keyFile, "", "nope.crt"},
		{"key of another certificate", server.certFile, ca.keyFile, "", "private key does not match"},
		{"missing client CA", server.certFile, server.keyFile, filepath.Join(dir, "nope-ca.crt"), "nope-ca.crt"},
		{"client CA not PEM", server.certFile, server.keyFile, notPEM, "not.pem holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Server(tc.cert, tc.key, tc.clientCA); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want one saying %q", err, tc.want)
			}
		})
	}
}
