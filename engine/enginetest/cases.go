package enginetest

import (
	"time"

	"github.com/sluice-rl/sluice/engine"
)

const ms = time.Millisecond

// allow and refuse build expected decisions.
func allow(limit, remaining int64, reset time.Duration) engine.Decision {
	return engine.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func refuse(limit, remaining int64, retry, reset time.Duration) engine.Decision {
	return engine.Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func delayed(d engine.Decision, delay time.Duration) engine.Decision {
	d.Delay = delay
	return d
}

// Cases is the conformance table. Every expectation was worked out by hand
// from the algorithm's definition (see engine/algorithms.go), not recorded
// from a store's output.
var Cases = []Case{
	{
		// redis-cell's own test vectors for CL.THROTTLE: max_burst 4, 1 per
		// second, so limit 5 (engine takes the oversized request as bad input;
		// respserver answers it the way redis-cell does).
		Name:  "gcra/redis-cell",
		Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Second, Burst: 4},
		Steps: []Step{
			{Cost: 6, WantErr: "cost"},
			{Cost: 1, Want: allow(5, 4, 1*time.Second)},
			{Cost: 1, Want: allow(5, 3, 2*time.Second)},
			{Cost: 1, Want: allow(5, 2, 3*time.Second)},
			{Cost: 1, Want: allow(5, 1, 4*time.Second)},
			{Cost: 1, Want: allow(5, 0, 5*time.Second)},
			{Cost: 1, Want: refuse(5, 0, 1*time.Second, 5*time.Second)},
			{Advance: 3000 * ms, Cost: 1, Want: allow(5, 2, 3000*ms)},
			{Advance: 100 * ms, Cost: 1, Want: allow(5, 1, 3900*ms)},
			{Advance: 900 * ms, Cost: 1, Want: allow(5, 1, 4000*ms)},
			{Advance: 4000 * ms, Cost: 1, Want: allow(5, 4, 1000*ms)},
			{Advance: 1500 * ms, Cost: 1, Want: allow(5, 4, 1000*ms)},
			{Cost: 0, Want: allow(5, 4, 1000*ms)},
			{Cost: 2, Want: allow(5, 2, 3000*ms)},
			{Cost: 5, Want: refuse(5, 2, 3000*ms, 3000*ms)},
		},
	},
	{
		// redis-cell's README: CL.THROTTLE user123 15 30 60 1 → 0 16 15 -1 2.
		Name:  "gcra/redis-cell-readme",
		Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 30, Period: 60 * time.Second, Burst: 15},
		Steps: []Step{{Cost: 1, Want: allow(16, 15, 2*time.Second)}},
	},
	{
		Name:  "gcra/peek-consumes-nothing",
		Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 0},
		Steps: []Step{
			{Cost: 1, Peek: true, Want: allow(1, 0, 100*ms)},
			{Cost: 1, Peek: true, Want: allow(1, 0, 100*ms)},
			{Cost: 1, Want: allow(1, 0, 100*ms)},
			{Cost: 1, Peek: true, Want: refuse(1, 0, 100*ms, 100*ms)},
			{Advance: 40 * ms, Cost: 1, Want: refuse(1, 0, 60*ms, 60*ms)},
			{Advance: 60 * ms, Cost: 1, Want: allow(1, 0, 100*ms)},
			{Reset: true},
			{Cost: 1, Want: allow(1, 0, 100*ms)},
		},
	},
	{
		Name:  "fixed_window",
		Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 3, Period: time.Second},
		Steps: []Step{
			{Advance: 100 * ms, Cost: 1, Want: allow(3, 2, 900*ms)},
			{Cost: 2, Want: allow(3, 0, 900*ms)},
			{Cost: 1, Want: refuse(3, 0, 900*ms, 900*ms)},
			{Cost: 0, Peek: true, Want: allow(3, 0, 900*ms)},
			{Cost: 4, WantErr: "cost"},
			{Cost: -1, WantErr: "cost"},
			{Advance: 900 * ms, Cost: 1, Peek: true, Want: allow(3, 2, 1000*ms)},
			{Cost: 3, Want: allow(3, 0, 1000*ms)},
			{Advance: 999 * ms, Cost: 1, Want: refuse(3, 0, 1*ms, 1*ms)},
			{Reset: true},
			{Cost: 3, Want: allow(3, 0, 1*ms)},
			{Advance: 1 * ms, Cost: 0, Want: allow(3, 3, 0)},
		},
	},
	{
		Name:  "sliding_log",
		Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 3, Period: time.Second},
		Steps: []Step{
			{Cost: 1, Want: allow(3, 2, 1000*ms)},
			{Advance: 200 * ms, Cost: 1, Want: allow(3, 1, 1000*ms)},
			{Advance: 200 * ms, Cost: 2, Want: refuse(3, 1, 600*ms, 800*ms)},
			{Cost: 1, Want: allow(3, 0, 1000*ms)},
			{Advance: 600 * ms, Cost: 1, Want: allow(3, 0, 1000*ms)},
			{Cost: 1, Want: refuse(3, 0, 200*ms, 1000*ms)},
			{Cost: 0, Peek: true, Want: allow(3, 0, 1000*ms)},
			{Advance: 2000 * ms, Cost: 3, Peek: true, Want: allow(3, 0, 1000*ms)},
			{Cost: 0, Want: allow(3, 3, 0)},
		},
	},
	{
		Name:  "sliding_window",
		Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Second},
		Steps: []Step{
			{Advance: 500 * ms, Cost: 4, Want: allow(10, 6, 1500*ms)},
			{Advance: 400 * ms, Cost: 6, Want: allow(10, 0, 1100*ms)},
			// Full: wait for the next window, where ceil(10 × 0.9) = 9 leaves room for 1.
			{Cost: 1, Want: refuse(10, 0, 200*ms, 1100*ms)},
			// Next window, 250ms in: the previous 10 weigh ceil(7.5) = 8.
			{Advance: 350 * ms, Cost: 1, Want: allow(10, 1, 1750*ms)},
			// 2 more fit once the previous window weighs 7: at 300ms.
			{Cost: 2, Want: refuse(10, 1, 50*ms, 1750*ms)},
			{Advance: 50 * ms, Cost: 2, Peek: true, Want: allow(10, 0, 1700*ms)},
			// Two windows later nothing is left.
			{Advance: 1700 * ms, Cost: 1, Want: allow(10, 9, 2000*ms)},
			{Cost: 11, WantErr: "cost"},
		},
	},
	{
		Name:  "token_bucket",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 3},
		Steps: []Step{
			{Cost: 1, Want: allow(3, 2, 1000*ms)},
			{Cost: 2, Want: allow(3, 0, 3000*ms)},
			{Advance: 500 * ms, Cost: 1, Want: refuse(3, 0, 500*ms, 2500*ms)},
			{Advance: 1000 * ms, Cost: 1, Want: allow(3, 0, 2500*ms)},
			{Cost: 1, Peek: true, Want: refuse(3, 0, 500*ms, 2500*ms)},
			{Advance: 8500 * ms, Cost: 3, Want: allow(3, 0, 3000*ms)},
			{Cost: 4, WantErr: "cost"},
			{Reset: true},
			{Cost: 0, Want: allow(3, 3, 0)},
		},
	},
	{
		Name:  "leaky_bucket",
		Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: 100 * ms, Burst: 2},
		Steps: []Step{
			{Cost: 1, Want: allow(2, 1, 100*ms)},
			{Cost: 1, Want: delayed(allow(2, 0, 200*ms), 100*ms)},
			{Cost: 1, Want: refuse(2, 0, 100*ms, 200*ms)},
			{Advance: 150 * ms, Cost: 1, Want: delayed(allow(2, 0, 150*ms), 50*ms)},
			{Cost: 1, Peek: true, Want: refuse(2, 0, 50*ms, 150*ms)},
			{Advance: 850 * ms, Cost: 2, Want: allow(2, 0, 200*ms)},
			{Cost: 3, WantErr: "cost"},
		},
	},
	{
		Name:  "invalid/zero-rate",
		Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 0, Period: time.Second, Burst: 1},
		Steps: []Step{{Cost: 1, WantErr: "rate"}},
	},
	{
		Name:  "invalid/zero-period",
		Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1},
		Steps: []Step{{Cost: 1, WantErr: "period"}},
	},
	{
		Name:  "invalid/window-with-burst",
		Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 5, Period: time.Second, Burst: 2},
		Steps: []Step{{Cost: 1, WantErr: "burst"}},
	},
	{
		Name:  "invalid/more-than-one-per-microsecond",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 2000, Period: time.Millisecond, Burst: 1},
		Steps: []Step{{Cost: 1, WantErr: "rate"}},
	},
	{
		Name:  "invalid/huge-capacity",
		Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: 24 * time.Hour, Burst: 1 << 40},
		Steps: []Step{{Cost: 1, WantErr: "capacity"}},
	},
	{
		Name:  "invalid/log-too-large",
		Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: engine.MaxLogRate + 1, Period: time.Second},
		Steps: []Step{{Cost: 1, WantErr: "limit"}},
	},
}
