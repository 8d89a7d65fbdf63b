package tests

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/service"
)

// TestExplainOnRedis: RL.EXPLAIN through the binary on a real Redis names
// the limit that refused, says Redis decided, and shows the count that
// Redis itself holds for that limit; asking took nothing.
func TestExplainOnRedis(t *testing.T) {
	r := redistest.Start(t)
	pol := policiesFile(t, `policies:
  api:
    limits:
      - {name: burst, algorithm: token_bucket, rate: 5, period: 1s, capacity: 5}
      - {name: minute, algorithm: fixed_window, limit: 2, period: 1m}
`)
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--policies", pol, "--upstream-timeout", decidingTimeout)
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 2 {
		if err := c.Do(ctx, "RL.ALLOW", "api", "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	explain := func() service.Explanation {
		t.Helper()
		doc, err := c.Do(ctx, "RL.EXPLAIN", "RL.ALLOW", "api", "k").Text()
		if err != nil {
			t.Fatal(err)
		}
		var e service.Explanation
		if err := json.Unmarshal([]byte(doc), &e); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		return e
	}
	e := explain()
	if e.Allowed || e.Bound != "minute" || e.Path != "redis" || e.Why != "redis decided" || e.Digest == "" || len(e.Limits) != 2 {
		t.Fatalf("explanation %+v: want refused by minute, decided by redis, with the policies' digest", e)
	}
	if got := e.Limits[1].State; len(got) < 11 || got[:11] != "used 2 of 2" {
		t.Errorf("minute's state %q; want used 2 of 2", got)
	}
	// Redis's own count of the limit, under the policy's key.
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()
	keys, err := rc.Keys(ctx, "*{api:k}:minute:fixed").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the minute limit's key in Redis: %q, %v", keys, err)
	}
	if n, err := rc.HGet(ctx, keys[0], "n").Int64(); err != nil || n != 2 {
		t.Errorf("Redis counts %d (%v) in %s; the explanation says 2", n, err, keys[0])
	}
	// Explaining took nothing: the same answer again, and Redis still at 2.
	if again := explain(); again.Limits[1].Remaining != e.Limits[1].Remaining || !again.Limits[0].Allowed {
		t.Errorf("a second explanation %+v differs from the first %+v", again, e)
	}
	if n, _ := rc.HGet(ctx, keys[0], "n").Int64(); n != 2 {
		t.Errorf("after RL.EXPLAIN Redis counts %d; want 2 still", n)
	}
}

// TestExplainHeldIsWhatRedisHolds: RL.EXPLAIN reads each limit's state
// back from Redis, and what it shows is what redis-cli reads from the same
// key, on one Redis and on Cluster: a fixed window's w and n, a token
// bucket's z, GCRA's z; the memory store shows its own.
func TestExplainHeldIsWhatRedisHolds(t *testing.T) {
	pol := policiesFile(t, `policies:
  api:
    limits:
      - {name: burst, algorithm: token_bucket, rate: 5, period: 1s, capacity: 5}
      - {name: minute, algorithm: fixed_window, limit: 2, period: 1m}
  one:
    algorithm: gcra
    rate: 10
    period: 1h
    burst: 4
`)
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (args []string, cli []string) // the sidecar's flags, redis-cli's to reach the key
	}{
		{"memory", func(*testing.T) ([]string, []string) { return nil, nil }},
		{"redis", func(t *testing.T) ([]string, []string) {
			r := redistest.Start(t)
			host, port, _ := strings.Cut(r.Addr, ":")
			return []string{"--upstream", "redis://" + r.Addr}, []string{"-h", host, "-p", port}
		}},
		{"cluster", func(t *testing.T) ([]string, []string) {
			c := redistest.StartCluster(t, 3, 0)
			host, port, _ := strings.Cut(c.Addrs()[0], ":")
			return []string{"--upstream", "redis+cluster://" + strings.Join(c.Addrs(), ",")}, []string{"-c", "-h", host, "-p", port}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, cli := tc.start(t)
			s := startSluice(t, append(args, "--policies", pol, "--upstream-timeout", decidingTimeout)...)
			c := redis.NewClient(&redis.Options{Addr: s.Addr})
			defer c.Close()
			ctx := ctxT(t)
			for _, cmd := range [][]any{{"RL.ALLOW", "api", "k"}, {"RL.ALLOW", "api", "k"}, {"RL.ALLOW", "one", "k", "3"}} {
				if err := c.Do(ctx, cmd...).Err(); err != nil {
					t.Fatal(err)
				}
			}
			explain := func(policy string) service.Explanation {
				t.Helper()
				doc, err := c.Do(ctx, "RL.EXPLAIN", "RL.ALLOW", policy, "k").Text()
				if err != nil {
					t.Fatal(err)
				}
				var e service.Explanation
				if err := json.Unmarshal([]byte(doc), &e); err != nil {
					t.Fatalf("%s: %v", doc, err)
				}
				for _, l := range e.Limits {
					if l.Held == nil || l.Held.Error != "" || l.Held.At == 0 {
						t.Fatalf("%s: limit %s held %+v; want the state read back", doc, l.Name, l.Held)
					}
				}
				return e
			}
			api, one := explain("api"), explain("one")
			burst, minute, gcra := api.Limits[0].Held, api.Limits[1].Held, one.Limits[0].Held
			if minute.Values["n"] != 2 || !strings.HasPrefix(minute.State, "used 2 of 2, back to full in ") {
				t.Errorf("minute holds %+v; want a count of 2", minute)
			}
			if burst.Values["z"] == 0 || !strings.HasPrefix(burst.State, "tokens ") {
				t.Errorf("burst holds %+v; want a z", burst)
			}
			if gcra.Values["z"] == 0 || !strings.HasPrefix(gcra.State, "TAT now+") {
				t.Errorf("one holds %+v; want a z", gcra)
			}
			if cli == nil {
				return // the memory store's own: nothing for redis-cli to read
			}
			read := func(args ...string) string {
				t.Helper()
				out, err := exec.Command("redis-cli", append(cli, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("redis-cli %q: %v: %s", args, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			for _, f := range []string{"w", "n"} {
				if got := read("HGET", minute.Key, f); got != strconv.FormatInt(minute.Values[f], 10) {
					t.Errorf("redis-cli HGET %s %s = %q; RL.EXPLAIN says %d", minute.Key, f, got, minute.Values[f])
				}
			}
			for _, h := range []*service.HeldState{burst, gcra} {
				if got := read("GET", h.Key); got != strconv.FormatInt(h.Values["z"], 10) {
					t.Errorf("redis-cli GET %s = %q; RL.EXPLAIN says z = %d", h.Key, got, h.Values["z"])
				}
			}
		})
	}
}
