package chain_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

// downGuard is a guard over a shared store that is down, deciding
// FailLocal from its own memory store on clock, by the share that
// sidecars gives (nil: the whole limit).
func downGuard(t *testing.T, clock *enginetest.Clock, sidecars func() int) *chain.Guard {
	t.Helper()
	f := &flakyStore{inner: openMemory(t, clock.Now), down: true}
	g, err := chain.NewGuard(chain.GuardConfig{Store: f, Local: openMemory(t, clock.Now), Default: engine.FailLocal,
		ProbeEvery: 250 * time.Millisecond, Now: clock.Now, Sidecars: sidecars})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func fixed(n int) func() int { return func() int { return n } }

// decide submits one request to g and returns its result.
func decide(t *testing.T, g engine.Store, r engine.Request) engine.Result {
	t.Helper()
	res := make([]engine.Result, 1)
	if err := engine.Wait(g, []engine.Request{r}, res, time.Time{}); err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// The outage of the issue, on three guards and an injected clock: one
// hot token bucket (capacity 300, 5 a second) sent ten times what it
// allows over 10 s, spread evenly over three sidecars whose shared store
// is down. By their share the three admit the limit's capacity and its
// refill over the outage, 350; each with the whole limit, three times it.
func TestShareOutageThreeSidecars(t *testing.T) {
	hot := engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 300}
	const outage = 10 * time.Second
	allows := hot.Burst + hot.Rate*int64(outage/hot.Period) // 350
	for _, tc := range []struct {
		name     string
		sidecars func() int
		want     int64
	}{
		{"fleet", fixed(3), allows},
		{"whole", nil, 3 * allows},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch)
			guards := []*chain.Guard{downGuard(t, clock, tc.sidecars), downGuard(t, clock, tc.sidecars),
				downGuard(t, clock, tc.sidecars)}
			// 10 × 350 requests over 10 s: one every 2,857 µs, in turn.
			sent := 10 * allows
			step := outage / time.Duration(sent)
			var admitted int64
			for i := range sent {
				res := decide(t, guards[i%3], engine.Request{Key: "hot", Limit: hot, Cost: 1})
				if res.Err != nil || res.Path != engine.PathLocal {
					t.Fatalf("request %d: %+v; want a local decision", i, res)
				}
				if res.Decision.Allowed {
					admitted++
				}
				clock.Advance(step)
			}
			t.Logf("%s: %d of %d admitted over %v; the limit allows %d", tc.name, admitted, sent, outage, allows)
			// The last refill may land a unit per sidecar short: the
			// bucket's refill is continuous, the outage's end a cut.
			if admitted > tc.want || admitted < tc.want-3 {
				t.Errorf("%s: %d admitted; want %d (within the 3 units the cut at the outage's end may leave)", tc.name, admitted, tc.want)
			}
		})
	}
}

// Each algorithm's local decisions follow the share: the limit reported
// is the share's, and the share's capacity is what one sidecar admits at
// once; the caller's request comes back as it went in.
func TestShareDecisions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     engine.Limit
		n     int
		admit int64 // how many of cost 1 one sidecar admits at once
	}{
		{"token bucket", engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 300}, 3, 100},
		{"leaky bucket", engine.Limit{Algorithm: engine.LeakyBucket, Rate: 10, Period: time.Second, Burst: 10}, 4, 2},
		{"gcra", engine.Limit{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 9}, 2, 5},
		{"fixed window", engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Hour}, 3, 3},
		{"sliding window", engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Hour}, 3, 3},
		{"sliding log", engine.Limit{Algorithm: engine.SlidingLog, Rate: 10, Period: time.Hour}, 3, 3},
		{"never below one", engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Hour}, 3, 1},
		{"one sidecar", engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Hour}, 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch)
			g := downGuard(t, clock, fixed(tc.n))
			var admitted int64
			for range 2 * tc.l.Capacity() {
				r := engine.Request{Key: "k", Limit: tc.l, Cost: 1}
				res := decide(t, g, r)
				if res.Err != nil || res.Path != engine.PathLocal {
					t.Fatalf("%+v; want a local decision", res)
				}
				if res.Decision.Limit != tc.admit {
					t.Fatalf("limit %d reported; want the share's, %d", res.Decision.Limit, tc.admit)
				}
				if res.Decision.Allowed {
					admitted++
				}
			}
			if admitted != tc.admit {
				t.Errorf("%d admitted at once; want %d", admitted, tc.admit)
			}
		})
	}
}

