package tests

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// Known traffic through the binary in front of a real Redis shows up in
// /metrics as exact counts, and no label ever carries a client's key.
func TestMetricsCountKnownTraffic(t *testing.T) {
	r := redistest.Start(t)
	pol := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pol, []byte(`policies:
  strict:
    algorithm: gcra
    rate: 1
    period: 1h
    burst: 2
  trial:
    algorithm: fixed_window
    limit: 1
    period: 1h
    shadow: true
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--policies", pol, "--upstream-timeout", decidingTimeout)
	ctx := ctxT(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	defer rdb.Close()
	allowed := func(args ...any) bool {
		t.Helper()
		v, err := rdb.Do(ctx, args...).Result()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return decision(t, 2, v)[0] == 1
	}
	// strict: 3 admitted (burst 2 + 1), then refused: once by Redis, then
	// three times by the deny cache.
	for i := range 7 {
		if got := allowed("RL.ALLOW", "strict", "user-secret-42"); got != (i < 3) {
			t.Fatalf("strict request %d: allowed %v", i, got)
		}
	}
	if !allowed("RL.GCRA", "inline-key-77", 0, 1, "1h") || allowed("RL.GCRA", "inline-key-77", 0, 1, "1h") {
		t.Fatal("inline GCRA: want allowed then refused")
	}
	// trial is in shadow mode: its refusal is answered as an admission.
	if !allowed("RL.ALLOW", "trial", "user-secret-42") || !allowed("RL.ALLOW", "trial", "user-secret-42") {
		t.Fatal("shadow policy refused")
	}
	if err := rdb.Do(ctx, "RL.GCRA", "k", 0, 0, "1h").Err(); err == nil {
		t.Fatal("rate 0 accepted")
	}

	fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
	d := func(policy, alg, outcome, path string) map[string]string {
		return map[string]string{"policy": policy, "algorithm": alg, "outcome": outcome, "path": path}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_decisions_total", d("strict", "gcra", "allowed", "store"), 3},
		{"sluice_decisions_total", d("strict", "gcra", "refused", "store"), 1},
		{"sluice_decisions_total", d("strict", "gcra", "refused", "deny_cache"), 3},
		{"sluice_decisions_total", d("inline", "gcra", "allowed", "store"), 1},
		{"sluice_decisions_total", d("inline", "gcra", "refused", "store"), 1},
		{"sluice_decisions_total", d("trial", "fixed_window", "allowed", "store"), 1},
		{"sluice_decisions_total", d("trial", "fixed_window", "shadow", "store"), 1},
		{"sluice_errors_total", map[string]string{"kind": "request"}, 1},
		{"sluice_deny_cache_hits_total", nil, 3},
		{"sluice_clients", nil, 1},
		{"sluice_breaker_open", nil, 0},
	} {
		if got, ok := metricstest.Sample(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found: %t); want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "secret") || strings.Contains(l.GetValue(), "key") {
					t.Errorf("%s has label %s=%q: a client's key", name, l.GetName(), l.GetValue())
				}
			}
		}
	}

	info, err := rdb.Info(ctx, "sluice").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Upstream", "upstream:standalone", "breaker_open:0", "# Batcher", "# Denycache",
		"deny_cache_hits:3", "# Policies", "policies:2", "# Memory", "memory_store_max_keys:", "upstream_scripts:", "upstream_addrs:127.0.0.1:",
		"# Leases", "leases_held:0", "memory_store_leases:0", "# Admin", "admin_serving:"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO sluice lacks %q:\n%s", want, info)
		}
	}
	if strings.Contains(info, "# Server") {
		t.Errorf("INFO sluice shows the server section too:\n%s", info)
	}
}

// /readyz turns unready while Redis is down and the failure mode is deny,
// and ready again once Redis answers, with or without traffic to probe it.
func TestReadiness(t *testing.T) {
	r := redistest.Start(t)
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--on-upstream-failure", "deny")
	ctx := ctxT(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	defer rdb.Close()
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get("http://" + s.Admin + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status("/healthz") != 200 || status("/readyz") != 200 {
		t.Fatal("not healthy and ready with Redis up")
	}
	r.Kill()
	for range 5 { // failed round trips open the breaker
		_ = rdb.Do(ctx, "RL.GCRA", "ready:k", 5, 1, "1s").Err()
	}
	if got := status("/readyz"); got != 503 {
		t.Fatalf("/readyz = %d with Redis down and deny; want 503", got)
	}
	if status("/healthz") != 200 {
		t.Fatal("/healthz failed while the process serves")
	}
	r.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for status("/readyz") != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still unready 10s after Redis came back\n%s", s.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A reset made through one sidecar reaches the other through Redis
// pub/sub: the refusal the other remembered locally is dropped at once,
// long before its retry-after would run out.
func TestResetReachesEverySidecar(t *testing.T) {
	r := redistest.Start(t)
	a := startSluice(t, "--upstream", "redis://"+r.Addr, "--upstream-timeout", decidingTimeout)
	b := startSluice(t, "--upstream", "redis://"+r.Addr, "--upstream-timeout", decidingTimeout)
	ctx := ctxT(t)
	ca := redis.NewClient(&redis.Options{Addr: a.Addr, Protocol: 2})
	cb := redis.NewClient(&redis.Options{Addr: b.Addr, Protocol: 2})
	defer ca.Close()
	defer cb.Close()
	allowed := func(c *redis.Client) bool {
		t.Helper()
		v, err := c.Do(ctx, "RL.GCRA", "reset:k", 0, 1, "1h").Result()
		if err != nil {
			t.Fatal(err)
		}
		return decision(t, 2, v)[0] == 1
	}
	if !allowed(ca) || allowed(ca) {
		t.Fatal("want allowed, then refused (and remembered by a's deny cache)")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// b resets; a must admit again. Repeat the reset until a's
		// subscription is surely up (it starts with the process).
		if err := cb.Do(ctx, "RL.RESET", "reset:k").Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if allowed(ca) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a still refuses 10s after b's resets\n%s", a.logs)
		}
	}
}

// TestMemoryEvictionsAreTold: the reproduction. On the in-memory
// store a key refused (victim, 5 an hour) is admitted again once other
// keys have filled the store past --max-keys, which forgets its count: a
// client can reset another's key so. The evictions are counted in INFO
// and /metrics, and warned about while they happen.
func TestMemoryEvictionsAreTold(t *testing.T) {
	const maxKeys = 640
	s := startSluice(t, "--max-keys", strconv.Itoa(maxKeys))
	ctx := ctxT(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	defer rdb.Close()
	for i := range 6 {
		v, err := rdb.Do(ctx, "RL.FIXED", "victim", 5, "1h").Result()
		if err != nil || decision(t, 2, v)[0] != map[bool]int64{true: 1, false: 0}[i < 5] {
			t.Fatalf("victim request %d: %v, %v", i, v, err)
		}
	}
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 20 * maxKeys {
			p.Do(ctx, "RL.FIXED", "filler:"+strconv.Itoa(i), 5, "1h")
		}
		return nil
	})
	if err != nil || len(cmds) != 20*maxKeys {
		t.Fatalf("filling: %v", err)
	}
	if v, err := rdb.Do(ctx, "RL.FIXED", "victim", 5, "1h").Result(); err != nil || decision(t, 2, v)[0] != 1 {
		t.Fatalf("victim after the store was filled: %v, %v; its count was expected forgotten", v, err)
	}
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`memory_store_evictions:(\d+)`).FindStringSubmatch(info)
	if m == nil || m[1] == "0" {
		t.Fatalf("INFO memory: no eviction counted:\n%s", info)
	}
	fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
	if got, ok := metricstest.Sample(fams, "sluice_memory_store_evictions_total", nil); !ok || got < float64(19*maxKeys) {
		t.Errorf("sluice_memory_store_evictions_total = %v (found: %t); want at least %d", got, ok, 19*maxKeys)
	}
	const warning = "the in-memory store is evicting keys whose counts still matter"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.logs.String(), warning); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about evictions within 10s; the log:\n%s", s.logs)
		}
	}
	if n := strings.Count(s.logs.String(), warning); n != 1 {
		t.Errorf("%d warnings about evictions; want one (at most one every 10 s)", n)
	}
}
