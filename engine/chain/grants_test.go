package chain_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
)

// countingStore counts what reaches the store behind the grant layer:
// the requests (the round trips a grant saves), the grant requests and
// the refunds.
type countingStore struct {
	inner                        engine.Store
	mu                           sync.Mutex
	calls, reqs, grants, refunds int   // guarded by mu
	refunded                     int64 // guarded by mu
}

func (c *countingStore) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	c.mu.Lock()
	c.calls++
	for _, r := range reqs {
		switch {
		case r.Grant:
			c.grants++
		case r.Refund:
			c.refunds++
			c.refunded += r.Cost
		default:
			c.reqs++
		}
	}
	c.mu.Unlock()
	c.inner.Submit(reqs, res, deadline, done)
}

func (c *countingStore) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	return c.inner.Reset(ctx, key, limits...)
}

func (c *countingStore) counts() (calls, reqs, grants, refunds int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.reqs, c.grants, c.refunds
}

func newGrants(t testing.TB, store engine.Store, now func() time.Time) *chain.Grants {
	t.Helper()
	g, err := chain.NewGrants(chain.GrantsConfig{Store: store, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// decideBatch decides reqs as one Submit and returns their results.
func decideBatch(t testing.TB, s engine.Store, reqs []engine.Request) []engine.Result {
	t.Helper()
	res := make([]engine.Result, len(reqs))
	if err := engine.Wait(s, reqs, res, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
	}
	return res
}

// grantLimits are the algorithms that offer grants, with limits a test
// can run through several periods of.
var grantLimits = []struct {
	name   string
	limit  engine.Limit
	limits []engine.NamedLimit
}{
	{name: "fixed_window", limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Second}},
	{name: "sliding_window", limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 100, Period: time.Second, Precision: 4}},
	{name: "token_bucket", limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 100, Period: time.Second, Burst: 60}},
	{name: "gcra", limit: engine.Limit{Algorithm: engine.GCRA, Rate: 100, Period: time.Second, Burst: 40}},
	{name: "multi_windows", limits: []engine.NamedLimit{
		{Name: "second", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Second}},
		{Name: "minute", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Minute}}}},
	{name: "multi_bucket_window", limits: []engine.NamedLimit{
		{Name: "burst", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 100, Period: time.Second, Burst: 60}},
		{Name: "minute", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Minute}}}},
}

// load is a seeded sequence of batches for one key: each a number of
// requests of cost 1 at a time, the times a few ms apart, with pauses
// (the key going cold) and bursts over the limit.
type batch struct {
	at time.Duration // since the start
	n  int
}

func makeLoad(seed uint64, span time.Duration) []batch {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []batch
	for at := time.Duration(0); at < span; {
		out = append(out, batch{at: at, n: 1 + rng.IntN(6)})
		switch rng.IntN(20) {
		case 0:
			at += time.Duration(200+rng.IntN(600)) * time.Millisecond // cold: the grant ends and gives back
		default:
			at += time.Duration(1+rng.IntN(9)) * time.Millisecond
		}
	}
	return out
}