// A request that costs more than its share's capacity could never be
// admitted locally: refused, to be retried when the breaker next probes,
// with nothing taken; a charge is taken whatever it costs. A multi-limit
// request is decided by every limit's share, and the policy's limits,
// shared by every request, are left as they were.
func TestShareCostAndMulti(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g := downGuard(t, clock, fixed(3))
	bucket := engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 300}

	r := engine.Request{Key: "big", Limit: bucket, Cost: 150}
	res := decide(t, g, r)
	if res.Err != nil || res.Decision.Allowed || res.Path != engine.PathLocal || res.Decision.RetryAfter != 250*time.Millisecond ||
		res.Decision.Limit != 100 {
		t.Errorf("cost 150 over a share of 100: %+v; want refused locally, limit 100, retry at the next probe (250ms)", res)
	}
	if res := decide(t, g, engine.Request{Key: "big", Limit: bucket, Cost: 100}); !res.Decision.Allowed {
		t.Errorf("cost 100 after the refusal: %+v; want admitted: the refusal took nothing", res)
	}

	if res := decide(t, g, engine.Request{Key: "charged", Limit: bucket, Cost: 150, Charge: true}); res.Err != nil ||
		res.Decision.Remaining != -50 {
		t.Errorf("a charge of 150 on a share of 100: %+v; want it taken, 50 over", res)
	}

	limits := []engine.NamedLimit{
		{Name: "second", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Second}},
		{Name: "hour", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 6, Period: time.Hour}},
	}
	policy := slices.Clone(limits)
	var admitted int
	for range 10 {
		detail := make([]engine.Decision, 2)
		r := engine.Request{Key: "multi", Limits: limits, Detail: detail, Cost: 1}
		reqs, res := []engine.Request{r}, make([]engine.Result, 1)
		if err := engine.Wait(g, reqs, res, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if res[0].Decision.Allowed {
			admitted++
		}
		if detail[0].Limit != 3 || detail[1].Limit != 2 {
			t.Fatalf("detail %+v; want each limit's share: 3 and 2", detail)
		}
		if &reqs[0].Limits[0] != &limits[0] || reqs[0].Limit != (engine.Limit{}) {
			t.Fatalf("the request came back changed: %+v", reqs[0])
		}
	}
	if admitted != 2 {
		t.Errorf("%d admitted by a share of 3 a second and 2 an hour; want 2", admitted)
	}
	if !slices.Equal(limits, policy) {
		t.Errorf("the policy's limits changed: %+v; want %+v", limits, policy)
	}
	detail := make([]engine.Decision, 2)
	res = decide(t, g, engine.Request{Key: "multi2", Limits: limits, Detail: detail, Cost: 3})
	if res.Decision.Allowed || detail[0].Limit != 3 || detail[1].Limit != 2 || detail[1].RetryAfter != 250*time.Millisecond {
		t.Errorf("cost 3 over a share of 2: %+v, detail %+v; want refused, each limit's share", res, detail)
	}
}

// The share follows the count as it changes, decision by decision, and
// the key's local count carries over.
func TestShareFollowsCount(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	var n atomic.Int64
	n.Store(1)
	g := downGuard(t, clock, func() int { return int(n.Load()) })
	window := engine.Limit{Algorithm: engine.FixedWindow, Rate: 12, Period: time.Hour}
	take := func() bool { return decide(t, g, engine.Request{Key: "k", Limit: window, Cost: 1}).Decision.Allowed }
	for range 3 {
		if !take() {
			t.Fatal("refused under the whole limit")
		}
	}
	n.Store(4) // a share of 3: the 3 taken already fill it
	if take() {
		t.Error("admitted past a share of 3 with 3 counted")
	}
	n.Store(2) // a share of 6
	for i := range 3 {
		if !take() {
			t.Fatalf("refused at %d of a share of 6", 4+i)
		}
	}
	if take() {
		t.Error("admitted past a share of 6")
	}
}

