package redisclient

import (
	"crypto/tls"
	"errors"

	"github.com/redis/go-redis/v9"
)

// UseClientCert has client present the certificate get returns in each
// TLS handshake from now on (tls.Config.GetClientCertificate), for a
// Redis that asks for one (tls-auth-clients): get is called for every
// new connection, so a certificate whose files are replaced reaches the
// next connection without a restart. It sets the one TLS configuration
// that the client's connections share: a Cluster's nodes, a Sentinel
// client's master and its sentinels, and the store's own pipes, which
// dial with the client's options. Call it before the client's first use.
// A client without TLS (redis://) is an error.
func UseClientCert(client redis.UniversalClient, get func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) error {
	var t *tls.Config
	switch c := client.(type) {
	case *redis.Client:
		t = c.Options().TLSConfig
	case *redis.ClusterClient:
		t = c.Options().TLSConfig
	}
	if t == nil {
		return errors.New("upstream: a client certificate needs TLS: write rediss:// (rediss+sentinel://, rediss+cluster://)")
	}
	t.GetClientCertificate = get
	return nil
}