// A single sidecar with grants admits, request for request, what the
// store alone admits: a grant only moves when the units are counted, and
// what it did not spend goes back before the store decides again. Run on
// the same requests at the same (injected) times, the two agree (the
// sliding counter: never more); and the store behind the grants was asked
// far fewer times.
func TestGrantsDecideAsTheStoreAlone(t *testing.T) {
	for _, tc := range grantLimits {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s/%d", tc.name, seed), func(t *testing.T) {
				clock := enginetest.NewClock(enginetest.Epoch)
				alone := openMemory(t, clock.Now)
				behind := &countingStore{inner: openMemory(t, clock.Now)}
				g := newGrants(t, behind, clock.Now)
				// The sliding counter's grant left unspent when its
				// sub-window ends stays in that sub-window's count (a
				// refund can no longer tell it from units spent), and
				// weighs on the estimate until it slides out: never more
				// than the store alone, sometimes less.
				sliding := tc.limit.Algorithm == engine.SlidingWindow
				start := clock.Now()
				var fromGrants, admitted, total, alonesAdmitted int
				for _, b := range makeLoad(seed, 5*time.Second) {
					clock.Advance(start.Add(b.at).Sub(clock.Now()))
					if b.at%(100*time.Millisecond) < 10*time.Millisecond {
						g.Flush()
					}
					reqs := make([]engine.Request, b.n)
					for i := range reqs {
						reqs[i] = engine.Request{Key: "k", Limit: tc.limit, Limits: tc.limits, Cost: 1}
					}
					want := decideBatch(t, alone, append([]engine.Request(nil), reqs...))
					got := decideBatch(t, g, reqs)
					for i := range got {
						total++
						if want[i].Decision.Allowed {
							alonesAdmitted++
						}
						if got[i].Decision.Allowed {
							admitted++
						}
						if sliding {
							// Never more, request for request.
							if admitted > alonesAdmitted {
								t.Fatalf("at %v: %d admitted with grants, %d by the store alone", b.at, admitted, alonesAdmitted)
							}
						} else if got[i].Decision.Allowed != want[i].Decision.Allowed {
							t.Fatalf("at %v request %d: with grants allowed=%v (path %v), the store alone allowed=%v",
								b.at, i, got[i].Decision.Allowed, got[i].Path, want[i].Decision.Allowed)
						}
						if got[i].Path == engine.PathGrant {
							fromGrants++
							if got[i].Decision.Remaining < 0 || got[i].Decision.RetryAfter != 0 {
								t.Fatalf("a grant's decision %+v", got[i].Decision)
							}
						}
					}
				}
				_, reqs, grants, refunds := behind.counts()
				t.Logf("%d requests, %d admitted, %d from grants; the store saw %d requests, %d grants, %d refunds",
					total, admitted, fromGrants, reqs, grants, refunds)
				if fromGrants < admitted/3 {
					t.Errorf("only %d of %d admissions came from grants", fromGrants, admitted)
				}
				if reqs+fromGrants != total {
					t.Errorf("%d requests reached the store and %d came from grants, of %d", reqs, fromGrants, total)
				}
			})
		}
	}
}

// The algorithms without grants, and the requests that never spend one
// (peeks, charges, durable ones, looks of cost 0), always go down, hot or
// not.
func TestGrantsLeaveTheRestToTheStore(t *testing.T) {
	fixed := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Minute}
	cases := []struct {
		name string
		req  engine.Request
	}{
		{"sliding_log", engine.Request{Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 1000, Period: time.Minute}, Cost: 1}},
		{"leaky_bucket", engine.Request{Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1000, Period: time.Minute, Burst: 1000}, Cost: 1}},
		{"peek", engine.Request{Limit: fixed, Cost: 1, Peek: true}},
		{"charge", engine.Request{Limit: fixed, Cost: 1, Charge: true}},
		{"durable", engine.Request{Limit: fixed, Cost: 1, Durable: engine.DurableReplica}},
		{"cost 0", engine.Request{Limit: fixed}},
		{"multi with a log", engine.Request{Cost: 1, Limits: []engine.NamedLimit{
			{Name: "a", Limit: fixed}, {Name: "b", Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 1000, Period: time.Minute}}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch)
			behind := &countingStore{inner: openMemory(t, clock.Now)}
			g := newGrants(t, behind, clock.Now)
			for range 20 {
				r := tc.req
				r.Key = "k"
				res := decideBatch(t, g, []engine.Request{r, r})
				for _, x := range res {
					if x.Path != engine.PathStore {
						t.Fatalf("decided by %v", x.Path)
					}
				}
				clock.Advance(time.Millisecond)
			}
			if _, reqs, grants, _ := behind.counts(); reqs != 40 || grants != 0 {
				t.Errorf("the store saw %d requests and %d grant requests, want 40 and 0", reqs, grants)
			}
		})
	}
}

