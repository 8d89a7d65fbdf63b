package engine_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

func TestValidateGrantRefund(t *testing.T) {
	fixed := engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Second}
	log := engine.Limit{Algorithm: engine.SlidingLog, Rate: 2, Period: time.Second}
	leaky := engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2}
	gcra := engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Second, Burst: 1}
	two := []engine.NamedLimit{{Name: "a", Limit: fixed}, {Name: "b", Limit: gcra}}
	withLog := []engine.NamedLimit{{Name: "a", Limit: fixed}, {Name: "b", Limit: log}}
	for _, tc := range []struct {
		name string
		r    engine.Request
		bad  string // the parameter named, "" if valid
	}{
		{"grant on a fixed window", engine.Request{Limit: fixed, Cost: 1, Grant: true}, ""},
		{"grant on gcra", engine.Request{Limit: gcra, Cost: 2, Grant: true}, ""},
		{"grant on the sliding log", engine.Request{Limit: log, Cost: 1, Grant: true}, "grant"},
		{"grant on the leaky bucket", engine.Request{Limit: leaky, Cost: 1, Grant: true}, "grant"},
		{"refund on the leaky bucket", engine.Request{Limit: leaky, Cost: 1, Refund: true, Anchor: 1}, "refund"},
		{"grant with peek", engine.Request{Limit: fixed, Cost: 1, Grant: true, Peek: true}, "grant"},
		{"grant with charge", engine.Request{Limit: fixed, Cost: 1, Grant: true, Charge: true}, "grant"},
		{"refund with peek", engine.Request{Limit: fixed, Cost: 1, Refund: true, Anchor: 1, Peek: true}, "refund"},
		{"grant and refund", engine.Request{Limit: fixed, Cost: 1, Grant: true, Refund: true, Anchor: 1}, "grant"},
		{"grant of nothing", engine.Request{Limit: fixed, Grant: true}, "cost"},
		{"grant over the capacity", engine.Request{Limit: fixed, Cost: 3, Grant: true}, "cost"},
		{"refund without an anchor", engine.Request{Limit: fixed, Cost: 1, Refund: true}, "anchor"},
		{"refund", engine.Request{Limit: fixed, Cost: 1, Refund: true, Anchor: 1}, ""},
		{"multi-limit grant", engine.Request{Limits: two, Cost: 1, Grant: true}, ""},
		{"multi-limit grant with a sliding log", engine.Request{Limits: withLog, Cost: 1, Grant: true}, "grant"},
		{"multi-limit refund without detail", engine.Request{Limits: two, Cost: 1, Refund: true, Anchor: 1}, "detail"},
		{"multi-limit refund, a limit's anchor missing", engine.Request{Limits: two, Cost: 1, Refund: true, Anchor: 1,
			Detail: []engine.Decision{{Anchor: 5}, {}}}, "anchor"},
		{"multi-limit refund", engine.Request{Limits: two, Cost: 1, Refund: true, Anchor: 5,
			Detail: []engine.Decision{{Anchor: 5}, {Anchor: 7}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.Key = "k"
			err := r.Validate()
			var pe *engine.ParamError
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("Validate: %v; want nil", err)
			case tc.bad != "" && !errors.As(err, &pe):
				t.Fatalf("Validate: %v; want a ParamError on %s", err, tc.bad)
			case tc.bad != "" && pe.Param != tc.bad:
				t.Fatalf("Validate: %v; want it on %s", err, tc.bad)
			}
		})
	}
}

func TestSpendable(t *testing.T) {
	fixed := engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Second}
	token := engine.Limit{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 10} // 100 ms a unit
	gcra3 := engine.Limit{Algorithm: engine.GCRA, Rate: 3, Period: time.Second, Burst: 2}          // 333,333⅓ µs a unit
	ms := time.Millisecond
	for _, tc := range []struct {
		name          string
		l             engine.Limit
		hold, elapsed time.Duration
		left, want    int64
	}{
		{"window: all left while the window lasts", fixed, 500 * ms, 499 * ms, 7, 7},
		{"window: none once it ends", fixed, 500 * ms, 500 * ms, 7, 0},
		{"bucket: all at once", token, 500 * ms, 0, 5, 5},
		{"bucket: a unit lapses only once its interval has refilled", token, 500 * ms, 99 * ms, 5, 5},
		{"bucket: one lapsed", token, 500 * ms, 100 * ms, 5, 4},
		{"bucket: the last unit until hold", token, 500 * ms, 499 * ms, 5, 1},
		{"bucket: none at hold", token, 500 * ms, 500 * ms, 5, 0},
		{"bucket: never more than left", token, 500 * ms, 0, 2, 2},
		{"gcra: a grant of one with an anchor rounded down keeps its unit", gcra3, 333_333 * time.Microsecond, 0, 1, 1},
		{"gcra: two units of 333,333⅓ µs", gcra3, 666_666 * time.Microsecond, 333_333 * time.Microsecond, 2, 1},
		{"nothing left", token, 500 * ms, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.Spendable(tc.hold, tc.elapsed, tc.left); got != tc.want {
				t.Fatalf("Spendable(%v, %v, %d) = %d; want %d", tc.hold, tc.elapsed, tc.left, got, tc.want)
			}
		})
	}
}
