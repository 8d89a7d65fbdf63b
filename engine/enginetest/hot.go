package enginetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// HotLimits are the limits HotRuns tries: every algorithm, with whole and
// fractional intervals, sliding precisions, and capacities small enough
// that a batch refuses in the middle of a key's run.
var HotLimits = []engine.Limit{
	{Algorithm: engine.FixedWindow, Rate: 20, Period: time.Second},
	{Algorithm: engine.SlidingLog, Rate: 15, Period: 700 * time.Millisecond},
	{Algorithm: engine.SlidingWindow, Rate: 25, Period: time.Second},
	{Algorithm: engine.SlidingWindow, Rate: 18, Period: time.Second, Precision: 4},
	{Algorithm: engine.TokenBucket, Rate: 7, Period: time.Second, Burst: 12},
	{Algorithm: engine.LeakyBucket, Rate: 30, Period: time.Second, Burst: 9},
	{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 14},
	{Algorithm: engine.GCRA, Rate: 700_000, Period: time.Second, Burst: 40},
	// Whole-µs intervals, where a long run of one key steps alike and a
	// store may decide it at once.
	{Algorithm: engine.GCRA, Rate: 1000, Period: time.Second, Burst: 90},
	{Algorithm: engine.TokenBucket, Rate: 100, Period: time.Second, Burst: 45},
	{Algorithm: engine.LeakyBucket, Rate: 50, Period: time.Second, Burst: 20},
	{Algorithm: engine.PeerWindow, Rate: 20, Period: time.Second},
}

// StateCheck compares the state store a keeps for keyA under alg with the
// state store b keeps for keyB; now is the pinned clock's time. The keys
// differ, so that two stores over one server keep apart.
type StateCheck func(t *testing.T, a, b engine.Store, alg engine.Algorithm, keyA, keyB string, now time.Time)

// HotRuns proves that a store decides a batch holding many requests on one
// key exactly as it decides them one after another. For each limit of
// HotLimits it sends random batches, each at one instant, most of whose
// requests are on one hot key (with mixed costs, peeks, a bad cost now and
// then, and now and then the same key under a second limit of its
// algorithm), to two stores that share a clock: one gets every request
// in a Submit of its own, the other each batch in one Submit. Every reply
// must be identical; after each batch, same (if not nil) compares the two
// stores' state of each key.
func HotRuns(t *testing.T, open Opener, same StateCheck) {
	for li, l := range HotLimits {
		t.Run(fmt.Sprintf("%s-%d", l.Algorithm, li), func(t *testing.T) {
			clock := NewClock(Epoch)
			one, whole := open(t, clock.Now), open(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(li), 13))
			other := l
			other.Rate = max(l.Rate/2, 1)
			if other.Algorithm == engine.SlidingWindow {
				other.Precision = 0
			}
			prefix := fmt.Sprintf("hot:%d:%s", li, l.Algorithm.Short())
			names := []string{"hot", "warm", "cold"}
			for round := range 40 {
				n := 1 + rng.IntN(60)
				reqs := make([]engine.Request, n)
				// Every third batch is one long run: the hot key, one
				// limit and cost, no peek.
				if round%3 == 2 {
					cost := 1 + rng.Int64N(3)
					for i := range reqs {
						reqs[i] = engine.Request{Key: prefix + ":whole:" + names[0], Limit: l, Cost: cost}
					}
				} else {
					for i := range reqs {
						key := names[0]
						if rng.IntN(5) == 0 {
							key = names[1+rng.IntN(2)]
						}
						lim := l
						if rng.IntN(15) == 0 {
							lim = other
						}
						cost := int64(1)
						if rng.IntN(3) == 0 {
							cost = rng.Int64N(lim.Capacity()/3 + 2)
						}
						if rng.IntN(40) == 0 {
							cost = -1
						}
						reqs[i] = engine.Request{Key: prefix + ":whole:" + key, Limit: lim, Cost: cost, Peek: rng.IntN(6) == 0}
					}
				}
				got := make([]engine.Result, n)
				if err := engine.Wait(whole, reqs, got, time.Time{}); err != nil {
					t.Fatalf("round %d: whole batch: %v", round, err)
				}
				for i := range reqs {
					want := make([]engine.Result, 1)
					alone := reqs[i]
					alone.Key = prefix + ":one:" + alone.Key[len(prefix+":whole:"):]
					if err := engine.Wait(one, []engine.Request{alone}, want, time.Time{}); err != nil {
						t.Fatalf("round %d, request %d: alone: %v", round, i, err)
					}
					if msg := diff(want[0], got[i]); msg != "" {
						t.Fatalf("round %d, request %d of %d (%s cost %d peek %v, limit %+v): alone / in the batch: %s",
							round, i, n, reqs[i].Key, reqs[i].Cost, reqs[i].Peek, reqs[i].Limit, msg)
					}
				}
				if same != nil {
					for _, k := range names {
						same(t, one, whole, l.Algorithm, prefix+":one:"+k, prefix+":whole:"+k, clock.Now())
					}
				}
				switch rng.IntN(4) {
				case 0: // the same instant
				case 1:
					clock.Advance(time.Duration(rng.Int64N(int64(l.Period)/l.Rate+1)) / time.Microsecond * time.Microsecond)
				default:
					clock.Advance(time.Duration(rng.Int64N(int64(l.Period))) / time.Microsecond * time.Microsecond)
				}
			}
		})
	}
}

