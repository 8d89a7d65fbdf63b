package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind is the shape of the upstream an address names.
type Kind string

// The kinds of upstream.
const (
	Standalone Kind = "standalone"
	Sentinel   Kind = "sentinel"
	Cluster    Kind = "cluster"
)

// NewClient turns an upstream address into a go-redis client, using
// go-redis's own URL parsers for the options:
//
//	redis://[user:pass@]host:6379[/db]              one Redis server (rediss:// for TLS)
//	redis+sentinel://host1:26379,host2:26379/master Sentinel: the sentinels, then the master's name
//	redis+cluster://host1:7000,host2:7001           Cluster: seed nodes
//
// with go-redis's query parameters (?dial_timeout=1s&pool_size=20 …).
// roots, when not nil, are the CAs a rediss:// server's certificate must
// chain to. Every client honours its context's deadline: go-redis otherwise
// waits out its own 3s read timeout on a Redis that accepts connections
// but does not answer (paused, overloaded), and every request with it.
func NewClient(addr string, roots *x509.CertPool) (redis.UniversalClient, Kind, error) {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return nil, "", fmt.Errorf("invalid upstream %q: expected redis://host:port, redis+sentinel://… or redis+cluster://…", Redact(addr))
	}
	base, kind, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, "", fmt.Errorf("invalid upstream %q: scheme %q must be redis, rediss, redis+sentinel, redis+cluster, rediss+sentinel or rediss+cluster", Quoted(addr), scheme)
	}
	if roots != nil && base != "rediss" {
		return nil, "", fmt.Errorf("invalid upstream %q: a CA is given but the address does not use TLS (rediss://)", Redact(addr))
	}
	// A comma-separated host list becomes go-redis's addr= parameters.
	userHosts, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		userHosts, pathQuery = rest[:i], rest[i:]
	}
	userinfo, hosts := "", userHosts
	if i := strings.LastIndex(userHosts, "@"); i >= 0 {
		userinfo, hosts = userHosts[:i+1], userHosts[i+1:]
	}
	list := strings.Split(hosts, ",")
	path, query, _ := strings.Cut(pathQuery, "?")
	params := []string{}
	if query != "" {
		params = append(params, query)
	}
	for _, h := range list[1:] {
		params = append(params, "addr="+h)
	}
	// What every kind's options get: the CA, and deadlines honoured.
	finish := func(t *tls.Config, contextTimeout *bool) {
		if roots != nil {
			t.RootCAs = roots // rediss:// is checked above, so t is set
		}
		*contextTimeout = true
	}
	switch Kind(kind) {
	case "":
		if len(list) > 1 {
			return nil, "", fmt.Errorf("invalid upstream %q: several hosts need redis+sentinel:// or redis+cluster://", Redact(addr))
		}
		opt, err := redis.ParseURL(addr)
		if err != nil {
			return nil, "", fmt.Errorf("invalid upstream: %w", err)
		}
		finish(opt.TLSConfig, &opt.ContextTimeoutEnabled)
		return redis.NewClient(opt), Standalone, nil
	case Sentinel:
		master := strings.Trim(path, "/")
		if master == "" {
			return nil, "", fmt.Errorf("invalid upstream %q: a Sentinel address ends with the master name: redis+sentinel://host:26379/mymaster", Redact(addr))
		}
		params = append(params, "master_name="+master)
		opt, err := redis.ParseFailoverURL(base + "://" + userinfo + list[0] + "?" + strings.Join(params, "&"))
		if err != nil {
			return nil, "", fmt.Errorf("invalid upstream: %w", err)
		}
		finish(opt.TLSConfig, &opt.ContextTimeoutEnabled)
		return redis.NewFailoverClient(opt), Sentinel, nil
	case Cluster:
		opt, err := redis.ParseClusterURL(base + "://" + userinfo + list[0] + "?" + strings.Join(params, "&"))
		if err != nil {
			return nil, "", fmt.Errorf("invalid upstream: %w", err)
		}
		finish(opt.TLSConfig, &opt.ContextTimeoutEnabled)
		if !strings.Contains(query, "min_retry_backoff=") {
			opt.MinRetryBackoff = RedirectBackoff
		}
		return redis.NewClusterClient(opt), Cluster, nil
	}
	return nil, "", fmt.Errorf("invalid upstream %q: unknown kind %q (sentinel or cluster)", Redact(addr), kind)
}

// RedirectBackoff is a Cluster client's min_retry_backoff unless the
// address sets one. go-redis waits that long, and up to three times as
// long, before it follows a MOVED or ASK redirection inside a pipeline
// (alone, a command follows at once); its default, 10ms, costs a batch on
// a slot that is moving 10 to 30ms of its deadline at each redirection.
// The store's script calls are never retried on an error (see cluster.go),
// so the back-off delays only redirections, which need no pause.
const RedirectBackoff = time.Millisecond

// Quoted is an upstream address as an error about it quotes it: Redact's,
// with the scheme the user typed, which may be what is wrong.
func Quoted(addr string) string {
	if scheme, _, ok := strings.Cut(addr, "://"); ok {
		return scheme + "://" + Redact(addr)
	}
	return Redact(addr)
}

// Redact is an upstream address without its scheme, credentials and
// query: what logs, INFO and spans may show.
func Redact(addr string) string {
	_, rest, _ := strings.Cut(addr, "://")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexAny(rest, "?"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
