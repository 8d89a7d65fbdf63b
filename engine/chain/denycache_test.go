package chain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

func newDenyCache(t *testing.T, store engine.Store, clock *enginetest.Clock) *chain.DenyCache {
	t.Helper()
	c, err := chain.NewDenyCache(chain.DenyCacheConfig{Store: store, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func decideOne(t *testing.T, s engine.Store, r engine.Request) engine.Decision {
	t.Helper()
	res := make([]engine.Result, 1)
	if err := engine.Wait(s, []engine.Request{r}, res, time.Time{}); err != nil || res[0].Err != nil {
		t.Fatalf("Submit(%+v) = %v, %v", r, err, res[0].Err)
	}
	return res[0].Decision
}

func TestDenyCacheAnswersRefusalsLocally(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g := &gateStore{inner: openMemory(t, clock.Now)}
	c := newDenyCache(t, g, clock)
	gcra := engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Second, Burst: 0}
	req := engine.Request{Key: "hot", Limit: gcra, Cost: 1}

	if d := decideOne(t, c, req); !d.Allowed {
		t.Fatalf("first request refused: %+v", d)
	}
	if d := decideOne(t, c, req); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("second request: %+v; want refused, retry 1s", d)
	}
	sent := len(g.batchSizes())
	clock.Advance(400 * time.Millisecond)
	d := decideOne(t, c, req)
	if d.Allowed || d.RetryAfter != 600*time.Millisecond || d.Remaining != 0 || d.Limit != 1 {
		t.Fatalf("cached refusal: %+v; want refused, retry counting down to 600ms", d)
	}
	heavier := req
	heavier.Cost = 1
	heavier.Peek = true
	if d := decideOne(t, c, heavier); d.Allowed {
		t.Fatalf("peek of the same cost: %+v; want the cached refusal", d)
	}
	if got := len(g.batchSizes()); got != sent {
		t.Fatalf("%d round trips for cached refusals; want none", got-sent)
	}
	if s := c.Stats(); s.Hits != 2 || s.Entries != 1 {
		t.Fatalf("stats %+v; want 2 hits, 1 entry", s)
	}

	// A different limit, or a cost of zero, is not covered by the refusal.
	other := req
	other.Limit.Burst = 5
	other.Peek = true
	if d := decideOne(t, c, other); !d.Allowed {
		t.Fatalf("larger burst: %+v; want it decided by the store, and allowed", d)
	}
	look := req
	look.Cost = 0
	decideOne(t, c, look)
	if got := len(g.batchSizes()); got != sent+2 {
		t.Fatalf("%d round trips; want 2 (other limit, cost 0)", got-sent)
	}

	// When the retry-after runs out, the store decides again.
	clock.Advance(600 * time.Millisecond)
	if d := decideOne(t, c, req); !d.Allowed {
		t.Fatalf("after retry-after: %+v; want allowed", d)
	}
}

func TestDenyCacheResetAndForget(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	mem := openMemory(t, clock.Now)
	c := newDenyCache(t, mem, clock)
	limit := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}
	req := engine.Request{Key: "k", Limit: limit, Cost: 1}
	decideOne(t, c, req)
	if d := decideOne(t, c, req); d.Allowed {
		t.Fatal("second request allowed")
	}
	if err := c.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if d := decideOne(t, c, req); !d.Allowed {
		t.Fatalf("after Reset: %+v; want allowed", d)
	}
	// Another sidecar resets the key in the shared store and announces it:
	// Forget must drop this sidecar's cached refusal.
	if d := decideOne(t, c, req); d.Allowed {
		t.Fatal("refusal expected")
	}
	if err := mem.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	c.Forget("k")
	if d := decideOne(t, c, req); !d.Allowed {
		t.Fatalf("after Forget: %+v; want allowed", d)
	}
}

