package redisclient_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluice-rl/sluice/internal/redisclient"
	"github.com/sluice-rl/sluice/internal/redisurl"
)

func TestNewClient(t *testing.T) {
	roots := x509.NewCertPool()
	for _, tc := range []struct {
		addr  string
		roots *x509.CertPool
		kind  redisurl.Kind
		want  string // what the client's options say, as describe renders them
	}{
		{"redis://127.0.0.1:6379/2", nil, redisurl.Standalone, "addr=127.0.0.1:6379 db=2 user= tls=false ctx=true"},
		{"rediss://user:pw@cache.internal:6380", roots, redisurl.Standalone, "addr=cache.internal:6380 db=0 user=user tls=true roots=true ctx=true"},
		{"redis+sentinel://127.0.0.1:26379,127.0.0.2:26379/mymaster", nil, redisurl.Sentinel, "failover ctx=true"},
		{"redis+cluster://127.0.0.1:7000,127.0.0.2:7001?dial_timeout=1s", nil, redisurl.Cluster, "addrs=127.0.0.1:7000,127.0.0.2:7001 dial=1s backoff=1ms ctx=true"},
		{"redis+cluster://127.0.0.1:7000?min_retry_backoff=20ms", nil, redisurl.Cluster, "addrs=127.0.0.1:7000 dial=5s backoff=20ms ctx=true"},
		{"rediss+cluster://u:p@127.0.0.1:7000", roots, redisurl.Cluster, "addrs=127.0.0.1:7000 dial=5s backoff=1ms tls=true roots=true ctx=true"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			c, kind, err := redisclient.NewClient(tc.addr, tc.roots)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if kind != tc.kind {
				t.Errorf("kind %q, want %q", kind, tc.kind)
			}
			if got := describe(c, tc.roots); got != tc.want {
				t.Errorf("options: %s\nwant:    %s", got, tc.want)
			}
		})
	}
}

// describe renders what NewClient set in a client's options.
func describe(c redis.UniversalClient, roots *x509.CertPool) string {
	switch c := c.(type) {
	case *redis.ClusterClient:
		o := c.Options()
		s := "addrs=" + strings.Join(o.Addrs, ",") + " dial=" + o.DialTimeout.String() + " backoff=" + o.MinRetryBackoff.String()
		if o.TLSConfig != nil {
			s += " tls=true roots=" + boolString(o.TLSConfig.RootCAs == roots)
		}
		return s + " ctx=" + boolString(o.ContextTimeoutEnabled)
	case *redis.Client:
		o := c.Options()
		if strings.HasPrefix(o.Addr, "FailoverClient") || o.Addr == "" {
			return "failover ctx=" + boolString(o.ContextTimeoutEnabled)
		}
		s := "addr=" + o.Addr + " db=" + string(rune('0'+o.DB)) + " user=" + o.Username + " tls=" + boolString(o.TLSConfig != nil)
		if o.TLSConfig != nil {
			s += " roots=" + boolString(o.TLSConfig.RootCAs == roots)
		}
		return s + " ctx=" + boolString(o.ContextTimeoutEnabled)
	}
	return "unknown client"
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// TestNewClientRefuses checks what NewClient adds to redisurl's checks,
// and that its errors are redisurl's, with the address redacted.
func TestNewClientRefuses(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		roots *x509.CertPool
		want  string
	}{
		{"redis://x:1?bogus=1", nil, `invalid upstream "redis://x:1": unknown option "bogus"`},
		{"redis://x:1", x509.NewCertPool(), `invalid upstream "redis://x:1": a CA is given but the address does not use TLS`},
		{"redis://user:secret@x?pool_size=-", nil, `invalid upstream "redis://x": invalid pool_size "-"`},
	} {
		c, _, err := redisclient.NewClient(tc.addr, tc.roots)
		if err == nil {
			c.Close()
			t.Errorf("%s: accepted", tc.addr)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v; want it to start %q", tc.addr, err, tc.want)
		}
	}
}

