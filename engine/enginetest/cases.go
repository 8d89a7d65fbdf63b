package enginetest

import (
	"time"

	"github.com/sluice-rl/sluice/engine"
)

const (
	ms = time.Millisecond
	us = time.Microsecond
)

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
		// 3 a second is one token every 333333⅓ µs: three of them take
		// exactly a second, and the next is due a third of a µs after
		// 1333333 µs, so 1 µs late rather than early.
		Name:  "token_bucket/fractional-interval",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 3, Period: time.Second, Burst: 3},
		Steps: []Step{
			{Cost: 3, Want: allow(3, 0, time.Second)},
			{Advance: 333333 * us, Cost: 1, Want: refuse(3, 0, 1*us, 666667*us)},
			{Advance: 1 * us, Cost: 1, Want: allow(3, 0, 1000000*us)},
			{Advance: 999999 * us, Cost: 0, Want: allow(3, 2, 1*us)},
			{Advance: 1 * us, Cost: 0, Want: allow(3, 3, 0)},
		},
	},
	{
		// GCRA at 7 a second, burst 6: one arrival every 142857⅐ µs, so
		// seven take exactly a second, and the next is due ⅐ µs after
		// 142857 µs: 1 µs late rather than early.
		Name:  "gcra/fractional-interval",
		Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 7, Period: time.Second, Burst: 6},
		Steps: []Step{
			{Cost: 7, Want: allow(7, 0, time.Second)},
			{Advance: 142857 * us, Cost: 1, Want: refuse(7, 0, 1*us, 857143*us)},
			{Advance: 1 * us, Cost: 1, Want: allow(7, 0, 1000000*us)},
			// 857142⁶⁄₇ µs is exactly six intervals.
			{Advance: 857142 * us, Cost: 0, Want: allow(7, 6, 142858*us)},
		},
	},
	{
		// 600 a ms drains one unit every 1⅔ µs: a full queue of 1000
		// takes 1666⅔ µs, and 50 µs drain 30 units, not 50.
		Name:  "leaky_bucket/fractional-interval",
		Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 600, Period: ms, Burst: 1000},
		Steps: []Step{
			{Cost: 1000, Want: allow(1000, 0, 1667*us)},
			{Advance: 50 * us, Cost: 0, Want: delayed(allow(1000, 30, 1617*us), 1617*us)},
			{Cost: 31, Want: refuse(1000, 30, 2*us, 1617*us)},
			{Cost: 30, Want: delayed(allow(1000, 0, 1667*us), 1617*us)},
		},
	},
	// A limit lowered on a live key answers remaining 0: it leaves more in
	// use than it allows, but a client reads remaining as "how many more",
	// never below zero (only a charge's own reply says how far over).
	// Raising it again gives the room back.
	{
		Name:  "fixed_window/limit-changes",
		Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Hour},
		Steps: []Step{
			{Cost: 10, Want: allow(10, 0, time.Hour)},
			{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Hour}, Cost: 1, Want: refuse(2, 0, time.Hour, time.Hour)},
			{Cost: 0, Peek: true, Want: refuse(2, 0, time.Hour, time.Hour)},
			{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 20, Period: time.Hour}, Cost: 1, Want: allow(20, 9, time.Hour)},
		},
	},
	{
		Name:  "sliding_log/limit-changes",
		Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 10, Period: time.Minute},
		Steps: []Step{
			{Cost: 10, Want: allow(10, 0, time.Minute)},
			// 8 of the 10 units must age out: all ten go at once.
			{Advance: 10 * time.Second, Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 3, Period: time.Minute},
				Cost: 1, Want: refuse(3, 0, 50*time.Second, 50*time.Second)},
			{Cost: 0, Peek: true, Want: refuse(3, 0, 50*time.Second, 50*time.Second)},
			{Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 20, Period: time.Minute}, Cost: 5, Want: allow(20, 5, time.Minute)},
		},
	},
	{
		Name:  "sliding_window/limit-changes",
		Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Second},
		Steps: []Step{
			{Cost: 10, Want: allow(10, 0, 2*time.Second)},
			// 3 fit once the 10 weigh 3: 300 ms before the next window ends.
			{Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 4, Period: time.Second}, Cost: 1, Want: refuse(4, 0, 1700*ms, 2*time.Second)},
			{Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 30, Period: time.Second}, Cost: 1, Want: allow(30, 19, 2*time.Second)},
		},
	},
	{
		Name:  "token_bucket/limit-changes",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 10},
		Steps: []Step{
			{Cost: 10, Want: allow(10, 0, 10*time.Second)},
			{Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 3}, Cost: 1, Want: refuse(3, 0, 8*time.Second, 10*time.Second)},
			{Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 20}, Cost: 1, Want: allow(20, 9, 11*time.Second)},
		},
	},
	{
		Name:  "leaky_bucket/limit-changes",
		Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: time.Second, Burst: 10},
		Steps: []Step{
			{Cost: 10, Want: allow(10, 0, 10*time.Second)},
			{Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: time.Second, Burst: 3}, Cost: 1, Want: refuse(3, 0, 8*time.Second, 10*time.Second)},
			{Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: time.Second, Burst: 20}, Cost: 1, Want: delayed(allow(20, 9, 11*time.Second), 10*time.Second)},
		},
	},
	{
		Name:  "gcra/limit-changes",
		Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Second, Burst: 9},
		Steps: []Step{
			{Cost: 10, Want: allow(10, 0, 10*time.Second)},
			{Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Second, Burst: 2}, Cost: 1, Want: refuse(3, 0, 8*time.Second, 10*time.Second)},
			{Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Second, Burst: 19}, Cost: 1, Want: allow(20, 9, 11*time.Second)},
		},
	},
	{
		// A token bucket's rate changes too: the state written at 3 a
		// second (a remainder in thirds of a µs) is read at 7 a second,
		// rounded up, never younger than it was.
		Name:  "token_bucket/rate-changes",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 3, Period: time.Second, Burst: 3},
		Steps: []Step{
			{Cost: 1, Want: allow(3, 2, 333334*us)},
			{Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 7, Period: time.Second, Burst: 7}, Cost: 0,
				Want: allow(7, 4, 333334*us)},
			{Cost: 1, Want: allow(7, 3, 476191*us)},
		},
	},
	{
		Name:  "sliding_window/precision",
		Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Second, Precision: 4},
		Steps: []Step{
			// Sub-windows of 250 ms: 10 late in the first.
			{Advance: 240 * ms, Cost: 10, Want: allow(10, 0, 1010*ms)},
			// Inside the period in full until 1 s; then they weigh less as
			// the fifth sub-window goes on: room for 4 at 40% of it.
			{Advance: 760 * ms, Cost: 4, Want: refuse(10, 0, 100*ms, 250*ms)},
			{Advance: 100 * ms, Cost: 4, Want: allow(10, 0, 1150*ms)},
			// Another precision is another state: it starts fresh.
			{Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Second, Precision: 10}, Cost: 1, Want: allow(10, 9, 1100*ms)},
		},
	},
	{
		Name:  "invalid/precision",
		Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Second, Precision: 3},
		Steps: []Step{{Cost: 1, WantErr: "precision"}},
	},
	{
		Name:  "invalid/precision-elsewhere",
		Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Second, Precision: 2},
		Steps: []Step{{Cost: 1, WantErr: "precision"}},
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

