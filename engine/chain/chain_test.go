package chain_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

func openMemory(t testing.TB, now func() time.Time) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openChain is the chain as the sidecar builds it (chain.New), on store in
// Redis's place, with a memory store deciding FailLocal.
func openChain(t *testing.T, cfg chain.Config) *chain.Chain {
	t.Helper()
	c, err := chain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// The conformance tables give the same decisions through the whole chain
// as through the store behind it.
func TestChainConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, now func() time.Time) engine.Store {
		return openChain(t, chain.Config{Store: openMemory(t, now), Local: openMemory(t, now), Now: now, Timeout: time.Minute})
	})
}

// The chain's order: a refusal is remembered in front of the batcher (the
// second request never reaches a round trip), and the guard is in front
// of both (with the store down, a FailClosed request is answered without
// a round trip once the breaker opens).
func TestChainOrder(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g := &gateStore{inner: openMemory(t, clock.Now)}
	c := openChain(t, chain.Config{Store: g, Local: openMemory(t, clock.Now), Now: clock.Now, Threshold: 1})
	one := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}
	r := engine.Request{Key: "k", Limit: one, Cost: 1}
	for i, want := range []engine.Path{engine.PathStore, engine.PathStore, engine.PathDenyCache} {
		res := make([]engine.Result, 1)
		if err := engine.Wait(c, []engine.Request{r}, res, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if res[0].Path != want {
			t.Errorf("request %d: path %v; want %v", i, res[0].Path, want)
		}
	}
	if got := g.batchSizes(); len(got) != 2 {
		t.Errorf("round trips %v; want 2: the deny cache answers the third before the batcher", got)
	}
	if s := c.Stats(); s.Batcher.Batches != 2 || s.DenyCache.Hits != 1 {
		t.Errorf("stats %+v; want 2 batches and 1 deny cache hit", s)
	}
}

// With the store down, a submitted batch is answered by each request's
// failure mode, and the breaker opens after Threshold failed round trips.
func TestChainFailureModes(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	f := &flakyStore{inner: openMemory(t, clock.Now)}
	f.set(true)
	c := openChain(t, chain.Config{Store: f, Local: openMemory(t, clock.Now), Threshold: 2, Now: clock.Now})
	limit := engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Hour}
	reqs := []engine.Request{
		{Key: "a", Limit: limit, Cost: 1, OnFailure: engine.FailOpen},
		{Key: "b", Limit: limit, Cost: 1, OnFailure: engine.FailClosed},
		{Key: "c", Limit: limit, Cost: 2},
	}
	want := []engine.Path{engine.PathFailOpen, engine.PathFailClosed, engine.PathLocal}
	for round := range 3 {
		res := make([]engine.Result, len(reqs))
		if err := engine.Wait(c, reqs, res, time.Time{}); err != nil {
			t.Fatalf("round %d: %v; a guard answers even when the store is down", round, err)
		}
		for i, p := range want {
			if res[i].Path != p {
				t.Errorf("round %d, request %d: %+v; want path %v", round, i, res[i], p)
			}
		}
	}
	if calls := f.count(); calls != 2 {
		t.Errorf("the failing store was asked %d times; want 2, then the breaker opens", calls)
	}
	if !c.Stats().Guard.BreakerOpen {
		t.Error("breaker closed after two failed round trips")
	}
}

// checker is a health check whose answer the test sets, counting calls.
type checker struct {
	mu    sync.Mutex
	err   error // guarded by mu
	calls int   // guarded by mu
}

func (k *checker) check(context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	return k.err
}

func (k *checker) set(err error) { k.mu.Lock(); k.err = err; k.mu.Unlock() }

func (k *checker) count() int { k.mu.Lock(); defer k.mu.Unlock(); return k.calls }

