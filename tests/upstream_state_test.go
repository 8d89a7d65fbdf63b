package tests

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// A wrong upstream is named, not guessed at: the first warning names the
// cause and what to check, INFO and the metrics say the upstream is
// unreachable and why, and with --upstream-required the sidecar exits 1
// with that cause instead of serving limits that are no longer shared.
func TestUpstreamWrongNamed(t *testing.T) {
	secured := redistest.Start(t, "user sluice on >right ~* &* +@all")
	plain := redistest.Start(t)
	for _, tc := range []struct {
		name, url, cause, hint string
	}{
		{"a wrong password", "redis://sluice:wrong@" + secured.Addr, "auth", "Redis refused the credentials"},
		{"a wrong host", fmt.Sprintf("redis://127.0.0.1:%d", redistest.FreePort(t)), "refused", "nothing accepts connections"},
		{"an unknown host", "redis://sluice-no-such-host.invalid:6379", "unknown_host", "does not resolve"},
		{"a Cluster URL at a plain Redis", "redis+cluster://" + plain.Addr, "not_cluster", "is not a Redis Cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSluice(t, "--upstream", tc.url)
			first := ""
			for line := range strings.Lines(s.logs.String()) {
				if strings.Contains(line, "level=WARN") {
					first = line
					break
				}
			}
			if !strings.Contains(first, "cause="+tc.cause) || !strings.Contains(first, tc.hint) || strings.Contains(s.logs.String(), "FUNCTION LOAD") {
				t.Errorf("first warning %q; want cause=%s and %q, and no move to EVALSHA; log:\n%s", first, tc.cause, tc.hint, s.logs)
			}
			fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
			if v, ok := metricstest.Sample(fams, "sluice_upstream_reachable", nil); !ok || v != 0 {
				t.Errorf("sluice_upstream_reachable = %v (%v); want 0", v, ok)
			}
			if v, ok := metricstest.Sample(fams, "sluice_upstream_failures_total", map[string]string{"cause": tc.cause}); !ok || v < 1 {
				t.Errorf("sluice_upstream_failures_total{cause=%s} = %v (%v); want at least 1", tc.cause, v, ok)
			}
			if v, ok := metricstest.Sample(fams, "sluice_upstream_state_change_timestamp_seconds", nil); !ok || v < float64(time.Now().Add(-time.Minute).Unix()) {
				t.Errorf("sluice_upstream_state_change_timestamp_seconds = %v (%v); want a recent time", v, ok)
			}
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
			defer rdb.Close()
			info := rdb.Info(context.Background(), "upstream").Val()
			for _, want := range []string{"upstream_state:down", "upstream_last_error_cause:" + tc.cause} {
				if !strings.Contains(info, want) {
					t.Errorf("INFO upstream has no %q:\n%s", want, info)
				}
			}

			code, _, stderr := runCLI(t, nil, "--listen", "127.0.0.1:0", "--admin-listen", "off", "--upstream", tc.url,
				"--upstream-required", "--upstream-required-timeout", "1s")
			if code != 1 || !strings.Contains(stderr, "did not answer within 1s (--upstream-required)") || !strings.Contains(stderr, tc.hint) ||
				strings.Contains(stderr, "listening") {
				t.Errorf("--upstream-required: exit %d; want 1, naming the cause, before listening:\n%s", code, stderr)
			}
		})
	}
}

