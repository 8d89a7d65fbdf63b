package enginetest

import (
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// granted is an admitted grant's decision: d with the grant's anchor (as
// time since Epoch) and hold.
func granted(d engine.Decision, anchor, hold time.Duration) engine.Decision {
	d.Anchor, d.Hold = sinceEpoch(anchor), hold
	return d
}

// GrantCases are grants and refunds (owned quota), one case per algorithm
// that offers them and one multi-limit case: each takes a grant, spends
// beside it, gives back within the grant's window and after it (which
// gives back nothing), and is refused a grant that does not fit. Worked
// out by hand from engine's grant.go, as Cases are.
var GrantCases = []Case{
	{
		Name:  "grant/fixed_window",
		Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 5, Period: time.Second},
		Steps: []Step{
			{Advance: 100 * ms, Cost: 3, Grant: true, Want: granted(allow(5, 2, 900*ms), time.Second, 900*ms)},
			{Cost: 1, Want: allow(5, 1, 900*ms)},
			{Advance: 200 * ms, Cost: 2, Refund: true, Anchor: time.Second, Want: allow(5, 3, 700*ms)},
			{Cost: 4, Grant: true, Want: refuse(5, 3, 700*ms, 700*ms)},
			// The window the grant took from has ended: nothing to give back.
			{Advance: 800 * ms, Cost: 3, Refund: true, Anchor: time.Second, Want: allow(5, 5, 0)},
			{Cost: 5, Grant: true, Want: granted(allow(5, 0, 900*ms), 2*time.Second, 900*ms)},
			{Cost: 1, Want: refuse(5, 0, 900*ms, 900*ms)},
			{Cost: 5, Refund: true, Anchor: 2 * time.Second, Want: allow(5, 5, 0)},
			{Cost: 0, Grant: true, WantErr: "cost"},
			{Cost: 1, Grant: true, Peek: true, WantErr: "grant"},
			{Cost: 1, Refund: true, WantErr: "anchor"},
		},
	},
	{
		Name:  "grant/sliding_window",
		Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 4, Period: time.Second, Precision: 2},
		Steps: []Step{
			{Advance: 100 * ms, Cost: 2, Grant: true, Want: granted(allow(4, 2, 1400*ms), 500*ms, 400*ms)},
			{Advance: 300 * ms, Cost: 1, Refund: true, Anchor: 500 * ms, Want: allow(4, 3, 1100*ms)},
			// The grant's sub-window has ended: its unit stays counted.
			{Advance: 200 * ms, Cost: 1, Refund: true, Anchor: 500 * ms, Want: allow(4, 3, 900*ms)},
			{Cost: 3, Grant: true, Want: granted(allow(4, 0, 1400*ms), time.Second, 400*ms)},
			{Cost: 1, Want: refuse(4, 0, 900*ms, 1400*ms)},
			{Cost: 3, Refund: true, Anchor: time.Second, Want: allow(4, 3, 900*ms)},
		},
	},
	{
		Name:  "grant/token_bucket",
		Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 5}, // 100 ms a token
		Steps: []Step{
			{Cost: 3, Grant: true, Want: granted(allow(5, 2, 300*ms), 300*ms, 300*ms)},
			{Cost: 1, Want: allow(5, 1, 400*ms)},
			// 150 ms on, one of the grant's three units has refilled:
			// ceil(150/100) = 2 come back.
			{Advance: 150 * ms, Cost: 3, Refund: true, Anchor: 300 * ms, Want: allow(5, 4, 50*ms)},
			{Cost: 5, Grant: true, Want: refuse(5, 4, 50*ms, 50*ms)},
			{Cost: 4, Grant: true, Want: granted(allow(5, 0, 450*ms), 600*ms, 450*ms)},
			// Past its anchor, every unit of the grant has refilled.
			{Advance: 500 * ms, Cost: 4, Refund: true, Anchor: 600 * ms, Want: allow(5, 5, 0)},
		},
	},
	{
		Name:  "grant/gcra",
		Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 3, Period: time.Second, Burst: 2}, // 333,333⅓ µs a unit
		Steps: []Step{
			// The theoretical time is 666,666⅔ µs on: the anchor rounds down.
			{Cost: 2, Grant: true, Want: granted(allow(3, 1, 666_667*us), 666_666*us, 666_666*us)},
			// ceil(333,332 µs / 333,333⅓ µs) = 1 comes back: the bucket is full.
			{Advance: 333_334 * us, Cost: 2, Refund: true, Anchor: 666_666 * us, Want: allow(3, 3, 0)},
			{Cost: 1, Grant: true, Want: granted(allow(3, 2, 333_334*us), 666_667*us, 333_333*us)},
			{Cost: 1, Refund: true, Anchor: 666_667 * us, Want: allow(3, 3, 0)},
		},
	},
	{
		Name:  "grant/not-offered",
		Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2},
		Steps: []Step{
			{Cost: 1, Grant: true, WantErr: "grant"},
			{Cost: 1, Refund: true, Anchor: time.Second, WantErr: "refund"},
			{Cost: 1, Want: allow(2, 1, time.Second)},
		},
	},
	{
		Name: "grant/multi-limit",
		Limits: []engine.NamedLimit{
			{Name: "a", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 5, Period: time.Second}},
			{Name: "b", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}},
		},
		Steps: []Step{
			// Granted by both: the reply is a's (least remaining), with the
			// shorter hold, b's.
			{Advance: 100 * ms, Cost: 3, Grant: true, Want: granted(allow(5, 2, 900*ms), time.Second, 300*ms),
				WantDetail: []engine.Decision{granted(allow(5, 2, 900*ms), time.Second, 900*ms), granted(allow(10, 7, 300*ms), 400*ms, 300*ms)}},
			// Refused by a: b, which has room, gives nothing (the take
			// after finds its 7).
			{Cost: 3, Grant: true, Want: refuse(5, 2, 900*ms, 900*ms),
				WantDetail: []engine.Decision{refuse(5, 2, 900*ms, 900*ms), allow(10, 7, 300*ms)}},
			{Cost: 2, Want: allow(5, 0, 900*ms), WantDetail: []engine.Decision{allow(5, 0, 900*ms), allow(10, 5, 500*ms)}},
			// Each limit gives back by its own anchor: a both units, b the
			// one not refilled since its grant, ceil((400-300)/100).
			{Advance: 200 * ms, Cost: 2, Refund: true, Anchor: time.Second, Anchors: []time.Duration{time.Second, 400 * ms},
				Want: allow(5, 2, 700*ms), WantDetail: []engine.Decision{allow(5, 2, 700*ms), allow(10, 8, 200*ms)}},
			{Cost: 2, Want: allow(5, 0, 700*ms), WantDetail: []engine.Decision{allow(5, 0, 700*ms), allow(10, 6, 400*ms)}},
		},
	},
}
