package upstream_test

import (
	"crypto/x509"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/upstream"
)

func TestNewClient(t *testing.T) {
	roots := x509.NewCertPool()
	for _, tc := range []struct {
		addr  string
		roots *x509.CertPool
		kind  upstream.Kind
		want  string // what the client's options say, as describe renders them
	}{
		{"redis://127.0.0.1:6379/2", nil, upstream.Standalone, "addr=127.0.0.1:6379 db=2 user= tls=false ctx=true"},
		{"rediss://user:pw@cache.internal:6380", roots, upstream.Standalone, "addr=cache.internal:6380 db=0 user=user tls=true roots=true ctx=true"},
		{"redis+sentinel://127.0.0.1:26379,127.0.0.2:26379/mymaster", nil, upstream.Sentinel, "failover ctx=true"},
		{"redis+cluster://127.0.0.1:7000,127.0.0.2:7001?dial_timeout=1s", nil, upstream.Cluster, "addrs=127.0.0.1:7000,127.0.0.2:7001 dial=1s backoff=1ms ctx=true"},
		{"redis+cluster://127.0.0.1:7000?min_retry_backoff=20ms", nil, upstream.Cluster, "addrs=127.0.0.1:7000 dial=5s backoff=20ms ctx=true"},
		{"rediss+cluster://u:p@127.0.0.1:7000", roots, upstream.Cluster, "addrs=127.0.0.1:7000 dial=5s backoff=1ms tls=true roots=true ctx=true"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			c, kind, err := upstream.NewClient(tc.addr, tc.roots)
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

func TestNewClientRefuses(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		roots *x509.CertPool
		want  string
	}{
		{"127.0.0.1:6379", nil, "expected redis://host:port"},
		{"http://x", nil, `invalid upstream "http://x": scheme "http" must be redis`},
		{"redis://a:1,b:2", nil, "several hosts need"},
		{"redis+sentinel://a:1", nil, "ends with the master name"},
		{"redis+ring://a:1", nil, `unknown kind "ring"`},
		{"redis://x:1?bogus=1", nil, "bogus"},
		{"redis://x:1", x509.NewCertPool(), "does not use TLS"},
		{"redis://user:secret@x", nil, ""}, // accepted: checked below for its error text
	} {
		c, _, err := upstream.NewClient(tc.addr, tc.roots)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.addr, err)
			} else {
				c.Close()
			}
			continue
		}
		if err == nil {
			c.Close()
			t.Errorf("%s: accepted", tc.addr)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want it to say %q", tc.addr, err, tc.want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error shows the password: %v", tc.addr, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:secret@h:1?x=y":                    "h:1",
		"redis+cluster://a:1,b:2":                     "a:1,b:2",
		"rediss+sentinel://:pw@s1:26379,s2:26379/mym": "s1:26379,s2:26379/mym",
	} {
		if got := upstream.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