// hotKey makes "k" hot in g and takes a grant of it: requests until one
// is admitted from a grant.
func hotKey(t *testing.T, g engine.Store, clock *enginetest.Clock, l engine.Limit) {
	t.Helper()
	for range 50 {
		res := decideBatch(t, g, []engine.Request{{Key: "k", Limit: l, Cost: 1}})
		if res[0].Path == engine.PathGrant {
			return
		}
		clock.Advance(time.Millisecond)
	}
	t.Fatal("no grant after 50 requests of a hot key")
}

// A request a grant cannot cover goes down, never refused here: the store
// may have other units, and the grant's own go back ahead of it. So one
// sidecar spends the whole window, a request of 20 among them, and no
// more.
func TestGrantsNeverRefuse(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
	l := engine.Limit{Algorithm: engine.FixedWindow, Rate: 40, Period: time.Minute}
	g := newGrants(t, openMemory(t, clock.Now), clock.Now)
	var admitted int64
	for i := range 200 {
		cost := int64(1)
		if i == 15 {
			cost = 20 // more than any grant: a quarter of 40
		}
		res := decideBatch(t, g, []engine.Request{{Key: "k", Limit: l, Cost: cost}})
		if res[0].Decision.Allowed {
			admitted += cost
		} else if res[0].Path != engine.PathStore {
			t.Fatalf("request %d refused by %v", i, res[0].Path)
		}
		if i == 15 && !res[0].Decision.Allowed {
			t.Fatalf("the request of 20 with 40 - 15 left: %+v", res[0])
		}
		clock.Advance(time.Millisecond)
	}
	if admitted != 40 {
		t.Fatalf("admitted %d units in a window of 40", admitted)
	}
	if g.Stats().Decisions == 0 {
		t.Fatal("no decision from a grant")
	}
}

// Three sidecars' grant layers over one store, the load moving from one
// to another and back: the fleet never admits more than the limit in a
// window (windows), or than the capacity plus what refilled (buckets);
// the units held in grants while another sidecar was refused are at most
// the other sidecars' outstanding grants, each at most a quarter of the
// capacity.
func TestGrantsFleetStaysWithinTheLimit(t *testing.T) {
	const sidecars = 3
	for _, tc := range grantLimits[:4] {
		t.Run(tc.name, func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
			store := openMemory(t, clock.Now)
			var gs [sidecars]*chain.Grants
			for i := range gs {
				gs[i] = newGrants(t, store, clock.Now)
			}
			l := tc.limit
			capacity := l.Capacity()
			rng := rand.New(rand.NewPCG(1, 2))
			start := clock.Now()
			admitted := map[int64]int64{} // by window (windows), or in all (buckets)
			var total, heldRefusals, worstHeld int64
			for step := range 6000 {
				at := time.Duration(step) * time.Millisecond
				clock.Advance(start.Add(at).Sub(clock.Now()))
				if step%100 == 0 {
					for _, g := range gs {
						g.Flush()
					}
				}
				// The load sits on one sidecar for 1.5s, then moves.
				who := (step / 1500) % sidecars
				if rng.IntN(10) == 0 {
					who = rng.IntN(sidecars)
				}
				n := 1 + rng.IntN(4)
				reqs := make([]engine.Request, n)
				for i := range reqs {
					reqs[i] = engine.Request{Key: "k", Limit: l, Cost: 1}
				}
				res := decideBatch(t, gs[who], reqs)
				var held int64
				for i, g := range gs {
					if i != who {
						held += g.Stats().Outstanding
					}
				}
				worstHeld = max(worstHeld, held)
				for _, r := range res {
					if r.Decision.Allowed {
						total++
						admitted[windowOf(l, at)]++
					} else if held > 0 && peek(t, store, l)+held >= 1 {
						// Refused while the units held elsewhere would have
						// admitted it: a refusal grants caused.
						heldRefusals++
					}
				}
				switch l.Algorithm {
				case engine.TokenBucket, engine.GCRA:
					// Full at the start, refilled at rate since.
					if most := capacity + int64(at)*l.Rate/int64(l.Period); total > most {
						t.Fatalf("at %v admitted %d, the bucket allows at most %d", at, total, most)
					}
				}
			}
			if l.Algorithm == engine.FixedWindow {
				for w, n := range admitted {
					if n > l.Rate {
						t.Fatalf("window %d admitted %d of %d", w, n, l.Rate)
					}
				}
			}
			if bound := int64(sidecars-1) * (capacity / 4); worstHeld > bound {
				t.Errorf("other sidecars held %d units at once, over the bound %d", worstHeld, bound)
			}
			t.Logf("admitted %d; %d refusals the units held by other sidecars caused (at most %d held at once, bound %d)",
				total, heldRefusals, worstHeld, int64(sidecars-1)*(capacity/4))
		})
	}
}

