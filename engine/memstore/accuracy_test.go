package memstore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
)

// TestRateSweep: the bucket algorithms admit rate × time within one unit
// at every rate, whether or not its interval is a whole number of µs.
func TestRateSweep(t *testing.T) {
	enginetest.Sweep(t, openMemory)
}

// TestSlidingWorstCase: in any true sliding period the sliding window
// counter admits at most 2×limit-1, whatever its precision, and its worst
// case reaches that (see docs/commands.md, RL.SLIDING).
func TestSlidingWorstCase(t *testing.T) {
	for _, n := range []int64{1, 4, 10} {
		if got := enginetest.SlidingWorstCase(t, openMemory, 50, time.Second, n); got != 99 {
			t.Errorf("precision %d: worst case admits %d in a true sliding second; want 2×50-1 = 99", n, got)
		}
	}
}

// burstyStream is the arrival times of a stream at about twice a limit of
// 50 a second, in alternating heavy (180/s) and quiet (20/s) stretches of
// 100 ms, for 12 s, on each of keys keys, each key's stretches starting at
// its own phase: random arrivals, seeded.
func burstyStream(keys int) [][]time.Duration {
	rng := rand.New(rand.NewPCG(17, 2026))
	out := make([][]time.Duration, keys)
	for k := range out {
		phase := time.Duration(rng.Int64N(int64(200 * time.Millisecond)))
		for at := time.Duration(0); at < 12*time.Second; {
			rate := 20.0
			if (at+phase)%(200*time.Millisecond) < 100*time.Millisecond {
				rate = 180
			}
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second)).Truncate(time.Microsecond)
			out[k] = append(out[k], at)
		}
	}
	return out
}

// burstyFigures runs the stream through a store with limit l and returns
// the share of admitted requests above the limit in the true one-second
// period ending at them, and the most any such period held.
func burstyFigures(t *testing.T, s engine.Store, clock *enginetest.Clock, l engine.Limit, stream [][]time.Duration) (float64, int) {
	type arrival struct {
		at  time.Duration
		key int
	}
	var all []arrival
	for k, ats := range stream {
		for _, at := range ats {
			all = append(all, arrival{at, k})
		}
	}
	slices.SortStableFunc(all, func(a, b arrival) int { return int(a.at - b.at) })
	start := clock.Now()
	admitted := make([][]time.Time, len(stream))
	res := make([]engine.Result, 1)
	for _, a := range all {
		clock.Advance(start.Add(a.at).Sub(clock.Now()))
		req := engine.Request{Key: fmt.Sprintf("bursty:%v:%d:%d", l.Algorithm, l.Precision, a.key), Limit: l, Cost: 1}
		if err := engine.Wait(s, []engine.Request{req}, res, time.Time{}); err != nil || res[0].Err != nil {
			t.Fatalf("Submit: %v %v", err, res[0].Err)
		}
		if res[0].Decision.Allowed {
			admitted[a.key] = append(admitted[a.key], clock.Now())
		}
	}
	above, total, most := 0, 0, 0
	for _, ts := range admitted {
		a, m := enginetest.TrueWindowMax(ts, l.Period, int(l.Rate))
		above, total, most = above+a, total+len(ts), max(most, m)
	}
	return float64(above) / float64(total), most
}

// TestSlidingBursty measures the sliding window counter under bursty
// traffic at each precision, against the sliding log on the same stream:
// finer sub-windows admit less above the limit, and no precision passes
// the 2×limit-1 bound.
func TestSlidingBursty(t *testing.T) {
	stream := burstyStream(10)
	type figure struct {
		name  string
		share float64
		most  int
	}
	var figs []figure
	for _, l := range []engine.Limit{
		{Algorithm: engine.SlidingWindow, Rate: 50, Period: time.Second},
		{Algorithm: engine.SlidingWindow, Rate: 50, Period: time.Second, Precision: 4},
		{Algorithm: engine.SlidingWindow, Rate: 50, Period: time.Second, Precision: 10},
		{Algorithm: engine.SlidingLog, Rate: 50, Period: time.Second},
	} {
		clock := enginetest.NewClock(enginetest.Epoch)
		share, most := burstyFigures(t, openMemory(t, clock.Now), clock, l, stream)
		name := fmt.Sprintf("%v, precision %d", l.Algorithm, max(l.Precision, 1))
		if l.Algorithm == engine.SlidingLog {
			name = l.Algorithm.String()
		}
		figs = append(figs, figure{name, share, most})
		t.Logf("%-30s above 50 in their true second: %5.2f%% of admitted; worst second %d", name, 100*share, most)
		if most > 99 {
			t.Errorf("%s: a true second held %d; the bound is 99", name, most)
		}
	}
	if figs[3].share != 0 || figs[3].most != 50 {
		t.Errorf("the sliding log admitted above its limit: %+v", figs[3])
	}
	for i := 1; i < 3; i++ {
		if figs[i].share >= figs[i-1].share || figs[i].most > figs[i-1].most {
			t.Errorf("%s (%.2f%%, worst %d) is no closer than %s (%.2f%%, worst %d)",
				figs[i].name, 100*figs[i].share, figs[i].most, figs[i-1].name, 100*figs[i-1].share, figs[i-1].most)
		}
	}
}
