// Package redisclient makes the go-redis client that reaches the upstream
// Redis from its address (--upstream): a standalone, Sentinel or Cluster
// client by the address's kind (internal/redisurl reads it), with the CA
// and the client certificate given, and every deadline honoured. The
// store (package upstream) and the Observer (internal/redisobserve) both
// take the client it makes; neither builds one.
package redisclient

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redisurl"
)

// NewClient turns an upstream address (internal/redisurl reads it) into a
// go-redis client, using go-redis's own URL parsers for the options.
// roots, when not nil, are the CAs a rediss:// server's certificate must
// chain to. Every client honours its context's deadline: go-redis otherwise
// waits out its own 3s read timeout on a Redis that accepts connections
// but does not answer (paused, overloaded), and every request with it.
func NewClient(addr string, roots *x509.CertPool) (redis.UniversalClient, redisurl.Kind, error) {
	a, err := redisurl.Parse(addr)
	if err != nil {
		return nil, "", err
	}
	if roots != nil && !a.TLS {
		return nil, "", &redisurl.Error{Addr: redisurl.Quoted(addr), Reason: "a CA is given but the address does not use TLS (rediss://)"}
	}
	// What every kind's options get: the CA, and deadlines honoured.
	finish := func(t *tls.Config, contextTimeout *bool) {
		if roots != nil {
			t.RootCAs = roots // rediss:// is checked above, so t is set
		}
		*contextTimeout = true
	}
	// redisurl refuses what go-redis's parsers would (client_test.go holds
	// the two together): an error here is go-redis's, with the address
	// redacted.
	failed := func(err error) error {
		return &redisurl.Error{Addr: redisurl.Quoted(addr), Reason: err.Error()}
	}
	switch a.Kind {
	case redisurl.Sentinel:
		opt, err := redis.ParseFailoverURL(a.Client)
		if err != nil {
			return nil, "", failed(err)
		}
		finish(opt.TLSConfig, &opt.ContextTimeoutEnabled)
		return redis.NewFailoverClient(opt), a.Kind, nil
	case redisurl.Cluster:
		opt, err := redis.ParseClusterURL(a.Client)
		if err != nil {
			return nil, "", failed(err)
		}
		finish(opt.TLSConfig, &opt.ContextTimeoutEnabled)
		if !strings.Contains(a.Client, "min_retry_backoff=") {
			opt.MinRetryBackoff = RedirectBackoff
		}
		return redis.NewClusterClient(opt), a.Kind, nil
	}
	opt, err := redis.ParseURL(a.Client)
	if err != nil {
		return nil, "", failed(err)
	}
	finish(opt.TLSConfig, &opt.ContextTimeoutEnabled)
	return redis.NewClient(opt), a.Kind, nil
}

// RedirectBackoff is a Cluster client's min_retry_backoff unless the
// address sets one. go-redis waits that long, and up to three times as
// long, before it follows a MOVED or ASK redirection inside a pipeline
// (alone, a command follows at once); its default, 10ms, costs a batch on
// a slot that is moving 10 to 30ms of its deadline at each redirection.
// The store's script calls are never retried on an error (see package
// upstream's goredis.go),
// so the back-off delays only redirections, which need no pause.
const RedirectBackoff = time.Millisecond