// windowOf numbers the fixed window at of l's.
func windowOf(l engine.Limit, at time.Duration) int64 {
	if l.Algorithm != engine.FixedWindow {
		return 0
	}
	return int64(at / l.Period)
}

// A grant that ends unspent gives its units back: at once in the next
// Submit when replaced or too small, or by the flush when its key went
// cold. A bucket's gives nothing back: kept while it may spend, it ends
// once its units have lapsed.
func TestGrantsGiveBack(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
	l := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Minute}
	mem := openMemory(t, clock.Now)
	behind := &countingStore{inner: mem}
	g := newGrants(t, behind, clock.Now)
	hotKey(t, g, clock, l)
	before := peek(t, mem, l)
	held := g.Stats().Outstanding
	if held < 1 || g.Stats().Held != 1 {
		t.Fatalf("stats %+v after a grant", g.Stats())
	}
	// Cold for two hot intervals: the flush ends the grant, and its units
	// go back to the store.
	clock.Advance(120 * time.Millisecond)
	g.Flush()
	if s := g.Stats(); s.Held != 0 || s.GivenBack != uint64(held) {
		t.Fatalf("after the flush: %+v, want none held and %d given back", s, held)
	}
	if after := peek(t, mem, l); after != before+held {
		t.Fatalf("the store has %d left, want %d + %d given back", after, before, held)
	}

	// A token bucket's grant gives nothing back: its units lapse.
	bl := engine.Limit{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 100}
	b := newGrants(t, &countingStore{inner: mem}, clock.Now)
	for range 10 {
		decideBatch(t, b, []engine.Request{{Key: "b", Limit: bl, Cost: 1}})
		clock.Advance(time.Millisecond)
	}
	if b.Stats().Held != 1 {
		t.Fatalf("no bucket grant: %+v", b.Stats())
	}
	clock.Advance(120 * time.Millisecond)
	b.Flush()
	if s := b.Stats(); s.Held != 1 || s.GivenBack != 0 {
		t.Fatalf("bucket cold: %+v, want the grant kept (it may still spend) and nothing given back", s)
	}
	// Its units lapse as the bucket refills; then it ends.
	clock.Advance(3 * time.Second)
	b.Flush()
	if s := b.Stats(); s.Held != 0 || s.GivenBack != 0 || s.Keys != 0 {
		t.Fatalf("bucket refilled: %+v, want nothing held, nothing given back, the key forgotten", s)
	}
}

func peek(t *testing.T, s engine.Store, l engine.Limit) int64 {
	t.Helper()
	return decideBatch(t, s, []engine.Request{{Key: "k", Limit: l, Peek: true}})[0].Decision.Remaining
}