// ChargeCases are charges: costs known only after the work, taken even
// over the limit (engine's charge). Every expectation was worked out by
// hand from engine/charge.go.
var ChargeCases = []Case{
	{
		// 10 a minute. A charge of 25 is taken as far as a debt of one
		// limit (20 counted): every request is refused until the window
		// ends, as the peer's INCRBY past its limit refuses.
		Name:  "fixed_window/charge",
		Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Minute},
		Steps: []Step{
			{Cost: 0, Want: allow(10, 10, 0)},
			{Cost: 25, Charge: true, Want: refuse(10, -10, time.Minute, time.Minute)},
			{Advance: 30 * time.Second, Cost: 1, Want: refuse(10, 0, 30*time.Second, 30*time.Second)},
			{Cost: 0, Peek: true, Want: refuse(10, 0, 30*time.Second, 30*time.Second)},
			{Advance: 30 * time.Second, Cost: 1, Want: allow(10, 9, time.Minute)},
			// One that fits is an admission; one that does not is taken.
			{Cost: 4, Charge: true, Want: allow(10, 5, time.Minute)},
			{Cost: 8, Charge: true, Want: refuse(10, -3, time.Minute, time.Minute)},
			// A charge of nothing makes no debt: its reply reads as a look's.
			{Cost: 0, Charge: true, Want: refuse(10, 0, time.Minute, time.Minute)},
			{Reset: true},
			{Cost: 10, Want: allow(10, 0, time.Minute)},
		},
	},
	{
		// 1 a second, capacity 10: a charge of 15 owes 5 tokens, 15 s to
		// refill in all; a request of 1 fits once 11 s of them are left.
		Name:  "token_bucket/charge",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 10},
		Steps: []Step{
			{Cost: 15, Charge: true, Want: refuse(10, -5, 6*time.Second, 15*time.Second)},
			{Advance: 5 * time.Second, Cost: 1, Want: refuse(10, 0, time.Second, 10*time.Second)},
			{Advance: time.Second, Cost: 1, Want: allow(10, 0, 10*time.Second)},
			// 100 is taken as far as a debt of the capacity: 20 s; then
			// nothing more can be owed.
			{Cost: 100, Charge: true, Want: refuse(10, -10, 11*time.Second, 20*time.Second)},
			{Cost: 5, Charge: true, Want: refuse(10, -10, 11*time.Second, 20*time.Second)},
			{Advance: 11 * time.Second, Cost: 1, Want: allow(10, 0, 10*time.Second)},
		},
	},
	{
		Name:  "gcra/charge",
		Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Second, Burst: 4},
		Steps: []Step{
			{Cost: 7, Charge: true, Want: refuse(5, -2, 3*time.Second, 7*time.Second)},
			{Advance: 2 * time.Second, Cost: 1, Want: refuse(5, 0, time.Second, 5*time.Second)},
			{Advance: time.Second, Cost: 1, Want: allow(5, 0, 5*time.Second)},
		},
	},
	{
		// The leaky bucket's charge is work already done: it waits for
		// nothing, but later requests queue behind it.
		Name:  "leaky_bucket/charge",
		Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: time.Second, Burst: 3},
		Steps: []Step{
			{Cost: 1, Want: allow(3, 2, time.Second)},
			{Cost: 3, Charge: true, Want: refuse(3, -1, 2*time.Second, 4*time.Second)},
			{Advance: 2 * time.Second, Cost: 1, Charge: true, Want: allow(3, 0, 3*time.Second)},
			{Advance: time.Second, Cost: 1, Want: delayed(allow(3, 0, 3*time.Second), 2*time.Second)},
		},
	},
	{
		// 10 a second: a charge of 15 counts in the current window, and
		// weighs in the next as the previous window leaves it.
		Name:  "sliding_window/charge",
		Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Second},
		Steps: []Step{
			{Cost: 15, Charge: true, Want: refuse(10, -5, 1400*ms, 2*time.Second)},
			{Advance: time.Second, Cost: 1, Want: refuse(10, 0, 400*ms, time.Second)},
			{Advance: 400 * ms, Cost: 1, Want: allow(10, 0, 1600*ms)},
		},
	},
	{
		// A refusal before a charge, which a deny cache remembers: the
		// charge is still taken, and says how far over; the refusals
		// after it answer remaining 0, as every request but a charge.
		Name:  "fixed_window/charge-after-refusal",
		Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Minute},
		Steps: []Step{
			{Cost: 10, Want: allow(10, 0, time.Minute)},
			{Cost: 1, Want: refuse(10, 0, time.Minute, time.Minute)},
			{Cost: 5, Charge: true, Want: refuse(10, -5, time.Minute, time.Minute)},
			{Cost: 1, Want: refuse(10, 0, time.Minute, time.Minute)},
			{Advance: time.Second, Cost: 2, Want: refuse(10, 0, 59*time.Second, 59*time.Second)},
		},
	},
	{
		// Over the budget, a bucket refills its debt first: its refusals
		// answer remaining 0 until then, and a charge of 1 says how far
		// over it still is.
		Name:  "token_bucket/charge-after-refusal",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 10},
		Steps: []Step{
			{Cost: 10, Want: allow(10, 0, 10*time.Second)},
			{Cost: 1, Want: refuse(10, 0, time.Second, 10*time.Second)},
			{Cost: 3, Charge: true, Want: refuse(10, -3, 4*time.Second, 13*time.Second)},
			{Cost: 1, Want: refuse(10, 0, 4*time.Second, 13*time.Second)},
			{Advance: time.Second, Cost: 1, Want: refuse(10, 0, 3*time.Second, 12*time.Second)},
			{Cost: 1, Charge: true, Want: refuse(10, -3, 4*time.Second, 13*time.Second)},
		},
	},
	{
		Name:  "sliding_log/charge",
		Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 10, Period: time.Second},
		Steps: []Step{
			{Cost: 5, Charge: true, WantErr: "charge"},
			{Cost: 5, Want: allow(10, 5, time.Second)},
		},
	},
	{
		Name:  "token_bucket/charge-bad",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 10},
		Steps: []Step{
			{Cost: 1, Charge: true, Peek: true, WantErr: "charge"},
			{Cost: engine.MaxRate + 1, Charge: true, WantErr: "cost"},
			{Cost: -1, Charge: true, WantErr: "cost"},
			{Cost: engine.MaxRate, Charge: true, Want: refuse(10, -10, 11*time.Second, 20*time.Second)},
		},
	},
}
