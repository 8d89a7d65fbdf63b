package redisurl_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/redisurl"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		kind   redisurl.Kind
		tls    bool
		hosts  []string
		master string
		client string
	}{
		{"redis://127.0.0.1:6379/2", redisurl.Standalone, false, []string{"127.0.0.1:6379"}, "", "redis://127.0.0.1:6379/2"},
		{"rediss://user:pw@cache.internal:6380?db=1&skip_verify=true", redisurl.Standalone, true, []string{"cache.internal:6380"}, "",
			"rediss://user:pw@cache.internal:6380?db=1&skip_verify=true"},
		{"redis://h", redisurl.Standalone, false, []string{"h"}, "", "redis://h"},
		{"redis+sentinel://127.0.0.1:26379,127.0.0.2:26379/mymaster", redisurl.Sentinel, false,
			[]string{"127.0.0.1:26379", "127.0.0.2:26379"}, "mymaster",
			"redis://127.0.0.1:26379?addr=127.0.0.2%3A26379&master_name=mymaster"},
		{"rediss+sentinel://:pw@s1:26379/m?db=3&password=x&addr=s2:26379", redisurl.Sentinel, true,
			[]string{"s1:26379", "s2:26379"}, "m", "rediss://:pw@s1:26379?db=3&password=x&addr=s2:26379&master_name=m"},
		{"redis+sentinel://s:1/&0", redisurl.Sentinel, false, []string{"s:1"}, "&0", "redis://s:1?master_name=%260"}, // found by upstream's FuzzParseAgrees
		{"redis+cluster://127.0.0.1:7000,127.0.0.2:7001?dial_timeout=1s", redisurl.Cluster, false,
			[]string{"127.0.0.1:7000", "127.0.0.2:7001"}, "", "redis://127.0.0.1:7000?dial_timeout=1s&addr=127.0.0.2%3A7001"},
		{"rediss+cluster://u:p@[::1]:7000?read_timeout=2&pool_size=20", redisurl.Cluster, true,
			[]string{"[::1]:7000"}, "", "rediss://u:p@[::1]:7000?read_timeout=2&pool_size=20"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			a, err := redisurl.Parse(tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			if a.Kind != tc.kind || a.TLS != tc.tls || !slices.Equal(a.Hosts, tc.hosts) || a.Master != tc.master || a.Client != tc.client {
				t.Errorf("got  %+v\nwant {Kind:%s TLS:%t Hosts:%v Master:%s Client:%s}", a, tc.kind, tc.tls, tc.hosts, tc.master, tc.client)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:6379", "expected redis://host:port"},
		{"http://x", "scheme must be redis"},
		{"redis://a:1,b:2", "several hosts need"},
		{"redis+sentinel://a:1", "ends with the master name"},
		{"redis+sentinel://a:1/m?master_name=n", "names its master in its path"},
		{"redis+ring://a:1", `unknown kind "ring"`},
		{"redis+://", `unknown kind ""`}, // found by upstream's FuzzParseAgrees
		{"redis://x:1?bogus=1", `unknown option "bogus"; a server's address takes client_name, conn_max_idle_time,`},
		{"redis+cluster://x:1?db=1", `unknown option "db"`},
		{"redis://x:1?max_redirects=1", `unknown option "max_redirects"`},
		{"redis://x:1?skip_verify=true", "skip_verify needs TLS"},
		{"redis://x:1?idle_timeout=1s&conn_max_idle_time=2s", "give conn_max_idle_time alone"},
		{"redis://x:1?dial_timeout=soon", `invalid dial_timeout "soon"`},
		{"redis://x:1?pool_size=many", `invalid pool_size "many"`},
		{"redis://x:1?pool_size=2147483648", `invalid pool_size "2147483648": at most 10000`},
		{"redis+cluster://x:1?max_active_conns=10001", `invalid max_active_conns "10001": at most 10000`},
		{"redis://x:1?pool_fifo=yes", `invalid pool_fifo "yes"`},
		{"redis://x:1/zero", `invalid database number "zero"`},
		{"redis://x:1/0/1", "one database number at most"},
		{"redis+cluster://a:1,b", `invalid host "b"`},
		{"redis+cluster://a:1?addr=:2", `invalid host ":2"`},
		{"redis+cluster://a:1,b:2&x=1", `invalid port in "b:2&x=1"`},
		{"redis://u:secret@x:port", `invalid port ":port"`},
	} {
		_, err := redisurl.Parse(tc.addr)
		if err == nil {
			t.Errorf("%s: accepted", tc.addr)
			continue
		}
		var e *redisurl.Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %T is not a *redisurl.Error", tc.addr, err)
			continue
		}
		if !strings.Contains(e.Reason, tc.want) {
			t.Errorf("%s: %v; want it to say %q", tc.addr, err, tc.want)
		}
		// Redacted, with the scheme the user typed: it may be what is wrong.
		if e.Addr != redisurl.Quoted(tc.addr) || !strings.HasPrefix(err.Error(), `invalid upstream "`+e.Addr+`": `) {
			t.Errorf("%s: %v: does not start with the redacted address and its scheme", tc.addr, err)
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
		if got := redisurl.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParse holds what every address gets, read or refused: no panic, no
// password in an error, and hosts that are the address's own.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/2", "rediss://u:secret@h:6380?db=1&skip_verify=1",
		"redis+sentinel://a:1,b:2/m?db=3", "redis+cluster://a:1,b:2?dial_timeout=1s&addr=c:3",
		"redis://u:secret@x:port", "redis://x?pool_size=99999999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		a, err := redisurl.Parse(addr)
		if err != nil {
			if _, pw, ok := strings.Cut(addr, ":secret@"); ok && strings.Contains(err.Error(), "secret@"+pw) {
				t.Errorf("%q: error shows the password: %v", addr, err)
			}
			return
		}
		if len(a.Hosts) == 0 {
			t.Fatalf("%q: read with no host", addr)
		}
		for _, h := range a.Hosts {
			if !strings.Contains(addr, h) {
				t.Errorf("%q: host %q is not in the address", addr, h)
			}
		}
	})
}
