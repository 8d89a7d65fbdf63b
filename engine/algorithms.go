package engine

import (
	"sort"
	"time"
)

// State is what a store keeps per (algorithm, key): the in-memory store
// holds it in its slots, the Lua scripts in package lua keep the same
// values in Redis. The zero value is a key never seen, and every algorithm
// reads it as full capacity. Field meanings:
//
//	fixed window:   A = window start, B = count in it
//	sliding window: A = current sub-window start, B = precision (sub-windows
//	                per period), Log = the last precision+1 sub-windows'
//	                counts, a ring indexed by sub-window number
//	token bucket,
//	leaky bucket,
//	GCRA:           A + B/C = the theoretical time (µs and a remainder in
//	                1/C µs, C the rate that wrote it): when the bucket is
//	                full again, the queue drains, the next arrival is due
//	peer window:    B = the count (the key names its window)
//	sliding log:    A = running total of the costs admitted; Log = one
//	                (time, total before it) pair per admitted request,
//	                ascending in both
type State struct {
	A, B, C int64
	Log     []int64
}

// Outcome is what Step decides beside the Decision: whether the new state
// must be stored, and when it stops mattering (it then reads as zero).
type Outcome struct {
	Write   bool
	Expires int64 // µs since the epoch
}

// Step runs r's algorithm on st at now (µs since the epoch): the pure core
// every store shares, with no clock, lock or I/O inside. It changes st only
// when it returns Write; a peek never writes. A Grant is a take whose
// admitted decision carries Anchor and Hold; a Refund gives back as
// refund (grant.go) says. r must be valid (Validate),
// and a multi-limit request is decided limit by limit, by the store (see
// Combine).
//
// Remaining is never below zero, except in a charge's own decision, where
// it says how far over the budget the charge left the key (see charge): a
// client that reads remaining as "how many more" must never read a
// negative count, also when a limit lowered on a live key leaves more in
// use than the new limit allows.
func Step(st *State, now int64, r *Request) (Decision, Outcome) {
	d, out := step(st, now, r)
	if !r.Charge || r.Cost == 0 { // a charge of nothing makes no debt
		d.Remaining = max(d.Remaining, 0)
	}
	return d, out
}

// step is Step without the floor on Remaining: below zero, how far over
// the budget the key is, which a charge reports.
func step(st *State, now int64, r *Request) (Decision, Outcome) {
	if r.Limit.Algorithm == PeerWindow {
		return peerWindow(st, now, r) // its charge is the peer's INCRBY, whole
	}
	if r.Refund {
		return refund(st, now, r)
	}
	if r.Charge && r.Cost > 0 {
		return charge(st, now, r)
	}
	var d Decision
	var out Outcome
	switch r.Limit.Algorithm {
	case FixedWindow:
		d, out = fixedWindow(st, now, r)
	case SlidingLog:
		d, out = slidingLog(st, now, r)
	case SlidingWindow:
		d, out = slidingWindow(st, now, r)
	default:
		d, out = bucket(st, now, r)
	}
	if r.Grant && out.Write { // a grant is a take: admitted, it wrote (its cost is at least 1)
		d.Anchor = grantAnchor(st, r.Limit)
		d.Hold = Micros(d.Anchor - now)
	}
	return d, out
}

// Micros is a count of microseconds, the algorithms' unit and the Lua
// scripts', as a Duration.
func Micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// windowStart aligns windows to the epoch, so every store and sidecar agrees
// on where a window begins. A state from a later window (the clock stepped
// back) keeps its window rather than losing its count.
func windowStart(now, period, stored int64) int64 {
	return max(now-now%period, stored)
}

func fixedWindow(st *State, now int64, r *Request) (Decision, Outcome) {
	p, limit := r.Limit.periodMicros(), r.Limit.Rate
	w := windowStart(now, p, st.A)
	n := int64(0)
	if st.A == w {
		n = st.B
	}
	end := w + p
	d := Decision{Limit: limit, Allowed: n+r.Cost <= limit}
	if d.Allowed {
		n += r.Cost
	} else {
		d.RetryAfter = Micros(end - now)
	}
	// Below zero after a charge, or when a limit lowered on a live key
	// leaves more counted than it allows: how far over the budget is,
	// which Step reports for a charge alone.
	d.Remaining = limit - n
	if n > 0 {
		d.ResetAfter = Micros(end - now)
	}
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, Outcome{}
	}
	st.A, st.B = w, n
	return d, Outcome{Write: true, Expires: end}
}

// logModulus bounds the sliding log's running total: totals wrap at 2^52,
// and differences are taken modulo it, so a key busy for years stays
// exact in Lua's doubles. A log never holds more than a few limits' worth
// of cost, far less than 2^52.
const logModulus = 1 << 52

