// Package redisurl reads an upstream Redis address: its shape (one server,
// Sentinel or Cluster), its hosts, its TLS, the options a Redis client
// takes from its query, and the same address with its credentials taken
// out, for logs and INFO.
//
//	redis://[user:pass@]host:6379[/db]              one Redis server (rediss:// for TLS)
//	redis+sentinel://host1:26379,host2:26379/master Sentinel: the sentinels, then the master's name
//	redis+cluster://host1:7000,host2:7001           Cluster: seed nodes
//
// with go-redis's query parameters (?dial_timeout=1s&pool_size=20 …).
//
// It is a leaf (the standard library alone) so that what checks an
// address without connecting, the settings table and the injector that
// renders them, links no Redis client: upstream turns a parsed Addr into
// go-redis's options, and Parse refuses whatever go-redis's URL parsers
// would refuse (upstream's tests hold the two together), so that a bad
// address is a setting's error before anything starts.
package redisurl

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is the shape of the upstream an address names.
type Kind string

// The kinds of upstream.
const (
	Standalone Kind = "standalone"
	Sentinel   Kind = "sentinel"
	Cluster    Kind = "cluster"
)

// DefaultPrefix starts every Redis key the store writes unless another
// prefix is set (--key-prefix).
const DefaultPrefix = "sluice:"

// Addr is a parsed upstream address.
type Addr struct {
	Kind Kind
	// TLS is a rediss scheme.
	TLS bool
	// Hosts are the address's host:port list as written (a missing host
	// or port is the client's default): the server, the sentinels or the
	// Cluster's seed nodes, then those of addr= parameters.
	Hosts []string
	// Master is a Sentinel address's master name (its path).
	Master string
	// Client is the address in the form a Redis client's URL parser reads:
	// one host, the others as addr= parameters, a Sentinel's master as
	// master_name=. It holds the credentials: never show it.
	Client string
}

// Error is an address that Parse refuses. Its text names the address
// without credentials (Redact), then the reason.
type Error struct {
	Addr   string // redacted
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("invalid upstream %q: %s", e.Addr, e.Reason) }

// Parse reads an upstream address. Its errors are *Error.
func Parse(addr string) (Addr, error) {
	fail := func(format string, args ...any) (Addr, error) {
		return Addr{}, &Error{Addr: Quoted(addr), Reason: fmt.Sprintf(format, args...)}
	}
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return fail("expected redis://host:port, redis+sentinel://… or redis+cluster://…")
	}
	base, kind, plus := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return fail("scheme must be redis, rediss, redis+sentinel, redis+cluster, rediss+sentinel or rediss+cluster")
	}
	a := Addr{TLS: base == "rediss"}
	switch Kind(kind) {
	case "":
		if plus {
			return fail("unknown kind \"\" (sentinel or cluster)")
		}
		a.Kind = Standalone
	case Sentinel, Cluster:
		a.Kind = Kind(kind)
	default:
		return fail("unknown kind %q (sentinel or cluster)", kind)
	}
	// A comma-separated host list becomes addr= parameters.
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
	// A fragment is no part of the query, as net/url (and go-redis) read
	// it: "?c#x" asks for option c.
	query, _, _ = strings.Cut(query, "#")
	params := []string{}
	if query != "" {
		params = append(params, query)
	}
	for _, h := range list[1:] {
		params = append(params, "addr="+url.QueryEscape(h))
	}
	switch a.Kind {
	case Standalone:
		if len(list) > 1 {
			return fail("several hosts need redis+sentinel:// or redis+cluster://")
		}
		a.Client = addr
	case Sentinel:
		a.Master = strings.Trim(path, "/")
		if a.Master == "" {
			return fail("a Sentinel address ends with the master name: redis+sentinel://host:26379/mymaster")
		}
		params = append(params, "master_name="+url.QueryEscape(a.Master))
		fallthrough
	case Cluster:
		// A Cluster address's path is ignored: Cluster has database 0
		// alone.
		a.Client = base + "://" + userinfo + list[0] + "?" + strings.Join(params, "&")
	}
	u, err := url.Parse(a.Client)
	if err != nil {
		return fail("%s", urlReason(err))
	}
	if u.Host != list[0] {
		// Percent-escapes decoded: the host go-redis dials is not the one
		// written, which logs and INFO would show.
		return fail("host %q is not a plain host:port", list[0])
	}
	a.Hosts = []string{u.Host}
	if a.Kind == Standalone {
		if reason := standaloneDB(u.Path); reason != "" {
			return fail("%s", reason)
		}
	}
	for _, h := range list[1:] {
		if reason := checkHost(h); reason != "" {
			return fail("%s", reason)
		}
		a.Hosts = append(a.Hosts, h)
	}
	// The query as the client reads it: pairs it cannot read are dropped
	// (url.URL.Query), not refused.
	q, _ := url.ParseQuery(query)
	more, reason := options(a.Kind, a.TLS, q)
	if reason != "" {
		return fail("%s", reason)
	}
	a.Hosts = append(a.Hosts, more...)
	return a, nil
}

// urlReason is net/url's error without the address it quotes, which may
// hold a password.
func urlReason(err error) string {
	if ue, ok := err.(*url.Error); ok {
		err = ue.Err
	}
	return err.Error()
}

// standaloneDB checks a server address's path: none, or a database number.
func standaloneDB(path string) string {
	f := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	switch len(f) {
	case 0:
		return ""
	case 1:
		if _, err := strconv.Atoi(f[0]); err != nil {
			return fmt.Sprintf("invalid database number %q", f[0])
		}
		return ""
	}
	return fmt.Sprintf("invalid path %q: one database number at most", path)
}

// An option's type, as go-redis reads its value.
type optType uint8

