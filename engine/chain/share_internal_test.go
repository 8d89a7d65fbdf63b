package chain

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Each algorithm's share, worked by hand: capacities divided and rounded
// down, never below 1; a bucket's refill divided exactly by a longer
// period, or by its rate where that period would pass MaxPeriod.
func TestShareLimit(t *testing.T) {
	µs := time.Microsecond
	most := engine.MaxPeriod.Microseconds()
	for _, tc := range []struct {
		name string
		l    engine.Limit
		n    int64
		want engine.Limit
	}{
		{"one sidecar: the whole limit",
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 300}, 1,
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 300}},
		{"token bucket: capacity and refill divided",
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 300}, 3,
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: 3 * time.Second, Burst: 100}},
		{"token bucket: capacity rounded down",
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 7, Period: time.Second, Burst: 11}, 3,
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 7, Period: 3 * time.Second, Burst: 3}},
		{"token bucket: capacity never below 1",
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 2}, 3,
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: 3 * time.Second, Burst: 1}},
		{"leaky bucket: queue and drain divided",
			engine.Limit{Algorithm: engine.LeakyBucket, Rate: 10, Period: time.Minute, Burst: 10}, 4,
			engine.Limit{Algorithm: engine.LeakyBucket, Rate: 10, Period: 4 * time.Minute, Burst: 2}},
		{"gcra: burst+1 divided",
			engine.Limit{Algorithm: engine.GCRA, Rate: 100, Period: time.Second, Burst: 9}, 3,
			engine.Limit{Algorithm: engine.GCRA, Rate: 100, Period: 3 * time.Second, Burst: 2}},
		{"gcra: one unit at least",
			engine.Limit{Algorithm: engine.GCRA, Rate: 100, Period: time.Second, Burst: 0}, 3,
			engine.Limit{Algorithm: engine.GCRA, Rate: 100, Period: 3 * time.Second, Burst: 0}},
		{"fixed window: limit divided, window kept",
			engine.Limit{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Minute}, 3,
			engine.Limit{Algorithm: engine.FixedWindow, Rate: 33, Period: time.Minute}},
		{"sliding window: precision kept",
			engine.Limit{Algorithm: engine.SlidingWindow, Rate: 7, Period: time.Second, Precision: 10}, 2,
			engine.Limit{Algorithm: engine.SlidingWindow, Rate: 3, Period: time.Second, Precision: 10}},
		{"sliding log: never below 1",
			engine.Limit{Algorithm: engine.SlidingLog, Rate: 1, Period: time.Second}, 5,
			engine.Limit{Algorithm: engine.SlidingLog, Rate: 1, Period: time.Second}},
		{"peer window: its limit divided",
			engine.Limit{Algorithm: engine.PeerWindow, Rate: 10, Period: time.Second}, 3,
			engine.Limit{Algorithm: engine.PeerWindow, Rate: 3, Period: time.Second}},
		{"a period that cannot grow: the rate divided",
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 10, Period: engine.MaxPeriod, Burst: 10}, 2,
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: engine.MaxPeriod, Burst: 5}},
		// floor(1001/2) = 500 µs a unit allows 630,720,000,000 units in
		// MaxPeriod; the share's 1001 µs a unit allows fewer than half.
		{"a slow bucket: capacity held within MaxPeriod",
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 2, Period: 1001 * µs, Burst: most / 500}, 2,
			engine.Limit{Algorithm: engine.TokenBucket, Rate: 2, Period: 2002 * µs, Burst: most / 1001}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.Validate(); err != nil {
				t.Fatalf("the limit: %v", err)
			}
			got := shareLimit(tc.l, tc.n)
			if got != tc.want {
				t.Errorf("shareLimit(%+v, %d) = %+v; want %+v", tc.l, tc.n, got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("the share %+v is invalid: %v", got, err)
			}
		})
	}
}

// Over random valid limits and fleets: each share is valid, n shares hold
// at most the capacity plus n-1 (at most the capacity where it is n or
// more), and n shares of a bucket refill no faster than the limit.
func TestShareLimitBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	algs := []engine.Algorithm{engine.FixedWindow, engine.SlidingLog, engine.SlidingWindow, engine.TokenBucket,
		engine.LeakyBucket, engine.GCRA}
	for i := 0; i < 20_000; i++ {
		l := engine.Limit{Algorithm: algs[rng.IntN(len(algs))], Rate: 1 + rng.Int64N(1000),
			Period: engine.MinPeriod + time.Duration(rng.Int64N(int64(48*time.Hour)))/time.Microsecond*time.Microsecond}
		switch l.Algorithm {
		case engine.TokenBucket, engine.LeakyBucket:
			l.Burst = 1 + rng.Int64N(2000)
		case engine.GCRA:
			l.Burst = rng.Int64N(2000)
		}
		if rng.IntN(10) == 0 {
			l.Period = engine.MaxPeriod - time.Duration(rng.Int64N(int64(time.Hour)))/time.Microsecond*time.Microsecond
		}
		if l.Validate() != nil {
			continue
		}
		n := 1 + rng.Int64N(64)
		s := shareLimit(l, n)
		if err := s.Validate(); err != nil {
			t.Fatalf("shareLimit(%+v, %d) = %+v, invalid: %v", l, n, s, err)
		}
		c, sc := l.Capacity(), s.Capacity()
		if sc < 1 || n*sc > max(c, n) {
			t.Fatalf("shareLimit(%+v, %d): %d shares of %d; the capacity is %d", l, n, n, sc, c)
		}
		switch l.Algorithm {
		case engine.TokenBucket, engine.LeakyBucket, engine.GCRA:
			// n × rate' / period' <= rate / period, in integers.
			if lhs, rhs := n*s.Rate*l.Period.Microseconds(), l.Rate*s.Period.Microseconds(); lhs > rhs && s.Rate > 1 {
				t.Fatalf("shareLimit(%+v, %d) = %+v refills faster than its share", l, n, s)
			}
		}
	}
}