// A concurrency limit's local leases are the share too.
func TestShareLeases(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	shared, _ := memstore.New(memstore.Config{Now: clock.Now})
	local, _ := memstore.New(memstore.Config{Now: clock.Now})
	flaky := &leaseFlaky{inner: shared, down: true}
	g, err := chain.NewGuard(chain.GuardConfig{Store: &flakyStore{inner: shared, down: true}, Local: local, Leaser: flaky,
		Now: clock.Now, Sidecars: fixed(3)})
	if err != nil {
		t.Fatal(err)
	}
	var held int
	for i := range 10 {
		d, err := g.Acquire(context.Background(), engine.LeaseRequest{Key: "k", Limit: 10, TTL: time.Minute,
			ID: string(rune('a' + i)), OnFailure: engine.FailLocal})
		if err != nil || d.Path != engine.PathLocal {
			t.Fatalf("%+v %v; want a local lease decision", d, err)
		}
		if d.Allowed {
			held++
		}
	}
	if held != 3 {
		t.Errorf("%d leases of 10 held locally by one of 3 sidecars; want 3", held)
	}
}

// The outage of the issue with grants on: a sidecar that loses the shared
// store spends what its grants hold first, then decides by its share, and
// the two together stay within the share. Three sidecars (the grant layer
// over a guard) on one shared memory store decide the hot bucket for
// 300 ms while it is full, so that each holds a grant when the store goes
// down; then the load runs 10 s against the store down. The fleet admits
// at most the limit's capacity and its refill over the outage, 350, as
// without grants: the units its grants admitted are charged to the share
// (Guard.ChargeLocal), and it admits no less than 350 less the units the
// grants had admitted before the outage since the store last answered
// them. Without the charge it admitted 350 and the grants' units on top.
//
// Hot or cold during the outage: a key whose load here falls below hot
// asks for no grant, whose failure would charge the share; what its grant
// admits is charged all the same, since the layer sees the guard failing.
func TestShareOutageWithGrants(t *testing.T) {
	for _, c := range []struct {
		name string
		cold bool // the key's load falls below hot when the store goes down
	}{{"hot", false}, {"cold during the outage", true}} {
		t.Run(c.name, func(t *testing.T) { shareOutageWithGrants(t, c.cold) })
	}
}

func shareOutageWithGrants(t *testing.T, cold bool) {
	hot := engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 300}
	const outage = 10 * time.Second
	allows := hot.Burst + hot.Rate*int64(outage/hot.Period) // 350
	clock := enginetest.NewClock(enginetest.Epoch)
	shared := openMemory(t, clock.Now)
	var stores []*flakyStore
	var sidecars []*chain.Grants
	for range 3 {
		f := &flakyStore{inner: shared}
		g, err := chain.NewGuard(chain.GuardConfig{Store: f, Local: openMemory(t, clock.Now), Default: engine.FailLocal,
			ProbeEvery: 250 * time.Millisecond, Now: clock.Now, Sidecars: fixed(3)})
		if err != nil {
			t.Fatal(err)
		}
		gr, err := chain.NewGrants(chain.GrantsConfig{Store: g, Now: clock.Now, Away: g.ChargeLocal, Failing: g.Failing})
		if err != nil {
			t.Fatal(err)
		}
		stores, sidecars = append(stores, f), append(sidecars, gr)
	}
	// Ten times what the bucket allows over the outage, in turn.
	step := outage / time.Duration(10*allows)
	i := 0
	send := func() engine.Result {
		res := decide(t, sidecars[i%3], engine.Request{Key: "hot", Limit: hot, Cost: 1})
		i++
		clock.Advance(step)
		if res.Err != nil {
			t.Fatalf("request %d: %v", i, res.Err)
		}
		return res
	}
	for range 300 * time.Millisecond / step {
		send()
	}
	var held int64
	for _, g := range sidecars {
		held += g.Stats().Outstanding
	}
	if held == 0 {
		t.Fatal("no grant held when the store goes down: the test needs some")
	}
	for _, f := range stores {
		f.set(true)
	}
	if cold {
		// One request every 20ms, in turn: one a sidecar every 60ms,
		// below hot (4 in 50ms), and still more than the bucket allows.
		step = 20 * time.Millisecond
	}
	paths := map[engine.Path]int64{}
	for range outage / step {
		if res := send(); res.Decision.Allowed {
			paths[res.Path]++
		}
	}
	admitted := paths[engine.PathGrant] + paths[engine.PathLocal]
	var charged uint64
	for _, g := range sidecars {
		charged += g.Stats().ChargedLocal
	}
	t.Logf("%d units held in grants when the store went down; over the %v outage %d admitted from grants, %d locally "+
		"(%d charged to the shares); the limit allows %d", held, outage, paths[engine.PathGrant], paths[engine.PathLocal],
		charged, allows)
	if paths[engine.PathGrant] == 0 || paths[engine.PathLocal] == 0 || len(paths) != 2 {
		t.Errorf("admitted during the outage by path: %v; want from grants first, then locally, and nothing else", paths)
	}
	if admitted > allows {
		t.Errorf("%d admitted during the outage (%d from grants, %d locally); the limit allows %d",
			admitted, paths[engine.PathGrant], paths[engine.PathLocal], allows)
	}
	// Charged: what the grants admitted since the store last answered
	// each key's grant request, which is all they admitted during the
	// outage and what the grant then held had admitted before it: a
	// sidecar cannot tell a store that stalled from one that is slow
	// until the deadline. The share loses no more than those units.
	// Paced at one request a sidecar every 60ms, the cold load leaves the
	// last refills of the outage unspent: 345 of 350 with nothing charged.
	slack := int64(3)
	if cold {
		slack = 8
	}
	before := int64(charged) - paths[engine.PathGrant]
	if before < 0 || admitted < allows-before-slack {
		t.Errorf("%d admitted during the outage with %d units charged to the shares (%d admitted from grants meanwhile); want at least %d",
			admitted, charged, paths[engine.PathGrant], allows-before-slack)
	}
}

