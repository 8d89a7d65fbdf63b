package enginetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Scenario is a random limit and a sequence of operations on a few keys,
// decoded from fuzz input so that `go test -fuzz` can explore it.
type Scenario struct {
	Limit engine.Limit
	Ops   []Op
}

// Op is one operation of a Scenario.
type Op struct {
	Advance time.Duration // may be negative: the clock stepping back
	Key     int           // which of the scenario's keys
	Cost    int64         // may exceed the capacity or be negative: bad input
	Peek    bool
	Reset   bool
}

// NewScenario derives a scenario from seed bytes. Parameters stay small
// enough that interesting things (refusals, refills, window edges) happen
// within a few operations, and include invalid ones now and then.
func NewScenario(seed []byte) Scenario {
	var s [32]byte
	copy(s[:], seed)
	extra := uint64(len(seed))
	for i, b := range seed {
		extra = extra*131 + uint64(b) + uint64(i)
	}
	rng := rand.New(rand.NewChaCha8(s))
	rng = rand.New(rand.NewPCG(rng.Uint64(), extra))

	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond,
		time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	l := engine.Limit{
		Algorithm: engine.Algorithms[rng.IntN(len(engine.Algorithms))],
		Rate:      1 + rng.Int64N(12),
		Period:    periods[rng.IntN(len(periods))],
	}
	if rng.IntN(8) == 0 {
		l.Period += time.Duration(rng.Int64N(int64(time.Second)))
	}
	switch l.Algorithm {
	case engine.TokenBucket, engine.LeakyBucket:
		l.Burst = 1 + rng.Int64N(10)
	case engine.GCRA:
		l.Burst = rng.Int64N(10)
	}
	if rng.IntN(6) == 0 {
		// Large numbers: rates whose interval is a fraction of a µs or
		// close to one, long periods, capacities and costs in the millions,
		// so that products pass 2^53 and the scripts' exact paths run.
		large := []struct {
			rate   int64
			period time.Duration
		}{{700_000, time.Second}, {600, time.Millisecond}, {999_983, time.Hour}, {7, time.Second},
			{1_000_000, time.Second}, {86_399_999, 24 * time.Hour}, {123_457, time.Minute}}
		x := large[rng.IntN(len(large))]
		l.Rate, l.Period = x.rate, x.period
		switch l.Algorithm {
		case engine.TokenBucket, engine.LeakyBucket, engine.GCRA:
			l.Burst = 1 + rng.Int64N(100*x.rate)
		case engine.SlidingLog:
			l.Rate = min(l.Rate, engine.MaxLogRate)
		}
	}
	if l.Algorithm == engine.SlidingWindow && rng.IntN(2) == 0 {
		for _, n := range rng.Perm(100) {
			if us := int64(l.Period / time.Microsecond); n > 1 && us%int64(n) == 0 {
				l.Precision = int64(n)
				break
			}
		}
	}
	if rng.IntN(40) == 0 {
		l.Rate = 0 // invalid now and then
	}
	sc := Scenario{Limit: l}
	n := 5 + rng.IntN(60)
	for range n {
		op := Op{Key: rng.IntN(3), Cost: rng.Int64N(l.Capacity() + 2), Peek: rng.IntN(5) == 0}
		switch rng.IntN(6) {
		case 0: // same instant
		case 1: // a little
			op.Advance = time.Duration(rng.Int64N(int64(l.Period)/max(l.Rate, 1)+1)) / time.Microsecond * time.Microsecond
		case 2: // up to two periods
			op.Advance = time.Duration(rng.Int64N(2*int64(l.Period))) / time.Microsecond * time.Microsecond
		case 3: // one microsecond
			op.Advance = time.Microsecond
		case 4: // up to a window edge exactly
			op.Advance = -1
		default:
			op.Advance = time.Duration(rng.Int64N(1000)) * time.Microsecond
		}
		if rng.IntN(50) == 0 {
			op.Advance = -time.Duration(rng.Int64N(int64(time.Second)))
			op.Advance = op.Advance / time.Microsecond * time.Microsecond
		}
		op.Reset = rng.IntN(40) == 0
		if rng.IntN(30) == 0 {
			op.Cost = -1
		}
		sc.Ops = append(sc.Ops, op)
	}
	return sc
}

// Differential runs seed's scenario against two stores sharing clock and
// fails at the first decision where they differ. Keys are made unique with
// prefix, so one backing server may serve many scenarios.
func Differential(tb testing.TB, a, b engine.Store, clock *Clock, prefix string, seed []byte) {
	tb.Helper()
	sc := NewScenario(seed)
	ctx := context.Background()
	keys := []string{prefix + ":0", prefix + ":1", prefix + ":2"}
	for i, op := range sc.Ops {
		adv := op.Advance
		if adv == -1 && sc.Limit.Period > 0 { // to the next window edge
			p := sc.Limit.Period
			adv = p - time.Duration(clock.Now().UnixNano())%p
		}
		clock.Advance(adv)
		if op.Reset {
			ea, eb := a.Reset(ctx, keys[op.Key]), b.Reset(ctx, keys[op.Key])
			if ea != nil || eb != nil {
				tb.Fatalf("op %d: Reset: %v / %v", i, ea, eb)
			}
			continue
		}
		req := []engine.Request{{Key: keys[op.Key], Limit: sc.Limit, Cost: op.Cost, Peek: op.Peek}}
		ra, rb := make([]engine.Result, 1), make([]engine.Result, 1)
		if err := a.Decide(ctx, req, ra); err != nil {
			tb.Fatalf("op %d: first store: %v", i, err)
		}
		if err := b.Decide(ctx, req, rb); err != nil {
			tb.Fatalf("op %d: second store: %v", i, err)
		}
		if msg := diff(ra[0], rb[0]); msg != "" {
			tb.Fatalf("op %d of scenario %+v\n(%+v at %s): %s", i, sc.Limit, op, clock.Now().Format(time.RFC3339Nano), msg)
		}
	}
}

func diff(a, b engine.Result) string {
	if (a.Err == nil) != (b.Err == nil) {
		return fmt.Sprintf("errors differ: %v / %v", a.Err, b.Err)
	}
	if a.Err != nil {
		var pa, pb *engine.ParamError
		if errors.As(a.Err, &pa) && errors.As(b.Err, &pb) && pa.Param == pb.Param {
			return ""
		}
		if a.Err.Error() == b.Err.Error() {
			return ""
		}
		return fmt.Sprintf("errors differ: %v / %v", a.Err, b.Err)
	}
	if a.Decision != b.Decision {
		return "decisions differ:\n  " + Format(a.Decision) + "\n  " + Format(b.Decision)
	}
	return ""
}