func logSpan(from, to int64) int64 { return ((to-from)%logModulus + logModulus) % logModulus }

// slidingLog keeps one entry per admitted request, not per unit, so that a
// request of any weight costs one entry: its time and the running total of
// the costs admitted before it. The units still live in the period are the
// running total less the total before the oldest live entry, one binary
// search away; entries are ordered by time and by total alike (a request
// under a clock that stepped back is logged at the newest time), which is
// what the search relies on. Redis keeps the entries in one sorted set,
// each member carrying its cost, so the newest holds the running total
// (see lua/log.lua).
//
// An entry counts while it is younger than the period: t > now-p. The
// older ones are dropped only when st is written (as Step promises): a
// clock that steps back sees them count again, in memory as in Redis,
// where a peek or a refusal writes nothing.
func slidingLog(st *State, now int64, r *Request) (Decision, Outcome) {
	p, limit := r.Limit.periodMicros(), r.Limit.Rate
	cut := now - p
	entries := len(st.Log) / 2
	first := sort.Search(entries, func(i int) bool { return st.Log[2*i] > cut })
	var n, newest, base int64
	wrapped := false
	if first < entries {
		base = st.Log[2*first+1]
		n = logSpan(base, st.A)
		newest = st.Log[2*entries-2]
		wrapped = st.A < st.Log[2*entries-1]
	}
	d := Decision{Limit: limit, Allowed: n+r.Cost <= limit}
	if !d.Allowed {
		// The request fits once the oldest need units have aged out: with
		// the entry that holds the need-th of them. Each entry holds at
		// least one unit, so it is one of the need entries from first.
		need := n + r.Cost - limit
		span := int(min(need, int64(entries-first)))
		last := first + sort.Search(span, func(k int) bool { return logSpan(base, st.Log[2*(first+k)+1]) >= need }) - 1
		d.RetryAfter = Micros(st.Log[2*last] + p - now)
		d.Remaining = limit - n // below zero under a lowered limit
	} else {
		d.Remaining = limit - n - r.Cost
		if r.Cost > 0 {
			if wrapped {
				// Redis sorts entries of one time by their totals, as
				// strings: one whose total wrapped takes the next µs.
				newest++
			}
			newest = max(newest, now)
		}
	}
	if n > 0 || d.Allowed && r.Cost > 0 {
		d.ResetAfter = Micros(newest + p - now)
	}
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, Outcome{}
	}
	if first == entries {
		st.A = 0 // nothing live: start the running total afresh
	}
	st.Log = append(st.Log[2*first:], newest, st.A)
	st.A = (st.A + r.Cost) % logModulus
	return d, Outcome{Write: true, Expires: newest + p}
}

// slidingWindow estimates the count over the last period from counts kept
// per sub-window (the period split into precision equal parts, aligned to
// the epoch): the sub-windows wholly inside the sliding period count in
// full, and the oldest one, which the period covers only in part, by the
// share it still covers, rounded up, as if its requests had been spread
// evenly over it. With a precision of 1 that is the classic current window
// plus the weighted previous one.
//
// The estimate undercounts when the oldest sub-window's requests came late
// in it: in any true sliding period the counter can admit up to 2×limit-1
// (a limit's worth at the very end of one sub-window, then limit-1 more
// just before that sub-window leaves the period). In general the excess
// over limit stays below the largest count one sub-window took; finer
// sub-windows help exactly as far as traffic spreads over them. docs/commands.md
// gives measured figures.
func slidingWindow(st *State, now int64, r *Request) (Decision, Outcome) {
	limit, n := r.Limit.Rate, r.Limit.precision()
	s := r.Limit.periodMicros() / n
	stored := st.B == n && int64(len(st.Log)) == n+1
	w := windowStart(now, s, 0)
	if stored {
		w = max(w, st.A)
	}
	counts, used := slidingCounts(st, w, now, s, n, stored)
	d := Decision{Limit: limit, Allowed: used+r.Cost <= limit}
	if d.Allowed {
		counts[0] += r.Cost
		used += r.Cost
	} else {
		d.RetryAfter = Micros(slidingRetry(counts[:n+1], w, now, s, limit-r.Cost))
	}
	d.Remaining = limit - used // below zero: how far over, as in fixedWindow
	for i := range n + 1 {
		if counts[i] > 0 {
			// It leaves the sliding period when sub-window n+1 after it begins.
			d.ResetAfter = Micros(w + (n+1-i)*s - now)
			break
		}
	}
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, Outcome{}
	}
	writeSliding(st, &counts, w, s, n, stored)
	return d, Outcome{Write: true, Expires: w + (n+1)*s}
}

