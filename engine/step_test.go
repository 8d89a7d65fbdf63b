package engine_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Step's hand-worked table: each row one request at now (µs) on a state,
// with the decision, the outcome and the state after, worked out from
// the algorithms' definitions (algorithms.go), not from running them.
// The conformance tables (enginetest) check the stores; these check the
// pure step they share, with nothing around it.
func TestStep(t *testing.T) {
	const now = 10_500_000 // 10.5 s after the epoch
	fixed := engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Second}
	token := engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 2}
	leaky := engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2}
	leaky3 := engine.Limit{Algorithm: engine.LeakyBucket, Rate: 3, Period: time.Second, Burst: 2}
	gcra := engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Second}
	slog := engine.Limit{Algorithm: engine.SlidingLog, Rate: 2, Period: time.Second}
	sliding := engine.Limit{Algorithm: engine.SlidingWindow, Rate: 2, Period: time.Second}
	gcra3 := engine.Limit{Algorithm: engine.GCRA, Rate: 3, Period: time.Second} // 333,333⅓ µs a unit
	ms, us := time.Millisecond, time.Microsecond
	for _, tc := range []struct {
		name     string
		st       engine.State
		r        engine.Request
		want     engine.Decision
		out      engine.Outcome
		stAfter  engine.State
		stChange bool // stAfter differs from st
	}{
		{name: "fixed window: first request of the window",
			r:    engine.Request{Limit: fixed, Cost: 1},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * ms},
			out:  engine.Outcome{Write: true, Expires: 11_000_000}, stAfter: engine.State{A: 10_000_000, B: 1}, stChange: true},
		{name: "fixed window: full, refused until the window ends",
			st:      engine.State{A: 10_000_000, B: 2},
			r:       engine.Request{Limit: fixed, Cost: 1},
			want:    engine.Decision{Limit: 2, RetryAfter: 500 * ms, ResetAfter: 500 * ms},
			stAfter: engine.State{A: 10_000_000, B: 2}},
		{name: "fixed window: a peek answers as the request would, writes nothing",
			r:    engine.Request{Limit: fixed, Cost: 1, Peek: true},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * ms}},
		{name: "fixed window: cost 0 looks",
			st:      engine.State{A: 10_000_000, B: 1},
			r:       engine.Request{Limit: fixed},
			want:    engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * ms},
			stAfter: engine.State{A: 10_000_000, B: 1}},
		{name: "fixed window: a state from a later window (clock stepped back) keeps its window",
			st:   engine.State{A: 11_000_000, B: 1},
			r:    engine.Request{Limit: fixed, Cost: 1},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 1500 * ms},
			out:  engine.Outcome{Write: true, Expires: 12_000_000}, stAfter: engine.State{A: 11_000_000, B: 2}, stChange: true},
		{name: "token bucket: one of two tokens",
			r:    engine.Request{Limit: token, Cost: 1},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Second},
			out:  engine.Outcome{Write: true, Expires: now + 1_000_000}, stAfter: engine.State{A: now + 1_000_000, C: 1}, stChange: true},
		{name: "token bucket: two more than the one left",
			st:      engine.State{A: now + 1_000_000, C: 1},
			r:       engine.Request{Limit: token, Cost: 2},
			want:    engine.Decision{Limit: 2, Remaining: 1, RetryAfter: time.Second, ResetAfter: time.Second},
			stAfter: engine.State{A: now + 1_000_000, C: 1}},
		{name: "leaky bucket: queued behind one, waits its turn",
			st:   engine.State{A: now + 1_000_000, C: 1},
			r:    engine.Request{Limit: leaky, Cost: 1},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 2 * time.Second, Delay: time.Second},
			out:  engine.Outcome{Write: true, Expires: now + 2_000_000}, stAfter: engine.State{A: now + 2_000_000, C: 1}, stChange: true},
		{name: "leaky bucket: a third of a second a unit, the wait rounded up to whole µs",
			st:   engine.State{A: now + 333_333, B: 1, C: 3}, // one unit queued: 333,333⅓ µs
			r:    engine.Request{Limit: leaky3, Cost: 1},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 666_667 * time.Microsecond, Delay: 333_334 * time.Microsecond},
			out:  engine.Outcome{Write: true, Expires: now + 666_667}, stAfter: engine.State{A: now + 666_666, B: 2, C: 3}, stChange: true},
		{name: "gcra: burst 0 admits one",
			r:    engine.Request{Limit: gcra, Cost: 1},
			want: engine.Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: time.Second},
			out:  engine.Outcome{Write: true, Expires: now + 1_000_000}, stAfter: engine.State{A: now + 1_000_000, C: 1}, stChange: true},
		{name: "sliding log: one entry, (time, total before it)",
			r:    engine.Request{Limit: slog, Cost: 1},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Second},
			out:  engine.Outcome{Write: true, Expires: now + 1_000_000}, stAfter: engine.State{A: 1, Log: []int64{now, 0}}, stChange: true},
		{name: "sliding window: the current sub-window counts one",
			r:    engine.Request{Limit: sliding, Cost: 1},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 1500 * ms},
			out:  engine.Outcome{Write: true, Expires: 12_000_000}, stAfter: engine.State{A: 10_000_000, B: 1, Log: []int64{1, 0}}, stChange: true},
		// Grants and refunds (grant.go).
		{name: "fixed window: a grant takes, anchored at the window's end",
			r:    engine.Request{Limit: fixed, Cost: 2, Grant: true},
			want: engine.Decision{Allowed: true, Limit: 2, ResetAfter: 500 * ms, Anchor: 11_000_000, Hold: 500 * ms},
			out:  engine.Outcome{Write: true, Expires: 11_000_000}, stAfter: engine.State{A: 10_000_000, B: 2}, stChange: true},
		{name: "fixed window: a grant that does not fit is refused, no anchor",
			st:   engine.State{A: 10_000_000, B: 1},
			r:    engine.Request{Limit: fixed, Cost: 2, Grant: true},
			want: engine.Decision{Limit: 2, Remaining: 1, RetryAfter: 500 * ms, ResetAfter: 500 * ms}},
		{name: "fixed window: a refund in the grant's window takes off the count",
			st:   engine.State{A: 10_000_000, B: 2},
			r:    engine.Request{Limit: fixed, Cost: 1, Refund: true, Anchor: 11_000_000},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * ms},
			out:  engine.Outcome{Write: true, Expires: 11_000_000}, stAfter: engine.State{A: 10_000_000, B: 1}, stChange: true},
		{name: "fixed window: a refund never below zero",
			st:   engine.State{A: 10_000_000, B: 1},
			r:    engine.Request{Limit: fixed, Cost: 2, Refund: true, Anchor: 11_000_000},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 2},
			out:  engine.Outcome{Write: true, Expires: 11_000_000}, stAfter: engine.State{A: 10_000_000}, stChange: true},
		{name: "fixed window: a refund after the grant's window gives back nothing",
			st:   engine.State{A: 10_000_000, B: 2},
			r:    engine.Request{Limit: fixed, Cost: 2, Refund: true, Anchor: 10_000_000},
			want: engine.Decision{Allowed: true, Limit: 2, ResetAfter: 500 * ms}},
		{name: "sliding window: a grant anchored at the sub-window's end",
			r:    engine.Request{Limit: sliding, Cost: 2, Grant: true},
			want: engine.Decision{Allowed: true, Limit: 2, ResetAfter: 1500 * ms, Anchor: 11_000_000, Hold: 500 * ms},
			out:  engine.Outcome{Write: true, Expires: 12_000_000}, stAfter: engine.State{A: 10_000_000, B: 1, Log: []int64{2, 0}}, stChange: true},
		{name: "sliding window: a refund in the grant's sub-window",
			st:   engine.State{A: 10_000_000, B: 1, Log: []int64{2, 0}},
			r:    engine.Request{Limit: sliding, Cost: 1, Refund: true, Anchor: 11_000_000},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 1500 * ms},
			out:  engine.Outcome{Write: true, Expires: 12_000_000}, stAfter: engine.State{A: 10_000_000, B: 1, Log: []int64{1, 0}}, stChange: true},
		{name: "sliding window: a refund after the grant's sub-window gives back nothing",
			st:   engine.State{A: 9_000_000, B: 1, Log: []int64{0, 2}},
			r:    engine.Request{Limit: sliding, Cost: 2, Refund: true, Anchor: 10_000_000},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * ms}},
		{name: "token bucket: a grant anchored at the theoretical time after it",
			r:    engine.Request{Limit: token, Cost: 2, Grant: true},
			want: engine.Decision{Allowed: true, Limit: 2, ResetAfter: 2 * time.Second, Anchor: now + 2_000_000, Hold: 2 * time.Second},
			out:  engine.Outcome{Write: true, Expires: now + 2_000_000}, stAfter: engine.State{A: now + 2_000_000, C: 1}, stChange: true},
		{name: "token bucket: a refund never past full",
			st:   engine.State{A: now + 1_500_000, C: 1},
			r:    engine.Request{Limit: token, Cost: 2, Refund: true, Anchor: now + 1_500_000},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 2},
			out:  engine.Outcome{Write: true, Expires: now + 1}, stAfter: engine.State{A: now, C: 1}, stChange: true},
		{name: "token bucket: a refund gives back at most the units not refilled, ceil((anchor-now)/interval)",
			st:   engine.State{A: now + 2_500_000, C: 1},
			r:    engine.Request{Limit: token, Cost: 2, Refund: true, Anchor: now + 500_000},
			want: engine.Decision{Allowed: true, Limit: 2, ResetAfter: 1500 * ms},
			out:  engine.Outcome{Write: true, Expires: now + 1_500_000}, stAfter: engine.State{A: now + 1_500_000, C: 1}, stChange: true},
		{name: "token bucket: a refund at or after the anchor gives back nothing",
			st:   engine.State{A: now + 1_000_000, C: 1},
			r:    engine.Request{Limit: token, Cost: 1, Refund: true, Anchor: now},
			want: engine.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Second}},
		{name: "gcra: a third of a second a unit, the anchor rounded down",
			r:    engine.Request{Limit: gcra3, Cost: 1, Grant: true},
			want: engine.Decision{Allowed: true, Limit: 1, ResetAfter: 333_334 * us, Anchor: now + 333_333, Hold: 333_333 * us},
			out:  engine.Outcome{Write: true, Expires: now + 333_334}, stAfter: engine.State{A: now + 333_333, B: 1, C: 3}, stChange: true},
		{name: "gcra: its refund takes the exact interval back",
			st:   engine.State{A: now + 333_333, B: 1, C: 3},
			r:    engine.Request{Limit: gcra3, Cost: 1, Refund: true, Anchor: now + 333_333},
			want: engine.Decision{Allowed: true, Limit: 1, Remaining: 1},
			out:  engine.Outcome{Write: true, Expires: now + 1}, stAfter: engine.State{A: now, C: 3}, stChange: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.Key = "k"
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
			st := tc.st
			st.Log = slices.Clone(tc.st.Log)
			d, out := engine.Step(&st, now, &r)
			if d != tc.want {
				t.Errorf("decision %+v; want %+v", d, tc.want)
			}
			if out != tc.out {
				t.Errorf("outcome %+v; want %+v", out, tc.out)
			}
			want := tc.st
			if tc.stChange {
				want = tc.stAfter
			}
			if st.A != want.A || st.B != want.B || st.C != want.C || !slices.Equal(st.Log, want.Log) {
				t.Errorf("state after %+v; want %+v", st, want)
			}
		})
	}
}
