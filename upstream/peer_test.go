package upstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/upstream"
)

// TestPeerWindowKey: a peer window counts in the key it is given, exactly
// (no prefix, no hash tag, the key's own braces left to Redis), as a plain
// integer that INCRBY can go on from, with the peer's TTL on Redis's
// clock: the period plus a jitter below the limit's. Standalone and on
// Cluster, where the key's own hash tag (or none) picks its master.
func TestPeerWindowKey(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		ctx := context.Background()
		s := newStore(t, upstream.Config{Client: top.client, Prefix: "sluice:"})
		jitter := 5 * time.Second
		l := engine.Limit{Algorithm: engine.PeerWindow, Rate: 5, Period: time.Minute, Jitter: jitter}
		for _, key := range []string{"rl_domain_user_42_1764633600", "dom_k_{tag}_x_60"} {
			if got := s.Key(key, engine.PeerWindow); got != key {
				t.Fatalf("Key(%q) = %q; want the key itself", key, got)
			}
			// The peer counted 2 before Sluice's hit.
			if err := top.client.IncrBy(ctx, key, 2).Err(); err != nil {
				t.Fatal(err)
			}
			res := decide(t, s, engine.Request{Key: key, Limit: l, Cost: 1, Charge: true},
				engine.Request{Key: key, Limit: l, Cost: 4, Charge: true})
			if res[0].Err != nil || res[1].Err != nil {
				t.Fatal(res[0].Err, res[1].Err)
			}
			if d := res[0].Decision; !d.Allowed || d.Remaining != 2 {
				t.Errorf("%s: third hit: %+v; want allowed, 2 left", key, d)
			}
			if d := res[1].Decision; d.Allowed || d.Remaining != -2 {
				t.Errorf("%s: a charge of 4 over 3: %+v; want refused, 2 over", key, d)
			}
			if n, err := top.client.IncrBy(ctx, key, 1).Result(); err != nil || n != 8 {
				t.Errorf("%s: the peer's next INCRBY: %d, %v; want 8", key, n, err)
			}
			ttl, err := top.client.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl <= l.Period-time.Second || ttl > l.Period+jitter {
				t.Errorf("%s: PTTL %v; want the period %v plus a jitter below %v", key, ttl, l.Period, jitter)
			}
		}
	})
}
