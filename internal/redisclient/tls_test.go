package redisclient_test

import (
	"crypto/tls"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redisclient"
)

// A client certificate goes into the one TLS configuration every
// connection of the client is made with, for each kind of upstream; an
// address without TLS cannot carry one.
func TestUseClientCert(t *testing.T) {
	cert := &tls.Certificate{}
	get := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"rediss://127.0.0.1:6379", true},
		{"rediss+sentinel://127.0.0.1:26379/mymaster", true},
		{"rediss+cluster://127.0.0.1:7000,127.0.0.1:7001", true},
		{"redis://127.0.0.1:6379", false},
		{"redis+cluster://127.0.0.1:7000", false},
	} {
		client, _, err := redisclient.NewClient(tc.addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = redisclient.UseClientCert(client, get)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v; want ok %v", tc.addr, err, tc.ok)
		}
		var conf *tls.Config
		switch c := client.(type) {
		case *redis.Client:
			conf = c.Options().TLSConfig
		case *redis.ClusterClient:
			conf = c.Options().TLSConfig
		}
		if tc.ok {
			if got, _ := conf.GetClientCertificate(nil); got != cert {
				t.Errorf("%s: the client's TLS configuration does not present the certificate", tc.addr)
			}
		}
		client.Close()
	}
}