// Revocation: a reset through this sidecar, one announced by another
// (Forget) and a policy reload (DropAll) each drop the grant, and the
// key's next requests go down.
func TestGrantsRevoked(t *testing.T) {
	l := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Minute}
	revokes := []struct {
		name   string
		revoke func(g *chain.Grants) error
	}{
		{"reset", func(g *chain.Grants) error { return g.Reset(context.Background(), "k") }},
		{"forget", func(g *chain.Grants) error { g.Forget("k"); return nil }},
		{"reload", func(g *chain.Grants) error { g.DropAll(); return nil }},
	}
	for _, tc := range revokes {
		t.Run(tc.name, func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
			behind := &countingStore{inner: openMemory(t, clock.Now)}
			g := newGrants(t, behind, clock.Now)
			hotKey(t, g, clock, l)
			if err := tc.revoke(g); err != nil {
				t.Fatal(err)
			}
			if s := g.Stats(); s.Held != 0 || s.Revoked != 1 {
				t.Fatalf("after %s: %+v, want none held and one revoked", tc.name, s)
			}
			res := decideBatch(t, g, []engine.Request{{Key: "k", Limit: l, Cost: 1}})
			if res[0].Path != engine.PathStore {
				t.Fatalf("after %s: decided by %v", tc.name, res[0].Path)
			}
			if _, _, _, refunds := behind.counts(); refunds != 0 {
				t.Fatalf("after %s: %d refunds sent, want none (the state they were taken from is gone)", tc.name, refunds)
			}
		})
	}
}

// A grant asked for under one limit is not spent under another on the
// same state (an inline command with other parameters, a reloaded
// policy): the request goes down, the old grant ends.
func TestGrantsFollowTheLimit(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
	l := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Minute}
	g := newGrants(t, openMemory(t, clock.Now), clock.Now)
	hotKey(t, g, clock, l)
	other := l
	other.Rate = 10
	res := decideBatch(t, g, []engine.Request{{Key: "k", Limit: other, Cost: 1}})
	if res[0].Path != engine.PathStore {
		t.Fatalf("under another limit: decided by %v", res[0].Path)
	}
}

// A sidecar killed with a grant outstanding: nothing gives its units
// back, and they come back by themselves, at the window's end for a
// window and as the bucket refills for a bucket.
func TestGrantsOfAKilledSidecarComeBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit engine.Limit
	}{
		{"fixed_window", engine.Limit{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Second}},
		{"token_bucket", engine.Limit{Algorithm: engine.TokenBucket, Rate: 100, Period: time.Second, Burst: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
			mem := openMemory(t, clock.Now)
			g := newGrants(t, mem, clock.Now)
			hotKey(t, g, clock, tc.limit)
			held := g.Stats().Outstanding
			if held < 1 {
				t.Fatal("no units held")
			}
			// g is gone: no flush, no refund.
			if left := peek(t, mem, tc.limit); left+held > tc.limit.Capacity() {
				t.Fatalf("the store has %d left while %d are held, of %d", left, held, tc.limit.Capacity())
			}
			clock.Advance(time.Second)
			if left := peek(t, mem, tc.limit); left != tc.limit.Capacity() {
				t.Fatalf("a second later the store has %d left, want all %d back", left, tc.limit.Capacity())
			}
		})
	}
}