const (
	optString   optType = iota
	optInt              // strconv.Atoi
	optPool             // a count of connections: at most maxPool
	optDuration         // a Go duration, or a whole number of seconds
	optBool             // true, false, 1, 0 or empty
	optAddr             // host:port, repeatable: one more host
)

// maxPool bounds a pool's connections: Redis takes 10,000 clients by
// default (maxclients), and go-redis sizes queues by the pool when it
// builds a client, panicking over 2^31-1 and running out of memory well
// before.
const maxPool = 10000

// The options go-redis's URL parsers take (go-redis v9's ParseURL,
// ParseFailoverURL and ParseClusterURL), by the kinds that take them.
// Any other is refused, as go-redis refuses it, and so are a Sentinel
// address's route_by_latency and route_randomly, which go-redis parses
// and then panics on (they are for its failover Cluster client).
var (
	commonOptions = map[string]optType{
		"protocol": optInt, "client_name": optString, "max_retries": optInt,
		"min_retry_backoff": optDuration, "max_retry_backoff": optDuration,
		"dial_timeout": optDuration, "read_timeout": optDuration, "write_timeout": optDuration,
		"pool_fifo": optBool, "pool_size": optPool, "pool_timeout": optDuration,
		"min_idle_conns": optPool, "max_idle_conns": optPool, "max_active_conns": optPool,
		"max_concurrent_dials": optInt, "pipeline_pool_size": optPool,
		"pipeline_read_buffer_size": optInt, "pipeline_write_buffer_size": optInt,
		"conn_max_idle_time": optDuration, "conn_max_lifetime": optDuration, "conn_max_lifetime_jitter": optDuration,
	}
	kindOptions = map[Kind]map[string]optType{
		Standalone: {"db": optInt, "idle_timeout": optDuration, "max_conn_age": optDuration, "skip_verify": optBool},
		Sentinel: {"db": optInt, "addr": optAddr, "master_name": optString, "skip_verify": optBool,
			"route_by_latency_tolerance": optDuration, "replica_only": optBool, "use_disconnected_replicas": optBool, "username": optString, "password": optString,
			"dialer_retries": optInt, "dialer_retry_timeout": optDuration, "context_timeout_enabled": optBool,
			"disableIdentity": optBool, "identitySuffix": optString, "unstable_resp3": optBool},
		Cluster: {"addr": optAddr, "max_redirects": optInt, "read_only": optBool,
			"route_by_latency": optBool, "route_by_latency_tolerance": optDuration, "route_randomly": optBool,
			"dialer_retries": optInt, "dialer_retry_timeout": optDuration, "failing_timeout_seconds": optInt},
	}
	// aliases are a server's older names of an option: go-redis reads
	// one only when the newer is absent, and refuses the pair.
	aliases = map[string]string{"idle_timeout": "conn_max_idle_time", "max_conn_age": "conn_max_lifetime"}
)

// options checks an address's query against what its kind takes, and
// returns the hosts of its addr= parameters.
func options(k Kind, tls bool, q url.Values) (hosts []string, reason string) {
	if k == Sentinel && q.Has("master_name") {
		return nil, "a Sentinel address names its master in its path, not with master_name="
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names) // the first error in a stable order
	for _, name := range names {
		t, ok := commonOptions[name]
		if !ok {
			t, ok = kindOptions[k][name]
		}
		if !ok {
			return nil, fmt.Sprintf("unknown option %q; %s address takes %s", name, article[k], strings.Join(optionNames(k), ", "))
		}
		if name == "skip_verify" && !tls {
			return nil, "skip_verify needs TLS (rediss://)"
		}
		if newer, ok := aliases[name]; ok && q.Has(newer) {
			return nil, fmt.Sprintf("%s and %s are one option: give %s alone", name, newer, newer)
		}
		for _, v := range q[name] {
			if t == optAddr {
				if reason := checkHost(v); reason != "" {
					return nil, reason
				}
				hosts = append(hosts, v)
				continue
			}
			if msg := checkValue(t, v); msg != "" {
				return nil, fmt.Sprintf("invalid %s %q: %s", name, v, msg)
			}
		}
	}
	return hosts, ""
}

var article = map[Kind]string{Standalone: "a server's", Sentinel: "a Sentinel", Cluster: "a Cluster"}

// optionNames are the options an address of kind k takes, sorted.
func optionNames(k Kind) []string {
	var names []string
	for name := range commonOptions {
		names = append(names, name)
	}
	for name := range kindOptions[k] {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// checkHost checks a host after the first: go-redis takes it as an addr=
// parameter, which needs both a host and a port.
func checkHost(h string) string {
	host, port, err := net.SplitHostPort(h)
	if err != nil || host == "" || port == "" {
		return fmt.Sprintf("invalid host %q: expected host:port", h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Sprintf("invalid port in %q", h)
	}
	return ""
}

// checkValue says what is wrong with an option's value, or "".
func checkValue(t optType, v string) string {
	switch t {
	case optInt, optPool:
		if v == "" {
			return ""
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return "expected a whole number"
		}
		if t == optPool && n > maxPool {
			return fmt.Sprintf("at most %d", maxPool)
		}
	case optDuration:
		if v == "" {
			return ""
		}
		if _, err := strconv.Atoi(v); err == nil {
			return ""
		}
		if _, err := time.ParseDuration(v); err != nil {
			return "expected a duration such as 500ms, or whole seconds"
		}
	case optBool:
		switch v {
		case "true", "false", "1", "0", "":
		default:
			return "expected true, false, 1 or 0"
		}
	}
	return ""
}

// Quoted is an upstream address as an error about it quotes it: Redact's,
// with the scheme the user typed, which may be what is wrong (http://).
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
