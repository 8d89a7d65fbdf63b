package upstream_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/upstream"
)

// The lease script against the model, on a real redis-server with the
// clock pinned, standalone and on Cluster; every key keeps a TTL.
func TestLeaseProperty(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		for seed := range uint64(6) {
			prefix := "lp" + strconv.FormatUint(seed, 10) + ":"
			enginetest.LeaseProperty(t, seed, 600, "", func(clock *enginetest.Clock) engine.Leaser {
				return newStore(t, upstream.Config{Client: top.client, Prefix: prefix, Now: clock.Now})
			})
			if keys := keysWithoutTTL(t, top.client, prefix+"*"); len(keys) > 0 {
				t.Errorf("keys without a TTL: %v", keys)
			}
		}
	})
}

// On Redis's own clock: the key's TTL follows its last lease, the script
// records the most leases held at once, a released last lease leaves the
// key until that lease would have ended, and a key of another type is the
// request's own error.
func TestLeaseOnRedisClock(t *testing.T) {
	srv, rc := standalone(t)
	s := newStore(t, upstream.Config{Client: rc})
	ctx := context.Background()
	acquire := func(id string, ttl time.Duration) engine.LeaseDecision {
		t.Helper()
		d, err := s.Acquire(ctx, engine.LeaseRequest{Key: "k", Limit: 2, TTL: ttl, ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	key := s.LeaseKey("k")
	acquire("a", 10*time.Second)
	acquire("b", 60*time.Second)
	if d := acquire("c", time.Second); d.Allowed || d.RetryAfter <= 9*time.Second || d.RetryAfter > 10*time.Second {
		t.Errorf("third lease: %+v, want refused until a ends in about 10s", d)
	}
	pttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", key))
	if pttl <= 59_000 || pttl > 60_000 {
		t.Errorf("PTTL %d, want b's 60s", pttl)
	}
	if m := mustDo(t, srv, "ZSCORE", key, ""); m != "-2" {
		t.Errorf("high-water mark %s, want -2", m)
	}
	if held, _ := s.Release(ctx, "k", "b"); !held {
		t.Error("b not held")
	}
	pttl, _ = strconv.Atoi(mustDo(t, srv, "PTTL", key))
	if pttl <= 9_000 || pttl > 10_000 {
		t.Errorf("PTTL %d after b's release, want a's 10s", pttl)
	}
	if held, _ := s.Release(ctx, "k", "a"); !held {
		t.Error("a not held")
	}
	if m := mustDo(t, srv, "ZSCORE", key, ""); m != "-2" {
		t.Errorf("high-water mark %s after the releases, want -2", m)
	}
	if n := mustDo(t, srv, "ZCARD", key); n != "1" {
		t.Errorf("ZCARD %s, want only the mark", n)
	}

	mustDo(t, srv, "SET", s.LeaseKey("str"), "x")
	_, err := s.Acquire(ctx, engine.LeaseRequest{Key: "str", Limit: 1, TTL: time.Second, ID: "a"})
	if !errors.Is(err, engine.ErrLeaseState) {
		t.Errorf("acquire on a string: %v, want ErrLeaseState", err)
	}
	// Reset drops the leases too.
	acquire("a", time.Minute)
	if err := s.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := mustDo(t, srv, "EXISTS", key); n != "0" {
		t.Errorf("lease key survived a reset")
	}
	// A Redis that lost the script gets it back.
	mustDo(t, srv, "SCRIPT", "FLUSH")
	if d := acquire("a", time.Minute); !d.Allowed {
		t.Errorf("after SCRIPT FLUSH: %+v", d)
	}
}