// Several sidecars, each with its own deny cache, share one store (as they
// share Redis) and run random scenarios. Whenever a cache refuses locally,
// the store itself is asked (a peek, which changes nothing) and must refuse
// too: the cache never refuses what the store would admit.
func TestDenyCacheNeverRefusesWhatTheStoreAdmits(t *testing.T) {
	checked := 0
	for seed := range 300 {
		clock := enginetest.NewClock(enginetest.Epoch)
		shared := openMemory(t, clock.Now)
		counter := &gateStore{inner: shared}
		sidecars := []*chain.DenyCache{newDenyCache(t, counter, clock), newDenyCache(t, counter, clock), newDenyCache(t, counter, clock)}
		sc := enginetest.NewScenario([]byte(fmt.Sprintf("deny-%d", seed)))
		sc.Limit.Rate = max(sc.Limit.Rate, 1)
		ctx := context.Background()
		for i, op := range sc.Ops {
			if op.Advance > 0 {
				clock.Advance(op.Advance)
			}
			key := fmt.Sprintf("k%d", op.Key%2)
			side := sidecars[i%len(sidecars)]
			if op.Reset {
				// A reset reaches every sidecar (through pub/sub in production).
				_ = side.Reset(ctx, key)
				for _, s := range sidecars {
					s.Forget(key)
				}
				continue
			}
			req := engine.Request{Key: key, Limit: sc.Limit, Cost: max(op.Cost, 1), Peek: op.Peek}
			if req.Validate() != nil {
				continue
			}
			before := len(counter.batchSizes())
			res := make([]engine.Result, 1)
			if err := engine.Wait(side, []engine.Request{req}, res, time.Time{}); err != nil {
				t.Fatal(err)
			}
			local := len(counter.batchSizes()) == before
			if !local || res[0].Decision.Allowed {
				continue
			}
			peek := req
			peek.Peek = true
			truth := make([]engine.Result, 1)
			_ = engine.Wait(shared, []engine.Request{peek}, truth, time.Time{})
			if truth[0].Decision.Allowed {
				t.Fatalf("seed %d op %d: the cache refused %+v locally, but the store admits it: %+v", seed, i, req, truth[0].Decision)
			}
			checked++
		}
	}
	if checked < 100 {
		t.Fatalf("only %d local refusals were checked; the scenarios no longer exercise the cache", checked)
	}
	t.Logf("%d local refusals checked against the store", checked)
}

func BenchmarkDenyCacheHit(b *testing.B) {
	s, _ := memstore.New(memstore.Config{})
	c, _ := chain.NewDenyCache(chain.DenyCacheConfig{Store: s})
	req := []engine.Request{{Key: "hot", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}, Cost: 1}}
	res := make([]engine.Result, 1)
	_ = engine.Wait(c, req, res, time.Time{})
	_ = engine.Wait(c, req, res, time.Time{})
	b.ReportAllocs()
	for b.Loop() {
		_ = engine.Wait(c, req, res, time.Time{})
	}
	if res[0].Decision.Allowed {
		b.Fatal("expected a cached refusal")
	}
}

// A pipeline of 16 requests for one refused key: one batch.
func BenchmarkDenyCacheHotBatch(b *testing.B) {
	s, _ := memstore.New(memstore.Config{})
	c, _ := chain.NewDenyCache(chain.DenyCacheConfig{Store: s})
	reqs := make([]engine.Request, 16)
	for i := range reqs {
		reqs[i] = engine.Request{Key: "hot", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}, Cost: 1}
	}
	res := make([]engine.Result, len(reqs))
	_ = engine.Wait(c, reqs, res, time.Time{})
	b.ReportAllocs()
	for b.Loop() {
		_ = engine.Wait(c, reqs, res, time.Time{})
	}
	if res[0].Decision.Allowed || res[15].Path != engine.PathDenyCache {
		b.Fatal("expected cached refusals")
	}
}

func BenchmarkDenyCacheMiss(b *testing.B) {
	s, _ := memstore.New(memstore.Config{})
	c, _ := chain.NewDenyCache(chain.DenyCacheConfig{Store: s})
	req := []engine.Request{{Key: "cold", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1000, Period: time.Millisecond * 1000, Burst: 1000}, Cost: 0}}
	res := make([]engine.Result, 1)
	b.ReportAllocs()
	for b.Loop() {
		_ = engine.Wait(c, req, res, time.Time{})
	}
}