// slidingCounts reads the counts of the current sub-window, which starts
// at w, and the n before it: counts[i] is the i-th before the current one.
// used is the estimate over the sliding period at now.
func slidingCounts(st *State, w, now, s, n int64, stored bool) (counts [MaxPrecision + 1]int64, used int64) {
	k := w / s
	for i := range n + 1 {
		if stored && w-i*s <= st.A {
			counts[i] = st.Log[(k-i)%(n+1)]
		}
	}
	for i := range n {
		used += counts[i]
	}
	return counts, used + weigh(counts[n], s-max(now-w, 0), s)
}

// writeSliding stores counts as the state of sub-window w.
func writeSliding(st *State, counts *[MaxPrecision + 1]int64, w, s, n int64, stored bool) {
	if !stored {
		st.Log = st.Log[:0]
		for range n + 1 {
			st.Log = append(st.Log, 0)
		}
	}
	k := w / s
	for i := range n + 1 {
		st.Log[(k-i)%(n+1)] = counts[i]
	}
	st.A, st.B, st.C = w, n, 0
}

// bucketMove reads z from st, in e's units: a cost moves it from start,
// max(z, now), to end.
func bucketMove(st *State, now int64, e emission, cost int64) (start, end instant) {
	start = e.rescale(instant{st.A, st.B}, st.C)
	if start.us < now {
		start = instant{now, 0}
	}
	return start, e.add(start, e.times(cost))
}

// weigh is ceil(count × left/s), the share of a sub-window's count that
// still falls inside the sliding period, exactly.
func weigh(count, left, s int64) int64 {
	q, r := mulDiv(count, left, s)
	if r > 0 {
		q++
	}
	return q
}

// slidingRetry is how long after now a request that leaves room for more
// fits: in the j-th sub-window from the current one (w is its start), the
// sub-windows still inside count in full and the oldest, counts[n-j], by
// its share. The first j with room decides; past n of them every count has
// left, and room >= 0 always fits.
func slidingRetry(counts []int64, w, now, s, room int64) int64 {
	n := int64(len(counts)) - 1
	for j := int64(0); j <= n; j++ {
		full := int64(0)
		for i := int64(0); i < n-j; i++ {
			full += counts[i]
		}
		left, oldest := room-full, counts[n-j]
		switch {
		case left < 0:
		case left >= oldest:
			return max(w+j*s-now, 1)
		default:
			// The oldest weighs at most left once at most
			// floor(left × s / oldest) µs of it remain in the period.
			share, _ := mulDiv(left, s, oldest)
			return w + (j+1)*s - share - now
		}
	}
	return w + (n+1)*s - now
}

// bucket is the token bucket, the leaky bucket and GCRA, which are one
// algorithm: a theoretical time z, when the bucket is full again, the queue
// has drained, the next unit is due. A request of cost units moves it cost
// intervals past max(z, now) and is admitted if that stays within capacity
// intervals of now. For the token bucket that is its tokens used,
// ceil((z-now)/interval), plus cost fitting in capacity; for the leaky
// bucket a queue that drains within capacity intervals, the request
// waiting until max(z, now) for its turn; for GCRA exactly redis-cell's
// CL.THROTTLE, with limit = burst+1 and a delay variation tolerance of
// limit intervals.
//
// The interval is exact (see emission): z carries the remainder of
// period/rate as a fraction of a µs, and durations are rounded up to whole
// µs, so that no wait is ever too short.
func bucket(st *State, now int64, r *Request) (Decision, Outcome) {
	e, capacity := r.Limit.emission(), r.Limit.Capacity()
	start, end := bucketMove(st, now, e, r.Cost)
	span := instant{end.us - now, end.f}
	tolerance := e.times(capacity)
	d := Decision{Limit: capacity, Allowed: !less(tolerance, span)}
	drains := start
	if d.Allowed {
		drains = end
		if r.Limit.Algorithm == LeakyBucket {
			d.Delay = Micros(start.us - now + instant{0, start.f}.ceil())
		}
	} else {
		d.RetryAfter = Micros(e.sub(span, tolerance).ceil())
	}
	left := instant{drains.us - now, drains.f}
	if !less(tolerance, left) {
		d.Remaining = e.fit(e.sub(tolerance, left))
	} else {
		// Over the budget, after a charge or under a limit lowered on a
		// live key: by the units still to refill before it is back at zero.
		d.Remaining = -e.fitUp(e.sub(left, tolerance))
	}
	d.ResetAfter = Micros(left.ceil())
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, Outcome{}
	}
	st.A, st.B, st.C = end.us, end.f, e.d
	return d, Outcome{Write: true, Expires: end.ceil()}
}