// HotPolicies are the policies HotMultiRuns tries: limits of algorithms
// of their own, whose states a store may keep from one request on a key to
// the next, with whole and fractional intervals and capacities small
// enough that a batch refuses in the middle of a key's run; and one whose
// two limits share an algorithm, whose states it may not.
var HotPolicies = [][]engine.NamedLimit{
	{
		{Name: "burst", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 7, Period: time.Second, Burst: 12}},
		{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 30, Period: time.Minute}},
	},
	{
		{Name: "rate", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1000, Period: time.Second, Burst: 25}},
		{Name: "window", Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 40, Period: time.Second, Precision: 4}},
		{Name: "log", Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 35, Period: 700 * time.Millisecond}},
	},
	{
		{Name: "drip", Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 30, Period: time.Second, Burst: 9}},
		{Name: "hourly", Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 50, Period: time.Hour}},
	},
	{
		{Name: "second", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}},
		{Name: "minute", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 40, Period: time.Minute, Burst: 40}},
	},
}

// MultiStateCheck compares the state store a keeps for limit l of keyA
// with the state store b keeps for it on keyB; now is the pinned clock's
// time.
type MultiStateCheck func(t *testing.T, a, b engine.Store, l engine.NamedLimit, keyA, keyB string, now time.Time)

// HotMultiRuns is HotRuns for policies of several limits: for each of
// HotPolicies it sends random batches, each at one instant, most of whose
// requests are on one hot key under the policy (with mixed costs, peeks, a
// bad cost now and then, now and then the policy with other rates under
// the same names, as a reload leaves it, and now and then a single-limit
// request on the key), to two stores that share a clock: one gets every
// request in a Submit of its own, the other each batch in one Submit.
// Every reply, and every limit's own, must be identical; after each batch,
// same (if not nil) compares the two stores' state of each limit of each
// key.
func HotMultiRuns(t *testing.T, open Opener, same MultiStateCheck) {
	for pi, policy := range HotPolicies {
		t.Run(fmt.Sprintf("policy-%d", pi), func(t *testing.T) {
			clock := NewClock(Epoch)
			one, whole := open(t, clock.Now), open(t, clock.Now)
			rng := rand.New(rand.NewPCG(uint64(pi), 17))
			reloaded := slices.Clone(policy)
			for j := range reloaded {
				reloaded[j].Limit.Rate = max(reloaded[j].Limit.Rate/2, 1)
			}
			capacity := (&engine.Request{Limits: policy}).Capacity()
			prefix := fmt.Sprintf("hotmulti:%d", pi)
			names := []string{"hot", "warm", "cold"}
			for round := range 40 {
				n := 1 + rng.IntN(60)
				reqs := make([]engine.Request, n)
				for i := range reqs {
					r := engine.Request{Key: names[0], Limits: policy, Cost: 1}
					// Every third batch is one long run: the hot key, the
					// policy, one cost, no peek.
					if round%3 == 2 {
						r.Cost = 1 + int64(round%4)
					} else {
						if rng.IntN(5) == 0 {
							r.Key = names[1+rng.IntN(2)]
						}
						if rng.IntN(15) == 0 {
							r.Limits = reloaded
						}
						if rng.IntN(3) == 0 {
							r.Cost = rng.Int64N(capacity/3 + 2)
						}
						if rng.IntN(40) == 0 {
							r.Cost = -1
						}
						r.Peek = rng.IntN(6) == 0
						if rng.IntN(10) == 0 {
							r.Limits, r.Limit = nil, policy[0].Limit
						}
					}
					r.Key = prefix + ":whole:" + r.Key
					if r.Multi() {
						r.Detail = make([]engine.Decision, len(r.Limits))
					}
					reqs[i] = r
				}
				got := make([]engine.Result, n)
				if err := engine.Wait(whole, reqs, got, time.Time{}); err != nil {
					t.Fatalf("round %d: whole batch: %v", round, err)
				}
				for i := range reqs {
					alone := reqs[i]
					alone.Key = prefix + ":one:" + alone.Key[len(prefix+":whole:"):]
					if alone.Multi() {
						alone.Detail = make([]engine.Decision, len(alone.Limits))
					}
					want := make([]engine.Result, 1)
					if err := engine.Wait(one, []engine.Request{alone}, want, time.Time{}); err != nil {
						t.Fatalf("round %d, request %d: alone: %v", round, i, err)
					}
					if msg := diff(want[0], got[i]); msg != "" {
						t.Fatalf("round %d, request %d of %d (%s cost %d peek %v, limits %+v): alone / in the batch: %s",
							round, i, n, reqs[i].Key, reqs[i].Cost, reqs[i].Peek, reqs[i].Limits, msg)
					}
					for j := range alone.Detail {
						if want[0].Err == nil && alone.Detail[j] != reqs[i].Detail[j] {
							t.Fatalf("round %d, request %d of %d, limit %s: alone / in the batch:\n  %s\n  %s",
								round, i, n, alone.Limits[j].Name, Format(alone.Detail[j]), Format(reqs[i].Detail[j]))
						}
					}
				}
				if same != nil {
					for _, k := range names {
						for _, l := range policy {
							same(t, one, whole, l, prefix+":one:"+k, prefix+":whole:"+k, clock.Now())
						}
					}
				}
				switch rng.IntN(4) {
				case 0: // the same instant
				case 1:
					clock.Advance(time.Duration(rng.Int64N(int64(50*time.Millisecond))) / time.Microsecond * time.Microsecond)
				default:
					clock.Advance(time.Duration(rng.Int64N(int64(2*time.Second))) / time.Microsecond * time.Microsecond)
				}
			}
		})
	}
}
