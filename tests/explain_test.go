package tests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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
	pol := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pol, []byte(`policies:
  api:
    limits:
      - {name: burst, algorithm: token_bucket, rate: 5, period: 1s, capacity: 5}
      - {name: minute, algorithm: fixed_window, limit: 2, period: 1m}
`), 0o644); err != nil {
		t.Fatal(err)
	}
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