// With no traffic the chain checks the store every CheckEvery, and the
// breaker follows the checks: open on a failure, closed once it passes.
// While round trips answer, no check is made.
func TestChainChecksWhileIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &checker{}
		k.set(errDown)
		c, err := chain.New(chain.Config{Store: openMemory(t, nil), Check: k.check, CheckEvery: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if !c.Stats().Guard.BreakerOpen || k.count() != 1 {
			t.Fatalf("after one idle second: breaker open %v after %d checks; want open after 1", c.Stats().Guard.BreakerOpen, k.count())
		}
		k.set(nil)
		time.Sleep(time.Second)
		synctest.Wait()
		if c.Stats().Guard.BreakerOpen {
			t.Fatal("the breaker stayed open after a check passed")
		}
		// Traffic every half second: its round trips tell the breaker,
		// and the idle check stays away.
		before := k.count()
		r := []engine.Request{{Key: "k", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 100, Period: time.Second}, Cost: 1}}
		for range 6 {
			time.Sleep(time.Second / 2)
			if err := engine.Wait(c, r, make([]engine.Result, 1), time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		if n := k.count() - before; n != 0 {
			t.Errorf("%d checks made while round trips answered; want none", n)
		}
	})
}

// INFO's fields for the chain, in INFO's order, from its counts.
func TestChainInfo(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	c := openChain(t, chain.Config{Store: openMemory(t, clock.Now), Local: openMemory(t, clock.Now), Now: clock.Now,
		Default: engine.FailClosed, MaxBatch: 16, MaxInFlight: 2, Timeout: 250 * time.Millisecond, Sidecars: fixed(3)})
	one := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}
	reqs := []engine.Request{{Key: "k", Limit: one, Cost: 1}, {Key: "k", Limit: one, Cost: 1}}
	for range 2 {
		if err := engine.Wait(c, reqs, make([]engine.Result, 2), time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		got  [][2]string
		want [][2]string
	}{
		{"Upstream", c.InfoUpstream(), [][2]string{{"upstream_timeout_ms", "250"}, {"breaker_open", "0"},
			{"fallback_decisions", "0"}, {"fallback_decisions_unreplicated", "0"}, {"on_upstream_failure", "deny"},
			{"local_share", "fleet"}, {"local_share_sidecars", "3"}}},
		// The second call's first request is a deny cache hit; the
		// second is not, since the cache checks before the round trip.
		{"Batcher", c.InfoBatcher(), [][2]string{{"batches", "1"}, {"batched_decisions", "2"}, {"avg_batch_size", "2.00"},
			{"batch_max", "16"}, {"batch_inflight", "2"}}},
		{"Denycache", c.InfoDenyCache(), [][2]string{{"deny_cache_hits", "2"}, {"deny_cache_misses", "2"},
			{"deny_cache_evictions", "0"}, {"deny_cache_entries", "1"}, {"deny_cache_size", "50000"}}},
	} {
		if len(tc.got) != len(tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, tc.got, tc.want)
			continue
		}
		for i := range tc.want {
			if tc.got[i] != tc.want[i] {
				t.Errorf("%s field %d: %v; want %v", tc.name, i, tc.got[i], tc.want[i])
			}
		}
	}
}

// Check, as the sidecar runs it at start, opens the breaker at once on a
// failure, and closes it when the store passes.
func TestChainCheck(t *testing.T) {
	k := &checker{}
	k.set(errDown)
	c := openChain(t, chain.Config{Store: openMemory(t, nil), Check: k.check})
	if err := c.Check(t.Context()); !errors.Is(err, errDown) || !c.Stats().Guard.BreakerOpen {
		t.Fatalf("a failed check: %v, breaker open %v; want %v and open", err, c.Stats().Guard.BreakerOpen, errDown)
	}
	k.set(nil)
	if err := c.Check(t.Context()); err != nil || c.Stats().Guard.BreakerOpen {
		t.Fatalf("a passed check: %v, breaker open %v; want nil and closed", err, c.Stats().Guard.BreakerOpen)
	}
}
