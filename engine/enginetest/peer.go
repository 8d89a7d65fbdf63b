package enginetest

import (
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// PeerCases are the peer window's (engine/peer.go): envoyproxy/ratelimit's
// count in its own key, which the key's name ties to one window. Worked
// out by hand from the peer's INCRBY: a charge adds its whole cost, with
// no bound; nothing reports a retry or a reset (the door does, from the
// window the key names); the count lives one period after its last
// write, as the peer's EXPIRE gives it.
var PeerCases = []Case{
	{
		Name:  "peer_window",
		Limit: engine.Limit{Algorithm: engine.PeerWindow, Rate: 3, Period: time.Minute},
		Steps: []Step{
			{Cost: 0, Want: allow(3, 3, 0)},
			{Cost: 1, Want: allow(3, 2, 0)},
			{Cost: 1, Peek: true, Want: allow(3, 1, 0)},
			{Advance: 10 * time.Second, Cost: 2, Want: allow(3, 0, 0)},
			// A take that does not fit takes nothing (refusal_takes_nothing).
			{Cost: 1, Want: refuse(3, 0, 0, 0)},
			{Cost: 0, Want: allow(3, 0, 0)},
			{Cost: 4, WantErr: "cost"},
			// The peer's INCRBY: a charge is counted whole, past twice the
			// limit, where Sluice's own fixed window stops a debt.
			{Cost: 1, Charge: true, Want: refuse(3, -1, 0, 0)},
			{Cost: 9, Charge: true, Want: refuse(3, -10, 0, 0)},
			{Cost: 0, Peek: true, Want: refuse(3, 0, 0, 0)}, // below zero only in a charge's reply
			{Cost: 2, Charge: true, Peek: true, WantErr: "charge"},
			// Alive one minute after its last write (at 10 s), whatever
			// the window: the next window is another key.
			{Advance: 59*time.Second + 999*time.Millisecond, Cost: 1, Want: refuse(3, 0, 0, 0)},
			{Advance: time.Millisecond, Cost: 1, Want: allow(3, 2, 0)},
			{Cost: 5, Charge: true, Want: refuse(3, -3, 0, 0)},
		},
	},
	{
		// A charge that fits is an admission, as any charge's.
		Name:  "peer_window/charge-fits",
		Limit: engine.Limit{Algorithm: engine.PeerWindow, Rate: 10, Period: time.Second, Jitter: 300 * time.Second},
		Steps: []Step{
			{Cost: 10, Charge: true, Want: allow(10, 0, 0)},
			{Cost: 0, Charge: true, Want: allow(10, 0, 0)},
			{Cost: 1, Charge: true, Want: refuse(10, -1, 0, 0)},
		},
	},
	{
		Name:  "peer_window/invalid",
		Limit: engine.Limit{Algorithm: engine.PeerWindow, Rate: 10, Period: 1500 * time.Millisecond},
		Steps: []Step{
			{Cost: 1, WantErr: "period"},
			{Limit: engine.Limit{Algorithm: engine.PeerWindow, Rate: 10, Period: time.Second, Burst: 2}, Cost: 1, WantErr: "burst"},
			{Limit: engine.Limit{Algorithm: engine.PeerWindow, Rate: 10, Period: time.Second, Jitter: time.Millisecond}, Cost: 1, WantErr: "jitter"},
			{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Second, Jitter: time.Second}, Cost: 1, WantErr: "jitter"},
		},
	},
}