// With --upstream-required, start-up waits until Redis answers (nothing
// listens meanwhile), and readiness follows the upstream from then on,
// whatever the failure mode.
func TestUpstreamRequired(t *testing.T) {
	port := redistest.FreePort(t)
	admin := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	logs := &syncBuffer{}
	cmd := exec.Command(sluiceBin, "--listen", "127.0.0.1:0", "--admin-listen", admin, "--upstream", fmt.Sprintf("redis://127.0.0.1:%d", port),
		"--upstream-required", "--upstream-required-timeout", "60s")
	cmd.Env, cmd.Stdout, cmd.Stderr = cleanEnv(), logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("sluice did not stop on SIGTERM:\n%s", logs)
		}
	})
	ready := func() int {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Nothing listens while Redis is away.
	waitUntil(t, 10*time.Second, "the wait for Redis to be logged", func() bool { return strings.Contains(logs.String(), "cause=refused") })
	if got := ready(); got != 0 {
		t.Fatalf("the admin port answers %d before Redis does; want nothing listening", got)
	}
	r := redistest.StartAt(t, port)
	waitUntil(t, 20*time.Second, "/readyz to pass once Redis answers", func() bool { return ready() == http.StatusOK })
	r.Kill()
	waitUntil(t, 10*time.Second, "/readyz to fail with Redis gone", func() bool { return ready() == http.StatusServiceUnavailable })
	r.Restart()
	waitUntil(t, 10*time.Second, "/readyz to pass with Redis back", func() bool { return ready() == http.StatusOK })
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Redis that may evict Sluice's keys (maxmemory with allkeys-lru),
// filled until it evicts: a warning at start naming the fix, INFO's
// fields and the metrics, and the evictions counted as they grow.
func TestUpstreamEvictionSeen(t *testing.T) {
	r := redistest.Start(t, "maxmemory 2mb", "maxmemory-policy allkeys-lru")
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--upstream-eviction-check", "100ms", "--upstream-timeout", decidingTimeout)
	warnings := 0
	for line := range strings.Lines(s.logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "may evict Sluice's keys") {
			warnings++
			if !strings.Contains(line, "noeviction") || !strings.Contains(line, r.Addr+"=allkeys-lru") {
				t.Errorf("warning %q; want the master, its policy and the fix named", line)
			}
		}
	}
	if warnings != 1 {
		t.Errorf("%d warnings of the policy at start; want 1:\n%s", warnings, s.logs)
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	defer rdb.Close()
	info := rdb.Info(ctx, "upstream").Val()
	for _, want := range []string{"upstream_maxmemory_policy:allkeys-lru", "upstream_eviction_possible:1", "upstream_state:up"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO upstream has no %q:\n%s", want, info)
		}
	}
	metric := func(name string, labels map[string]string) float64 {
		v, _ := metricstest.Sample(metricstest.Scrape(t, "http://"+s.Admin+"/metrics"), name, labels)
		return v
	}
	if metric("sluice_upstream_eviction_possible", nil) != 1 || metric("sluice_upstream_maxmemory_policy", map[string]string{"policy": "allkeys-lru"}) != 1 {
		t.Errorf("/metrics: eviction_possible %v, maxmemory_policy{allkeys-lru} %v; want 1 and 1",
			metric("sluice_upstream_eviction_possible", nil), metric("sluice_upstream_maxmemory_policy", map[string]string{"policy": "allkeys-lru"}))
	}
	// Limits through Sluice, then a cache's writes beside them until Redis
	// evicts.
	for i := range 200 {
		if err := rdb.Do(ctx, "RL.TOKEN", fmt.Sprint("evict:", i), 5, 1, "1h").Err(); err != nil {
			t.Fatal(err)
		}
	}
	direct := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer direct.Close()
	value := strings.Repeat("x", 10_000)
	for i := 0; ; i++ {
		if err := direct.Set(ctx, fmt.Sprint("cache:", i), value, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 && !strings.Contains(direct.Info(ctx, "stats").Val(), "evicted_keys:0\r") {
			break
		}
		if i > 10_000 {
			t.Fatal("10,000 writes of 10kB under maxmemory 2mb and no eviction")
		}
	}
	waitUntil(t, 10*time.Second, "the evictions in /metrics", func() bool { return metric("sluice_upstream_evicted_keys_total", nil) > 0 })
	if info := rdb.Info(ctx, "upstream").Val(); strings.Contains(info, "upstream_evicted_keys:0\r") {
		t.Errorf("INFO upstream after evictions:\n%s", info)
	}
	waitUntil(t, 5*time.Second, "the evictions' warning", func() bool { return strings.Contains(s.logs.String(), "the upstream Redis evicted keys") })
}

// A wrong Sentinel address made go-redis log 142 lines in 10 seconds:
// now the cause is one warning, and its repeats are counted, not logged.
func TestUpstreamWrongSentinelQuiet(t *testing.T) {
	s := startSluice(t, "--upstream", fmt.Sprintf("redis+sentinel://127.0.0.1:%d/mymaster", redistest.FreePort(t)))
	time.Sleep(3 * time.Second) // the time over which the lines are counted, not a wait for a state
	warnings := strings.Count(s.logs.String(), "level=WARN")
	if warnings != 1 || !strings.Contains(s.logs.String(), "cause=refused") {
		t.Errorf("%d warnings in 3s; want the one naming cause=refused:\n%s", warnings, s.logs)
	}
}
