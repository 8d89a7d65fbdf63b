package enginetest

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// SweepRate is a rate the sweep checks, over a simulated span.
type SweepRate struct {
	Rate   int64
	Period time.Duration
	Span   time.Duration
}

const year = 365 * 24 * time.Hour

// SweepRates are rates whose interval is a whole number of µs and rates
// whose interval is not, from one an hour to one a µs. Each span is long
// enough that an interval rounded to whole µs would be off by more than a
// unit; the longest stays within the Lua scripts' pinned-clock range.
var SweepRates = []SweepRate{
	{3, time.Minute, year},
	{7, time.Second, year},
	{1, time.Hour, 10 * year},
	{600, time.Millisecond, time.Hour},
	{700_000, time.Second, 24 * time.Hour},
	{1_000_000, time.Second, 24 * time.Hour},
}

// sweepSteps is how many times the sweep drains the bucket over a span.
const sweepSteps = 200

// SweepResult is one row of the sweep's table.
type SweepResult struct {
	Algorithm engine.Algorithm
	SweepRate
	Capacity int64
	Admitted int64
	Want     *big.Rat // capacity + rate × span / period
}

// Error is Admitted - Want.
func (r SweepResult) Error() *big.Rat {
	return new(big.Rat).Sub(new(big.Rat).SetInt64(r.Admitted), r.Want)
}

// Sweep drains a token bucket, a leaky bucket and a GCRA limit at each of
// SweepRates, on a pinned clock: sweepSteps times over the span it asks how
// much is left (cost 0) and takes all of it. A bucket drained that way
// admits its capacity, then exactly one unit per interval, so over the span
// it must admit capacity + rate × span / period within one unit. The
// capacity is twice what refills between steps, so the bucket never
// overflows.
func Sweep(t *testing.T, open Opener) []SweepResult {
	var out []SweepResult
	for _, sr := range SweepRates {
		step := sr.Span / sweepSteps
		span := step * sweepSteps
		perStep := new(big.Int).Div(big.NewInt(sr.Rate*int64(step/time.Microsecond)), big.NewInt(int64(sr.Period/time.Microsecond)))
		capacity := 2*perStep.Int64() + 1
		for _, alg := range []engine.Algorithm{engine.TokenBucket, engine.LeakyBucket, engine.GCRA} {
			l := engine.Limit{Algorithm: alg, Rate: sr.Rate, Period: sr.Period, Burst: capacity}
			if alg == engine.GCRA {
				l.Burst = capacity - 1
			}
			name := fmt.Sprintf("%s/%d-per-%v", alg, sr.Rate, sr.Period)
			var admitted int64
			t.Run(name, func(t *testing.T) {
				clock := NewClock(Epoch)
				s := open(t, clock.Now)
				key := "sweep:" + name
				take := func(cost int64, peek bool) engine.Decision {
					t.Helper()
					res := make([]engine.Result, 1)
					if err := engine.Wait(s, []engine.Request{{Key: key, Limit: l, Cost: cost, Peek: peek}}, res, time.Time{}); err != nil || res[0].Err != nil {
						t.Fatalf("Submit: %v %v", err, res[0].Err)
					}
					return res[0].Decision
				}
				for i := 0; i <= sweepSteps; i++ {
					if i > 0 {
						clock.Advance(step)
					}
					left := take(0, true).Remaining
					if left == 0 {
						continue
					}
					if d := take(left, false); !d.Allowed {
						t.Fatalf("step %d: %d units remaining, then refused: %s", i, left, Format(d))
					}
					admitted += left
				}
			})
			r := SweepResult{Algorithm: alg, SweepRate: sr, Capacity: capacity, Admitted: admitted,
				Want: new(big.Rat).Add(new(big.Rat).SetInt64(capacity),
					big.NewRat(sr.Rate*int64(span/time.Microsecond), int64(sr.Period/time.Microsecond)))}
			out = append(out, r)
			if e := r.Error(); e.Cmp(big.NewRat(1, 1)) >= 0 || e.Cmp(big.NewRat(-1, 1)) <= 0 {
				t.Errorf("%s: admitted %d over %v; want %s within one unit (off by %s)",
					name, admitted, span, r.Want.FloatString(2), e.FloatString(2))
			}
		}
	}
	t.Log("\n" + SweepTable(out))
	return out
}

// SweepTable formats the sweep's results as a Markdown table.
func SweepTable(rs []SweepResult) string {
	var b strings.Builder
	b.WriteString("| algorithm | rate | simulated | capacity | admitted | capacity + rate × time | error |\n")
	b.WriteString("| --- | --- | --- | --- | ---: | ---: | ---: |\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d / %v | %v | %d | %d | %s | %s |\n", r.Algorithm, r.Rate, r.Period,
			r.Span/sweepSteps*sweepSteps, r.Capacity, r.Admitted, r.Want.FloatString(2), r.Error().FloatString(2))
	}
	return b.String()
}

// TrueWindowMax returns, for times of admitted units in ascending order,
// how many of them are above limit in the true sliding period (t-p, t]
// ending at each one, and the most any such period holds.
func TrueWindowMax(times []time.Time, p time.Duration, limit int) (above, most int) {
	lo := 0
	for i, at := range times {
		for !times[lo].After(at.Add(-p)) {
			lo++
		}
		n := i - lo + 1
		most = max(most, n)
		if n > limit {
			above++
		}
	}
	return above, most
}

// SlidingWorstCase builds the sliding window counter's worst case for a
// precision, on a pinned clock, and returns the most its admissions put in
// one true sliding period: limit units in the last µs of one sub-window,
// which the estimate counts in full until that sub-window starts to leave
// the period, and then, 2 µs before it has left, as many more as the
// estimate admits, which weighs it at ceil(limit × 2µs / sub-window).
func SlidingWorstCase(t *testing.T, open Opener, limit int64, period time.Duration, precision int64) int {
	clock := NewClock(Epoch)
	s := open(t, clock.Now)
	l := engine.Limit{Algorithm: engine.SlidingWindow, Rate: limit, Period: period, Precision: precision}
	key := fmt.Sprintf("worst:%d:%v:%d", limit, period, precision)
	sub := period / time.Duration(max(precision, 1))
	var admitted []time.Time
	burst := func() {
		t.Helper()
		for {
			res := make([]engine.Result, 1)
			if err := engine.Wait(s, []engine.Request{{Key: key, Limit: l, Cost: 1}}, res, time.Time{}); err != nil || res[0].Err != nil {
				t.Fatalf("Submit: %v %v", err, res[0].Err)
			}
			if !res[0].Decision.Allowed {
				return
			}
			admitted = append(admitted, clock.Now())
		}
	}
	clock.Advance(sub - time.Microsecond)
	burst()
	clock.Advance(period - time.Microsecond)
	burst()
	_, most := TrueWindowMax(admitted, period, int(limit))
	return most
}
