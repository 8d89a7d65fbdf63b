package engine

import (
	"strconv"
	"time"
)

// PeerWindow counts as envoyproxy/ratelimit counts, so that during a
// rolling update old peer pods and new Sluice pods share one count on one
// Redis. The peer keeps one plain integer per window under a key that
// names the window (its start, from the local clock, is the key's last
// part), adds each hit with INCRBY, and gives the key its unit in seconds
// (plus a random jitter) as TTL with EXPIRE at every hit. A hit is over
// the limit when the count after it passes the limit; it is counted all
// the same.
//
// The key is built by the door, which knows the domain, the descriptor
// and the window start (rls); the store stores it as it is, without its
// prefix or hash tag. So the state is the count alone (State.B), and a
// key's state never moves to another window: the next window is another
// key. What the count means:
//
//   - a take (neither Peek nor Charge) adds Cost only when it fits, as
//     Sluice's fixed window does (a rule with refusal_takes_nothing);
//   - a Charge adds Cost whatever the count, the peer's INCRBY, with no
//     bound on the debt: the count must read exactly as the peer's would;
//   - a Peek adds nothing (the peer's GET under
//     STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
//
// RetryAfter and ResetAfter are zero: the window's end follows from the
// key's window start and the door's clock, which the door has and the
// store does not (Redis's clock may put now in another window than the
// one the key names). A refusal without a RetryAfter is also one the deny
// cache does not remember: every hit reaches Redis and is counted there,
// as the peer's every hit is.
func peerWindow(st *State, now int64, r *Request) (Decision, Outcome) {
	limit, n := r.Limit.Rate, st.B
	d := Decision{Limit: limit, Allowed: n+r.Cost <= limit}
	take := !r.Peek && r.Cost > 0 && (d.Allowed || r.Charge)
	if d.Allowed || take {
		// What is left after the cost: after a peek, what a take would
		// leave, as the other algorithms report it.
		d.Remaining = limit - n - r.Cost
	} else {
		d.Remaining = limit - n
	}
	if !take {
		return d, Outcome{}
	}
	st.B = n + r.Cost
	return d, Outcome{Write: true, Expires: now + r.Limit.periodMicros()}
}

// validatePeer checks what the peer's keys need: a period of whole
// seconds (its units, SECOND to YEAR), a jitter of whole seconds, no
// burst.
func (l Limit) validatePeer() error {
	switch {
	case l.Period%time.Second != 0:
		return &ParamError{Param: "period", Value: l.Period.String(), Reason: "the peer_window algorithm counts in whole seconds"}
	case l.Burst != 0:
		return &ParamError{Param: "burst", Value: strconv.FormatInt(l.Burst, 10), Reason: "the peer_window algorithm takes no burst"}
	case l.Jitter < 0 || l.Jitter > MaxPeriod || l.Jitter%time.Second != 0:
		return &ParamError{Param: "jitter", Value: l.Jitter.String(), Reason: "must be whole seconds between 0 and 3650 days"}
	}
	return nil
}