// ChargeLocal takes the cost from the share of a request that fails
// locally, from every limit of a multi-limit one, whatever is left, and
// from nothing for the other failure modes; the request's Detail is not
// written.
func TestShareChargeLocal(t *testing.T) {
	bucket := engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 300}
	limits := []engine.NamedLimit{
		{Name: "second", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 30, Period: time.Second}},
		{Name: "hour", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 60, Period: time.Hour}},
	}
	for _, tc := range []struct {
		name   string
		r      engine.Request
		want   int64         // the share's remaining after, by a peek
		wait   time.Duration // and its retry-after at least
		detail bool
	}{
		{"local", engine.Request{Key: "k", Limit: bucket, Cost: 40}, 60, 0, false},
		// 30 units over a share refilled 5 every 3 s: 18 s to one unit.
		{"over the share", engine.Request{Key: "k", Limit: bucket, Cost: 130}, 0, 18 * time.Second, false},
		{"default mode", engine.Request{Key: "k", Limit: bucket, Cost: 40, OnFailure: engine.FailDefault}, 60, 0, false},
		{"deny", engine.Request{Key: "k", Limit: bucket, Cost: 40, OnFailure: engine.FailClosed}, 100, 0, false},
		{"allow", engine.Request{Key: "k", Limit: bucket, Cost: 40, OnFailure: engine.FailOpen}, 100, 0, false},
		{"multi", engine.Request{Key: "k", Limits: limits, Cost: 4, Detail: make([]engine.Decision, 2)}, 6, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := enginetest.NewClock(enginetest.Epoch)
			g := downGuard(t, clock, fixed(3))
			g.ChargeLocal(tc.r)
			if tc.detail && tc.r.Detail[0] != (engine.Decision{}) {
				t.Errorf("the charge wrote the caller's detail: %+v", tc.r.Detail)
			}
			peek := tc.r
			peek.Cost, peek.Peek, peek.OnFailure = 0, true, engine.FailLocal
			if tc.detail {
				peek.Detail = make([]engine.Decision, 2)
			}
			res := decide(t, g, peek)
			if res.Err != nil || res.Path != engine.PathLocal || res.Decision.Remaining != tc.want || res.Decision.RetryAfter < tc.wait {
				t.Errorf("the share after the charge: %+v; want %d remaining, a retry-after of at least %v", res, tc.want, tc.wait)
			}
			if tc.detail && (peek.Detail[0].Remaining != 6 || peek.Detail[1].Remaining != 16) {
				t.Errorf("each limit's share after the charge: %+v; want 6 of 10 and 16 of 20", peek.Detail)
			}
		})
	}
}