// A batch of cached refusals and other requests sends only the others,
// and every result lands in its request's place.
func TestDenyCacheMixedBatch(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g := &gateStore{inner: openMemory(t, clock.Now)}
	c := newDenyCache(t, g, clock)
	hot := engine.Request{Key: "hot", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}, Cost: 1}
	decideOne(t, c, hot)
	decideOne(t, c, hot) // refused: now remembered
	cold := engine.Request{Key: "cold", Limit: perHour, Cost: 1}
	// The hot key under a limit that was not refused, right after a
	// request the cache answered: the same key, but no refusal of its own.
	other := hot
	other.Limit.Burst = 10
	reqs := []engine.Request{hot, cold, hot, hot, other, cold}
	res := make([]engine.Result, len(reqs))
	for i := range res {
		res[i] = engine.Result{Path: engine.PathDenyCache} // stale results from an earlier use
	}
	if err := engine.Wait(c, reqs, res, time.Time{}); err != nil {
		t.Fatal(err)
	}
	sizes := g.batchSizes()
	if last := sizes[len(sizes)-1]; last != 3 {
		t.Fatalf("round trip of %d requests; want the 3 misses only", last)
	}
	for i, want := range []struct {
		path      engine.Path
		allowed   bool
		remaining int64
	}{{engine.PathDenyCache, false, 0}, {engine.PathStore, true, 999}, {engine.PathDenyCache, false, 0},
		{engine.PathDenyCache, false, 0}, {engine.PathStore, true, 9}, {engine.PathStore, true, 998}} {
		if r := res[i]; r.Err != nil || r.Path != want.path || r.Decision.Allowed != want.allowed || r.Decision.Remaining != want.remaining {
			t.Errorf("result %d: %+v; want path %v, allowed %v, remaining %d", i, r, want.path, want.allowed, want.remaining)
		}
	}
}

// A multi-limit refusal is remembered under its key and answered locally,
// each limit's own decision with it, until the binding limit's
// retry-after; other limits (a reloaded policy) and a reset miss it.
func TestDenyCacheMultiLimit(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g := &gateStore{inner: openMemory(t, clock.Now)}
	c := newDenyCache(t, g, clock)
	limits := []engine.NamedLimit{
		{Name: "burst", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 5}},
		{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}},
	}
	req := func(ls []engine.NamedLimit) engine.Request {
		return engine.Request{Key: "p:k", Limits: ls, Cost: 1, Detail: make([]engine.Decision, len(ls))}
	}
	if d := decideOne(t, c, req(limits)); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	if d := decideOne(t, c, req(limits)); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("second: %+v; want refused by the daily limit for 1h", d)
	}
	sent := len(g.batchSizes())
	clock.Advance(time.Minute)
	r := req(limits)
	if d := decideOne(t, c, r); d.Allowed || d.RetryAfter != 59*time.Minute {
		t.Fatalf("cached: %+v; want refused for 59m", d)
	}
	if r.Detail[1].RetryAfter != 59*time.Minute || !r.Detail[0].Allowed || r.Detail[0].Remaining != 4 {
		t.Fatalf("cached detail %+v; want the daily limit's retry run down, the burst limit's room", r.Detail)
	}
	if got := len(g.batchSizes()); got != sent {
		t.Fatalf("%d round trips for a cached multi-limit refusal; want none", got-sent)
	}
	other := append([]engine.NamedLimit(nil), limits...)
	other[1].Limit.Rate = 5
	if d := decideOne(t, c, req(other)); !d.Allowed {
		t.Fatalf("other limits: %+v; want the store's admission, not the old refusal", d)
	}
	c.Forget("p:k")
	if c.Stats().Entries != 0 {
		t.Fatalf("Forget left %d entries", c.Stats().Entries)
	}
}
