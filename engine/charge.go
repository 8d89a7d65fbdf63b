package engine

// A charge records a cost known only after the work, such as the tokens an
// LLM answer used: nothing can be refused any more, so it is always taken,
// and the budget may go below zero. Later requests are then refused until
// the debt has refilled:
//
//	fixed window:   the window's count passes its limit; every request is
//	                refused until the window ends, as a count the peer
//	                (envoyproxy/ratelimit) incremented past its limit is
//	sliding window: the current sub-window's count passes the limit; the
//	                debt leaves the sliding period as that sub-window does
//	token bucket,
//	GCRA:           the theoretical time moves past now + capacity
//	                intervals: no token until it is back within
//	leaky bucket:   the work is already done, so it waits for nothing
//	                (Delay 0), but its units stay in the queue, which
//	                later requests wait behind or are refused by
//	sliding log:    none; it keeps a time per admitted request, so a unit
//	                over the limit has no place in it (validateCharge)
//
// A debt is at most one capacity: a charge that would take the budget
// further is taken as far as that. It bounds how long one answer can hold
// a key refused (one more refill of the whole capacity) and keeps every
// time the algorithms compute below 2^53, where Lua's doubles are exact.
//
// The decision says whether the charge fitted (Allowed), and then
// describes the key as the charge left it: Remaining, below zero by the
// units owed (the one decision whose Remaining may be negative: Step
// floors every other at 0); ResetAfter; and, when it did not fit,
// RetryAfter, how long until a request of cost 1 is admitted. That is
// the decision a request of cost 1 gets from then on, its Remaining
// floored at 0, which is what lets the deny cache remember it. The Lua scripts compose a charge the same way (charge in
// lua/batch.lua).
func charge(st *State, now int64, r *Request) (Decision, Outcome) {
	c := min(r.Cost, 2*r.Limit.Capacity())
	at := func(cost int64) Decision {
		d, _ := step(st, now, &Request{Key: r.Key, Limit: r.Limit, Cost: cost, Peek: true}) // below zero: how far over
		return d
	}
	fitted := at(c).Allowed
	var out Outcome
	switch r.Limit.Algorithm {
	case FixedWindow:
		out = fixedForce(st, now, r.Limit, c)
	case SlidingWindow:
		out = slidingForce(st, now, r.Limit, c)
	default:
		out = bucketForce(st, now, r.Limit, c)
	}
	d := at(0)
	d.Allowed, d.Delay = fitted, 0
	if !fitted {
		d.RetryAfter = at(1).RetryAfter
	}
	return d, out
}

// fixedForce adds c to the window's count, up to twice the limit; a count
// already past that (a lowered limit) stays as it is.
func fixedForce(st *State, now int64, l Limit, c int64) Outcome {
	p := l.periodMicros()
	w := windowStart(now, p, st.A)
	n := int64(0)
	if st.A == w {
		n = st.B
	}
	to := max(n, min(n+c, 2*l.Rate))
	if to == n {
		return Outcome{}
	}
	st.A, st.B = w, to
	return Outcome{Write: true, Expires: w + p}
}

// slidingForce adds c to the current sub-window's count, as far as the
// estimate reaches twice the limit.
func slidingForce(st *State, now int64, l Limit, c int64) Outcome {
	limit, n := l.Rate, l.precision()
	s := l.periodMicros() / n
	stored := st.B == n && int64(len(st.Log)) == n+1
	w := windowStart(now, s, 0)
	if stored {
		w = max(w, st.A)
	}
	counts, used := slidingCounts(st, w, now, s, n, stored)
	take := min(c, max(2*limit-used, 0))
	if take == 0 {
		return Outcome{}
	}
	counts[0] += take
	writeSliding(st, &counts, w, s, n, stored)
	return Outcome{Write: true, Expires: w + (n+1)*s}
}

// bucketForce moves the theoretical time c intervals past max(z, now), up
// to now + twice the capacity's intervals; one already past that (a
// lowered limit) stays as it is.
func bucketForce(st *State, now int64, l Limit, c int64) Outcome {
	e := l.emission()
	start, end := bucketMove(st, now, e, c)
	if most := e.add(instant{now, 0}, e.times(2*l.Capacity())); less(most, end) {
		end = most
	}
	if !less(start, end) {
		return Outcome{}
	}
	st.A, st.B, st.C = end.us, end.f, e.d
	return Outcome{Write: true, Expires: end.ceil()}
}
