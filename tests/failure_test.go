package tests

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/redisurl"
)

// With the upstream Redis gone, each decision gets its failure mode's
// answer, and when Redis is back the shared store decides again.
func TestUpstreamFailure(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want func(d []int64) bool
	}{
		{"local", func(d []int64) bool { return d[0] == 1 && d[2] < 10 }}, // the in-memory store: its own count
		{"allow", func(d []int64) bool { return d[0] == 1 }},
		{"deny", func(d []int64) bool { return d[0] == 0 }},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			r := redistest.Start(t)
			s := startSluice(t, "--upstream", "redis://"+r.Addr, "--on-upstream-failure", tc.mode)
			ctx := ctxT(t)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
			defer rdb.Close()
			do := func() ([]int64, error) {
				v, err := rdb.Do(ctx, "RL.TOKEN", "fail:k", 10, 1, "1h").Result()
				if err != nil {
					return nil, err
				}
				return decision(t, 2, v), nil
			}
			if d, err := do(); err != nil || d[0] != 1 || d[2] != 9 {
				t.Fatalf("with Redis up: %v, %v\n%s", d, err, s.logs)
			}
			r.Kill()
			for range 5 { // the breaker opens after a few failed round trips
				d, err := do()
				if err != nil || !tc.want(d) {
					t.Errorf("with Redis down (%s): %v, %v", tc.mode, d, err)
				}
			}
			r.Restart()
			// The restarted Redis lost its state: the key is in it again
			// once Redis decides again. Not told by the count a reply
			// shows: a round trip a loaded machine stretches past the
			// deadline is answered by the failure mode although Redis ran
			// it, so the first reply from Redis may be past its fresh
			// bucket's first token.
			key := redisurl.DefaultPrefix + "{fail:k}:token"
			deadline := time.Now().Add(10 * time.Second)
			for {
				d, err := do()
				if n, xerr := r.Do("EXISTS", key); err == nil && xerr == nil && n == "1" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis back, but %s is not in it: the last reply %v, %v\n%s", key, d, err, s.logs)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !strings.Contains(s.logs.String(), "the upstream Redis cannot be used") {
				t.Errorf("the log does not say the upstream failed:\n%s", s.logs)
			}
		})
	}
}

// The policies file reloads on change and on SIGHUP without dropping a
// connection; a broken file keeps the policies in use.
func TestPoliciesReload(t *testing.T) {
	path := writePolicies(t)
	s := startSluice(t, "--policies", path, "--policies-poll", "50ms")
	ctx := ctxT(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	defer rdb.Close()
	if err := rdb.Do(ctx, "RL.ALLOW", "fresh", "k").Err(); err == nil {
		t.Fatal("RL.ALLOW fresh before the policy exists: no error")
	}
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s\n%s", what, s.logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	write("policies:\n  fresh:\n    algorithm: fixed\n    limit: 7\n    period: 1h\n")
	waitFor("the new policy", func() bool {
		v, err := rdb.Do(ctx, "RL.ALLOW", "fresh", "k", 0).Result()
		return err == nil && decision(t, 2, v)[1] == 7
	})
	write("policies:\n  fresh:\n    algorithm: fixed\n    limit: oops\n")
	waitFor("the error logged", func() bool { return strings.Contains(s.logs.String(), "policies not reloaded") })
	if v, err := rdb.Do(ctx, "RL.ALLOW", "fresh", "k", 0).Result(); err != nil || decision(t, 2, v)[1] != 7 {
		t.Errorf("after a broken file: %v, %v", v, err)
	}
	// Not only a log line: INFO and the metrics say the file on disk is
	// not what runs, until a good one loads.
	info := func() string { return rdb.Info(ctx, "policies").Val() }
	for _, want := range []string{"policies_reload_failing:1", "policies_reload_failures:1", "policies_last_error:"} {
		if !strings.Contains(info(), want) {
			t.Errorf("INFO policies after a broken file has no %q:\n%s", want, info())
		}
	}
	config := func(name string) float64 {
		t.Helper()
		v, ok := metricstest.Sample(metricstest.Scrape(t, "http://"+s.Admin+"/metrics"), name, map[string]string{"config": "policies"})
		if !ok {
			t.Fatalf("/metrics has no %s{config=policies}", name)
		}
		return v
	}
	if f, n, at := config("sluice_config_reload_failing"), config("sluice_config_reload_failures_total"),
		config("sluice_config_last_reload_success_timestamp_seconds"); f != 1 || n != 1 || at < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("/metrics after a broken file: failing %v, failures %v, last success %v; want 1, 1 and a recent time", f, n, at)
	}
	// SIGHUP reloads at once, even where polling would not notice.
	write("policies:\n  fresh:\n    algorithm: fixed\n    limit: 9\n    period: 1h\n")
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	waitFor("the SIGHUP reload", func() bool {
		v, err := rdb.Do(ctx, "RL.ALLOW", "fresh", "k", 0).Result()
		return err == nil && decision(t, 2, v)[1] == 9
	})
	waitFor("INFO clear again", func() bool { return strings.Contains(info(), "policies_reload_failing:0") })
	if f := config("sluice_config_reload_failing"); f != 0 {
		t.Error("/metrics still says the policies file is failing after a good reload")
	}
}