// The guard never decides a grant by a failure mode: the store down, a
// grant request is refused whatever the mode, and the layer holds none;
// requests still get their failure mode.
func TestGrantsWhenTheStoreFails(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	f := &flakyStore{inner: openMemory(t, clock.Now)}
	guard, err := chain.NewGuard(chain.GuardConfig{Store: f, Local: openMemory(t, clock.Now), Default: engine.FailOpen, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Minute}
	f.set(true)
	g := newGrants(t, guard, clock.Now)
	for _, mode := range []engine.FailureMode{engine.FailOpen, engine.FailLocal, engine.FailClosed} {
		res := decideBatch(t, guard, []engine.Request{{Key: "g", Limit: l, Cost: 10, Grant: true, OnFailure: mode}})
		if res[0].Decision.Allowed || res[0].Path != engine.PathFailClosed {
			t.Errorf("a grant with %v and the store down: %+v, want refused by fail_closed", mode, res[0])
		}
	}
	for range 20 {
		res := decideBatch(t, g, []engine.Request{{Key: "k", Limit: l, Cost: 1}})
		if res[0].Path != engine.PathFailOpen || !res[0].Decision.Allowed {
			t.Fatalf("the store down: %+v, want allowed by fail_open", res[0])
		}
		clock.Advance(time.Millisecond)
	}
	if s := g.Stats(); s.Held != 0 || s.Taken != 0 || s.Asked == 0 {
		t.Fatalf("with the store down: %+v, want grants asked for and none taken", s)
	}
}

// The deny cache never remembers a refused grant: a grant refused for k
// units says nothing once units come back (another sidecar's grant given
// back, which that sidecar's own cache sees, this one's does not).
func TestDenyCacheForgetsRefusedGrants(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
	mem := openMemory(t, clock.Now)
	d := newDenyCache(t, mem, clock)
	l := engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Minute}
	// Another sidecar holds 8 units.
	other := decideBatch(t, mem, []engine.Request{{Key: "k", Limit: l, Cost: 8, Grant: true}})[0].Decision
	if !other.Allowed {
		t.Fatalf("the other sidecar's grant: %+v", other)
	}
	res := decideBatch(t, d, []engine.Request{{Key: "k", Limit: l, Cost: 5, Grant: true}})
	if res[0].Decision.Allowed {
		t.Fatalf("a grant of 5 with 2 left: %+v", res[0])
	}
	// It gives them back, unspent.
	decideBatch(t, mem, []engine.Request{{Key: "k", Limit: l, Cost: 8, Refund: true, Anchor: other.Anchor}})
	res = decideBatch(t, d, []engine.Request{{Key: "k", Limit: l, Cost: 5}})
	if res[0].Path != engine.PathStore || !res[0].Decision.Allowed {
		t.Fatalf("a request of 5 after the units came back: %+v, want admitted by the store", res[0])
	}
}

// With grants, a window's refusal is remembered no longer than units held
// in other sidecars' grants take to come back (WindowHold): given back,
// they are found. A bucket's refusal is remembered to its retry-after:
// its held units lapse as it refills, never sooner.
func TestDenyCacheWindowHold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  engine.Limit
		cached time.Duration // how long the refusal answers locally
	}{
		{"fixed_window", engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Hour}, chain.GrantsReturnWithin},
		{"gcra", engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour, Burst: 9}, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Hour))
			behind := &countingStore{inner: openMemory(t, clock.Now)}
			d, err := chain.NewDenyCache(chain.DenyCacheConfig{Store: behind, Now: clock.Now, WindowHold: chain.GrantsReturnWithin})
			if err != nil {
				t.Fatal(err)
			}
			decideBatch(t, d, []engine.Request{{Key: "k", Limit: tc.limit, Cost: 10}})
			decideBatch(t, d, []engine.Request{{Key: "k", Limit: tc.limit, Cost: 1}}) // refused, remembered
			clock.Advance(tc.cached - time.Millisecond)
			if res := decideBatch(t, d, []engine.Request{{Key: "k", Limit: tc.limit, Cost: 1}}); res[0].Path != engine.PathDenyCache {
				t.Fatalf("just before %v: decided by %v", tc.cached, res[0].Path)
			}
			clock.Advance(time.Millisecond)
			if res := decideBatch(t, d, []engine.Request{{Key: "k", Limit: tc.limit, Cost: 1}}); res[0].Path != engine.PathStore {
				t.Fatalf("at %v: decided by %v, want the store", tc.cached, res[0].Path)
			}
		})
	}
}

