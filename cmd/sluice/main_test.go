package main

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFlagsAndEnv(t *testing.T) {
	var out bytes.Buffer
	o, err := parseFlags(nil, envOf(nil), &out)
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:6380" || o.upstream != "" || o.logLevel != "info" || o.logFormat != "text" || o.keyPrefix != "sluice:" {
		t.Errorf("defaults = %+v", o)
	}
	env := envOf(map[string]string{"SLUICE_LISTEN": "127.0.0.1:7000", "SLUICE_UPSTREAM": "redis://r:6379",
		"SLUICE_POLICIES": "p.yaml", "SLUICE_REQUIREPASS": "pw", "SLUICE_LOG_LEVEL": "debug", "SLUICE_LOG_FORMAT": "json"})
	o, err = parseFlags([]string{"--listen", "127.0.0.1:7001"}, env, &out)
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:7001" || o.upstream != "redis://r:6379" || o.policies != "p.yaml" ||
		o.requirePass != "pw" || o.logLevel != "debug" || o.logFormat != "json" {
		t.Errorf("env and flags = %+v", o)
	}
	if _, err := parseFlags([]string{"extra"}, envOf(nil), &out); err == nil {
		t.Error("a positional argument was accepted")
	}
	if o, err := parseFlags([]string{"--io-loops", "0"}, envOf(nil), &out); err != nil || o.ioLoops != 0 {
		t.Errorf("--io-loops 0: %d, %v; want a goroutine per connection", o.ioLoops, err)
	}
	if o, _ := parseFlags(nil, envOf(nil), &out); o.ioLoops != 1 {
		t.Errorf("--io-loops defaults to %d, want 1", o.ioLoops)
	}
	if _, err := parseFlags([]string{"--shutdown-timeout", "soon"}, envOf(nil), &out); err == nil {
		t.Error("a bad --shutdown-timeout was accepted")
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, envOf(nil), &out); code != 0 {
		t.Errorf("--help exit code %d", code)
	}
	for _, want := range []string{"-listen", "SLUICE_LISTEN", "-upstream", "SLUICE_UPSTREAM", "-policies", "-requirepass",
		"-log-format", "-log-level", "-shutdown-timeout", "-on-upstream-failure", "-policies-poll", "-key-prefix", "redis+sentinel://", "redis+cluster://", "in-memory"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %q:\n%s", want, out.String())
		}
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, 1, "refusing to listen on"},
		{[]string{"--listen", ":0"}, 1, "without a password"},
		{[]string{"--listen", "nonsense"}, 1, "invalid --listen"},
		{[]string{"--log-level", "loud"}, 2, "invalid --log-level"},
		{[]string{"--log-format", "xml"}, 2, "invalid --log-format"},
		{[]string{"--listen", "127.0.0.1:0", "--policies", "/nonexistent/p.yaml"}, 1, "/nonexistent/p.yaml"},
		{[]string{"--listen", "127.0.0.1:0", "--upstream", "http://x"}, 1, "scheme must be redis"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--on-upstream-failure", "maybe"}, 2, "invalid --on-upstream-failure"},
		{[]string{"--policies-poll", "-1s"}, 2, "invalid --policies-poll"},
		{[]string{"--io-loops", "-1"}, 2, "invalid --io-loops \"-1\": must be a positive integer, or 0"},
		{[]string{"--max-clients", "0"}, 2, "invalid --max-clients \"0\": must be a positive integer"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), tc.args, envOf(nil), &out)
		if code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("run(%q) = %d, %q; want %d and %q", tc.args, code, out.String(), tc.code, tc.want)
		}
	}
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr, pass string
		ok         bool
	}{
		{"127.0.0.1:6380", "", true},
		{"127.0.0.2:6380", "", true},
		{"[::1]:6380", "", true},
		{"localhost:6380", "", true},
		{"0.0.0.0:6380", "", false},
		{":6380", "", false},
		{"10.1.2.3:6380", "", false},
		{"0.0.0.0:6380", "pw", true},
	} {
		if err := checkListen(tc.addr, tc.pass); (err == nil) != tc.ok {
			t.Errorf("checkListen(%q, %q) = %v", tc.addr, tc.pass, err)
		}
	}
}

func TestUpstreamAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr, kind string
		check      func(redis.UniversalClient) string
	}{
		{"redis://127.0.0.1:6379/0", "standalone", func(c redis.UniversalClient) string {
			return c.(*redis.Client).Options().Addr
		}},
		{"rediss://user:pw@cache.internal:6380", "standalone", func(c redis.UniversalClient) string {
			o := c.(*redis.Client).Options()
			return o.Addr + " " + o.Username + " tls=" + boolString(o.TLSConfig != nil)
		}},
		{"redis+sentinel://127.0.0.1:26379,127.0.0.2:26379/mymaster", "sentinel", func(c redis.UniversalClient) string {
			_, ok := c.(*redis.Client)
			return boolString(ok)
		}},
		{"redis+cluster://127.0.0.1:7000,127.0.0.2:7001?dial_timeout=1s", "cluster", func(c redis.UniversalClient) string {
			return strings.Join(c.(*redis.ClusterClient).Options().Addrs, ",")
		}},
	} {
		c, kind, err := newUpstreamClient(tc.addr)
		if err != nil {
			t.Errorf("%s: %v", tc.addr, err)
			continue
		}
		if kind != tc.kind {
			t.Errorf("%s: kind %q, want %q", tc.addr, kind, tc.kind)
		}
		t.Logf("%s → %s", tc.addr, tc.check(c))
		c.Close()
	}
	for _, bad := range []string{"127.0.0.1:6379", "http://x", "redis://a:1,b:2", "redis+sentinel://a:1", "redis+ring://a:1", "redis://x:1?bogus=1"} {
		if c, _, err := newUpstreamClient(bad); err == nil {
			c.Close()
			t.Errorf("%s: accepted", bad)
		}
	}
	if got := redactedHosts("redis://u:secret@h:1?x=y"); got != "h:1" {
		t.Errorf("redactedHosts = %q", got)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// TestTuneGC: the collector's target is Sluice's default unless GOGC is
// set, in which case Go's own reading of it stands.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	tuneGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("GOGC unset: GC percent %d; want %d", got, defaultGCPercent)
	}
	tuneGC(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100: GC percent %d; want it left alone", got)
	}
}
