package tests

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// span is a request as its client saw it: sent, and its reply got.
type span struct{ sent, got time.Time }

// TestMultiLimitExactAcrossSidecars: three sidecars on one Redis, a policy
// of a token bucket (5 at once, 5 a second) and a fixed window (20 a
// minute), 30 concurrent clients for a few seconds on one key. No aligned
// minute admits more than 20; over any interval the admissions stay within
// the bucket's 5 plus 5 a second; and nothing refused was charged: the
// window's own count at the end is exactly what was admitted in it.
func TestMultiLimitExactAcrossSidecars(t *testing.T) {
	r := redistest.Start(t)
	pol := policiesFile(t, `policies:
  api:
    limits:
      - {name: burst, algorithm: token_bucket, rate: 5, period: 1s, capacity: 5}
      - {name: minute, algorithm: fixed_window, limit: 20, period: 1m}
`)
	const run = 6 * time.Second
	var mu sync.Mutex
	var admitted []span        // each admitted request, from its send to its reply
	windows := map[int64]int{} // minute window end (Unix minutes) → admissions
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	var clients []*redis.Client
	for range 3 {
		s := startSluice(t, "--upstream", "redis://"+r.Addr, "--policies", pol, "--upstream-timeout", decidingTimeout, "--on-upstream-failure", "deny")
		c := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 3, PoolSize: 10,
			OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Do(ctx, "RL.REPLY", "MAP").Err() }})
		defer c.Close()
		clients = append(clients, c)
		for range 10 {
			wg.Go(func() {
				for ctx.Err() == nil {
					sent := time.Now()
					v, err := c.Do(ctx, "RL.ALLOW", "api", "shared", "DETAIL").Result()
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("RL.ALLOW: %v", err)
						}
						return
					}
					m := v.(map[any]any)
					if m["allowed"].(int64) == 1 {
						// The window it counted in ends reset_after_ms after
						// now, on a minute boundary.
						minute := m["detail"].(map[any]any)["minute"].(map[any]any)
						end := sent.Add(time.Duration(minute["reset_after_ms"].(int64)) * time.Millisecond)
						mu.Lock()
						admitted = append(admitted, span{sent, time.Now()})
						windows[int64(math.Round(float64(end.Unix())/60))]++
						mu.Unlock()
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	if len(admitted) == 0 {
		t.Fatal("nothing admitted")
	}
	// Every decision came from Redis: one by the failure mode (a round
	// trip past --upstream-timeout) would be this sidecar's alone.
	for i, c := range clients {
		if n := fallbacks(t, c); n != 0 {
			t.Errorf("sidecar %d decided %d requests by its failure mode", i, n)
		}
	}
	for w, n := range windows {
		if n > 20 {
			t.Errorf("the minute ending at %s admitted %d; want at most 20", time.Unix(w*60, 0).UTC(), n)
		}
	}
	// Each decision was made between its request's send and its reply,
	// so the decisions of requests i..j (in the order sent) lie within
	// the latest of their replies less the first send: at most 5 plus 5 a
	// second of that may be admitted. However late a loaded machine
	// delivers a reply, the bound only widens, so it never fails a
	// correct bucket; an unbounded one admits far more than it allows.
	slices.SortFunc(admitted, func(a, b span) int { return a.sent.Compare(b.sent) })
	for i := range admitted {
		last := admitted[i].got
		for j := i; j < len(admitted); j++ {
			if admitted[j].got.After(last) {
				last = admitted[j].got
			}
			within := last.Sub(admitted[i].sent)
			if n := j - i + 1; float64(n) > 5+5*within.Seconds() {
				t.Fatalf("%d admitted within %v; the bucket allows %.1f", n, within, 5+5*within.Seconds())
			}
		}
	}
	// Nothing refused was charged: the window's remaining is 20 less what
	// it admitted.
	v, err := clients[0].Do(context.Background(), "RL.ALLOW", "api", "shared", "0", "PEEK", "DETAIL").Result()
	if err != nil {
		t.Fatal(err)
	}
	minute := v.(map[any]any)["detail"].(map[any]any)["minute"].(map[any]any)
	end := time.Now().Add(time.Duration(minute["reset_after_ms"].(int64)) * time.Millisecond)
	if got, want := minute["remaining"].(int64), int64(20-windows[int64(math.Round(float64(end.Unix())/60))]); got != want {
		t.Errorf("the minute window has %d left; want %d: 20 less the %d admitted in it", got, want, 20-want)
	}
	t.Logf("%d admitted in %v over %d windows", len(admitted), run, len(windows))
}