// Grants through the whole chain (chain.New with Grants): hot keys are
// decided from grants, INFO counts them, and Forget and DropGrants reach
// the layer.
func TestChainWithGrants(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
	c := openChain(t, chain.Config{Store: openMemory(t, clock.Now), Local: openMemory(t, clock.Now), Now: clock.Now,
		Timeout: time.Minute, Grants: true})
	l := engine.Limit{Algorithm: engine.GCRA, Rate: 1000, Period: time.Second, Burst: 999}
	hotKey(t, c, clock, l)
	info := map[string]string{}
	for _, f := range c.InfoGrants() {
		info[f[0]] = f[1]
	}
	if info["grants"] != "1" || info["grants_held"] != "1" || info["grant_decisions"] != "1" || info["grants_taken"] != "1" {
		t.Fatalf("INFO after a grant: %v", info)
	}
	c.Forget("k")
	if s := c.GrantStats(); s.Held != 0 {
		t.Fatalf("after Forget: %+v", s)
	}
	hotKey(t, c, clock, l)
	c.DropGrants()
	if s := c.GrantStats(); s.Held != 0 {
		t.Fatalf("after DropGrants: %+v", s)
	}
	off := openChain(t, chain.Config{Store: openMemory(t, clock.Now), Now: clock.Now, Timeout: time.Minute})
	for range 20 {
		if res := decideBatch(t, off, []engine.Request{{Key: "k", Limit: l, Cost: 1}}); res[0].Path != engine.PathStore {
			t.Fatalf("grants off: decided by %v", res[0].Path)
		}
	}
}

// A hot key decided from its grant: no round trip, and nothing allocated.
func BenchmarkGrantsHotKey(b *testing.B) {
	clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
	g := newGrants(b, openMemory(b, clock.Now), clock.Now)
	l := engine.Limit{Algorithm: engine.GCRA, Rate: 1_000_000_000, Period: time.Hour, Burst: 1_000_000_000}
	reqs := make([]engine.Request, 16)
	for i := range reqs {
		reqs[i] = engine.Request{Key: "k", Limit: l, Cost: 1}
	}
	res := make([]engine.Result, len(reqs))
	b.ReportAllocs()
	for b.Loop() {
		if err := engine.Wait(g, reqs, res, time.Time{}); err != nil {
			b.Fatal(err)
		}
		clock.Advance(time.Microsecond)
	}
}

// Many keys, none hot: the cost of the counting alone.
func BenchmarkGrantsColdKeys(b *testing.B) {
	clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
	g := newGrants(b, openMemory(b, clock.Now), clock.Now)
	l := engine.Limit{Algorithm: engine.GCRA, Rate: 1000, Period: time.Second, Burst: 1000}
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%d", i)
	}
	reqs := make([]engine.Request, 16)
	res := make([]engine.Result, len(reqs))
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		for i := range reqs {
			reqs[i] = engine.Request{Key: keys[n%len(keys)], Limit: l, Cost: 1}
			n++
		}
		if err := engine.Wait(g, reqs, res, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

// A grant is never more than this sidecar's share of the capacity: past
// four sidecars, their share is less than the quarter a grant may hold
// otherwise, and the grants held when the store goes away are charged to
// that share (GrantsConfig.Away). A share under one unit gets no grant.
func TestGrantsFitTheShare(t *testing.T) {
	for _, tc := range []struct {
		sidecars int64
		most     int64 // units a grant may hold, of 800
	}{
		{1, 200}, {3, 200}, {4, 200}, {8, 100}, {1000, 0},
	} {
		t.Run(fmt.Sprint(tc.sidecars), func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch.Truncate(time.Minute))
			l := engine.Limit{Algorithm: engine.FixedWindow, Rate: 800, Period: time.Minute}
			g, err := chain.NewGrants(chain.GrantsConfig{Store: openMemory(t, clock.Now), Now: clock.Now,
				Sidecars: func() int64 { return tc.sidecars }})
			if err != nil {
				t.Fatal(err)
			}
			var most int64
			for range 400 { // 100 a ms, for 4 ms at a time: a rate that wants the largest grant
				reqs := make([]engine.Request, 100)
				for i := range reqs {
					reqs[i] = engine.Request{Key: "k", Limit: l, Cost: 1}
				}
				decideBatch(t, g, reqs)
				most = max(most, g.Stats().Outstanding)
				clock.Advance(time.Millisecond)
			}
			if most != tc.most {
				t.Fatalf("the largest grant held %d units; want %d, a 1/%d share of 800 or a quarter", most, tc.most, tc.sidecars)
			}
		})
	}
}