// FuzzParseAgrees holds redisurl to go-redis: an address that redisurl
// reads, go-redis's URL parser for its kind reads too and builds a client
// from (without a panic: go-redis panics on a pool over 2^31-1, and runs
// out of memory on one far smaller), so that the settings table, which
// links no Redis client, refuses every address that would fail the
// sidecar's start. The client is built offline (see build): an input
// costs its parsing and building, never a name lookup or a dial's wait.
func FuzzParseAgrees(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/2", "rediss://u:p@h:6380?db=1&skip_verify=1&idle_timeout=3",
		"redis+sentinel://a:1,b:2/m?db=3&replica_only=true", "rediss+sentinel://a:1/m?skip_verify=0&disableIdentity=1",
		"redis+cluster://a:1,b:2?dial_timeout=1s&addr=c:3&max_redirects=2", "rediss+cluster://a:1?route_randomly=1",
		"redis://x?pool_size=10000&min_idle_conns=-1", "redis://x?conn_max_lifetime_jitter=1s&max_conn_age=2s", "redis://[::1]/0",
		"redis://x?pool_size=10000&min_idle_conns=10000", "redis+sentinel://a:1,b:2/m?min_idle_conns=3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		a, err := redisurl.Parse(addr)
		if err != nil {
			return
		}
		if err := build(a); err != nil {
			t.Fatalf("%q: redisurl reads it, go-redis refuses it: %v", addr, err)
		}
	})
}

// build parses a's client address with go-redis's parser for its kind, as
// NewClient does, builds the client from the options offline, and closes
// it. What is tested is that go-redis reads the address and builds its
// pools, which is where it panics. Offline, because building a client
// otherwise waits on the network: a standalone client resolves its host
// name to choose a maintenance-notifications endpoint (a DNS lookup of up
// to 2s for each input, the fuzz target's stalls at 0 execs/sec), and
// min_idle_conns is dialled as the client is built, in goroutines that
// outlive Close (for Sentinel, its sentinels are asked first). So the
// notifications are off, no connection is made ahead of use, and a dial
// fails at once.
func build(a redisurl.Addr) error {
	off := func() *maintnotifications.Config {
		return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	switch a.Kind {
	case redisurl.Sentinel:
		opt, err := redis.ParseFailoverURL(a.Client)
		if err != nil {
			return err
		}
		opt.MinIdleConns, opt.Dialer = 0, noDial // its notifications are off already
		return redis.NewFailoverClient(opt).Close()
	case redisurl.Cluster:
		opt, err := redis.ParseClusterURL(a.Client)
		if err != nil {
			return err
		}
		opt.MinIdleConns, opt.Dialer, opt.MaintNotificationsConfig = 0, noDial, off()
		return redis.NewClusterClient(opt).Close()
	}
	opt, err := redis.ParseURL(a.Client)
	if err != nil {
		return err
	}
	opt.MinIdleConns, opt.Dialer, opt.MaintNotificationsConfig = 0, noDial, off()
	return redis.NewClient(opt).Close()
}

var errNoDial = errors.New("no dial: the client is built offline")

func noDial(context.Context, string, string) (net.Conn, error) { return nil, errNoDial }

// TestParseAgreesOnEveryOption feeds go-redis each option redisurl takes,
// so that an option go-redis dropped would fail here, not at start.
func TestParseAgreesOnEveryOption(t *testing.T) {
	values := []string{"1", "true", "1s", "h:1", ""}
	for _, base := range []string{"rediss://h:1/0?", "rediss+sentinel://h:1/m?", "rediss+cluster://h:1?"} {
		// redisurl's refusal of an unknown option lists those it takes.
		_, err := redisurl.Parse(base + "zz=1")
		_, list, ok := strings.Cut(fmt.Sprint(err), " address takes ")
		names := strings.Split(list, ", ")
		if !ok || len(names) < 20 {
			t.Fatalf("%szz=1: %v: want the options listed", base, err)
		}
		for _, name := range names {
			for _, v := range values {
				addr := base + name + "=" + v
				if _, err := redisurl.Parse(addr); err != nil {
					continue
				}
				c, _, err := redisclient.NewClient(addr, nil)
				if err != nil {
					t.Errorf("%s: redisurl reads it, go-redis refuses it: %v", addr, err)
					continue
				}
				c.Close()
				break // one value read is enough: go-redis reads an option by one type
			}
		}
	}
}
