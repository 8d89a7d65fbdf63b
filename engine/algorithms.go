package engine

import (
	"math"
	"time"
)

// state is what a store keeps per (algorithm, key). The zero value is a key
// never seen, and every algorithm reads it as full capacity. Field meanings:
//
//	fixed window:   a = window start, b = count in it
//	sliding window: a = current window start, b = its count, c = previous window's count
//	token bucket:   a = tokens used, b = time of the last whole-token refill
//	leaky bucket:   a = time the queue drains (the next free slot)
//	GCRA:           a = theoretical arrival time
//	sliding log:    log = admitted units' timestamps, ascending
//
// The Lua scripts in package lua keep the same values in Redis.
type state struct {
	a, b, c int64
	log     []int64
}

// outcome is what an algorithm decides beside the Decision: whether the new
// state must be stored, and when it stops mattering (it then reads as zero).
type outcome struct {
	write   bool
	expires int64 // µs since the epoch
}

// decide runs r's algorithm on st at now (µs since the epoch). It changes st
// only when it returns write; a peek never writes. r must be valid.
func decide(st *state, now int64, r *Request) (Decision, outcome) {
	switch r.Limit.Algorithm {
	case FixedWindow:
		return fixedWindow(st, now, r)
	case SlidingLog:
		return slidingLog(st, now, r)
	case SlidingWindow:
		return slidingWindow(st, now, r)
	case TokenBucket:
		return tokenBucket(st, now, r)
	case LeakyBucket:
		return leakyBucket(st, now, r)
	default:
		return gcra(st, now, r)
	}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// windowStart aligns windows to the epoch, so every store and sidecar agrees
// on where a window begins. A state from a later window (the clock stepped
// back) keeps its window rather than losing its count.
func windowStart(now, period, stored int64) int64 {
	return max(now-now%period, stored)
}

func fixedWindow(st *state, now int64, r *Request) (Decision, outcome) {
	p, limit := r.Limit.periodMicros(), r.Limit.Rate
	w := windowStart(now, p, st.a)
	n := int64(0)
	if st.a == w {
		n = st.b
	}
	end := w + p
	d := Decision{Limit: limit, Allowed: n+r.Cost <= limit}
	if d.Allowed {
		n += r.Cost
	} else {
		d.RetryAfter = micros(end - now)
	}
	d.Remaining = limit - n
	if n > 0 {
		d.ResetAfter = micros(end - now)
	}
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, outcome{}
	}
	st.a, st.b = w, n
	return d, outcome{write: true, expires: end}
}

func slidingLog(st *state, now int64, r *Request) (Decision, outcome) {
	p, limit := r.Limit.periodMicros(), r.Limit.Rate
	// An entry counts while it is younger than the period: t > now-p.
	// The older ones are dropped only when st is written (as decide
	// promises): a clock that steps back would see them count again, in
	// memory as in Redis, where a peek or a refusal writes nothing.
	cut := now - p
	i := 0
	for i < len(st.log) && st.log[i] <= cut {
		i++
	}
	live := st.log[i:]
	n := int64(len(live))
	d := Decision{Limit: limit, Allowed: n+r.Cost <= limit}
	newest := int64(0)
	if n > 0 {
		newest = live[n-1]
	}
	if !d.Allowed {
		// The request fits once the oldest n+cost-limit entries age out.
		d.RetryAfter = micros(live[n+r.Cost-limit-1] + p - now)
		d.Remaining = limit - n
	} else {
		d.Remaining = limit - n - r.Cost
		if r.Cost > 0 {
			newest = max(newest, now)
		}
	}
	if d.Remaining < limit {
		d.ResetAfter = micros(newest + p - now)
	}
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, outcome{}
	}
	st.log = st.log[:copy(st.log, live)]
	// Insert cost copies of now, keeping the log sorted even if the clock
	// stepped back.
	at := len(st.log)
	for at > 0 && st.log[at-1] > now {
		at--
	}
	for range r.Cost {
		st.log = append(st.log, 0)
	}
	copy(st.log[at+int(r.Cost):], st.log[at:])
	for j := range int(r.Cost) {
		st.log[at+j] = now
	}
	return d, outcome{write: true, expires: newest + p}
}

// slidingWindow estimates the count over the last period as the current
// window's count plus the previous window's, weighted by how much of the
// previous window the sliding period still covers, rounded up so that the
// estimate never undercounts an evenly spread previous window. The weighting
// is done in float64 in exactly the order the Lua script does it, so both
// stores round identically.
func slidingWindow(st *state, now int64, r *Request) (Decision, outcome) {
	p, limit := r.Limit.periodMicros(), r.Limit.Rate
	w := windowStart(now, p, st.a)
	var curr, prev int64
	switch st.a {
	case w:
		curr, prev = st.b, st.c
	case w - p:
		prev = st.b
	}
	elapsed := max(now-w, 0)
	used := curr + weigh(prev, p-elapsed, p)
	d := Decision{Limit: limit, Allowed: used+r.Cost <= limit}
	if d.Allowed {
		curr += r.Cost
		used += r.Cost
	} else {
		d.RetryAfter = micros(max(slidingRetry(w, now, p, limit, r.Cost, curr, prev), 1))
	}
	d.Remaining = max(limit-used, 0)
	switch {
	case curr > 0:
		d.ResetAfter = micros(w + 2*p - now)
	case prev > 0:
		d.ResetAfter = micros(w + p - now)
	}
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, outcome{}
	}
	st.a, st.b, st.c = w, curr, prev
	return d, outcome{write: true, expires: w + 2*p}
}

// weigh is ceil(count × left/p), the share of a previous window's count that
// still falls inside the sliding period.
func weigh(count, left, p int64) int64 {
	return int64(math.Ceil(float64(count) * (float64(left) / float64(p))))
}

// slidingRetry is how long until a refused request would fit: later in this
// window, as the previous window's weight falls, or in the next one, where
// this window's count becomes the weighted one.
func slidingRetry(w, now, p, limit, cost, curr, prev int64) int64 {
	if room := limit - cost - curr; room >= 0 {
		return w + p - shareLeft(room, p, prev) - now
	}
	room := limit - cost
	if room >= curr {
		return w + p - now
	}
	return w + 2*p - shareLeft(room, p, curr) - now
}

// shareLeft is the longest part of a window, in µs, over which count's
// weight stays within room: floor(room × p / count).
func shareLeft(room, p, count int64) int64 {
	return int64(math.Floor(float64(room) * float64(p) / float64(count)))
}

func tokenBucket(st *state, now int64, r *Request) (Decision, outcome) {
	t, capacity := r.Limit.interval(), r.Limit.Burst
	used, last := st.a, st.b
	if used > 0 && now > last {
		// Refill whole tokens only, and keep the time of the last one, so
		// no fraction of a token is ever lost or rounded.
		if refilled := (now - last) / t; refilled >= used {
			used = 0
		} else {
			used -= refilled
			last += refilled * t
		}
	}
	if used == 0 {
		last = now
	}
	d := Decision{Limit: capacity, Allowed: used+r.Cost <= capacity}
	if d.Allowed {
		used += r.Cost
	} else {
		d.RetryAfter = micros(last + (used+r.Cost-capacity)*t - now)
	}
	d.Remaining = capacity - used
	if used > 0 {
		d.ResetAfter = micros(last + used*t - now)
	}
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, outcome{}
	}
	st.a, st.b = used, last
	return d, outcome{write: true, expires: last + used*t}
}

// leakyBucket is a queue drained one unit per interval. A request joins the
// queue if, counting itself, the queue drains within capacity intervals; it
// then waits Delay for its turn.
func leakyBucket(st *state, now int64, r *Request) (Decision, outcome) {
	t, capacity := r.Limit.interval(), r.Limit.Burst
	start := max(st.a, now)
	end := start + r.Cost*t
	d := Decision{Limit: capacity, Allowed: end-now <= capacity*t}
	drains := start
	if d.Allowed {
		drains = end
		d.Delay = micros(start - now)
	} else {
		d.RetryAfter = micros(end - capacity*t - now)
	}
	d.Remaining = max(capacity*t-(drains-now), 0) / t
	d.ResetAfter = micros(drains - now)
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, outcome{}
	}
	st.a = end
	return d, outcome{write: true, expires: end}
}

// gcra is the generic cell rate algorithm exactly as redis-cell's
// CL.THROTTLE computes it, in microseconds: limit = burst+1, the delay
// variation tolerance is limit emission intervals.
func gcra(st *state, now int64, r *Request) (Decision, outcome) {
	t, limit := r.Limit.interval(), r.Limit.Burst+1
	tolerance := t * limit
	tat := max(st.a, now)
	newTat := tat + r.Cost*t
	d := Decision{Limit: limit}
	ttl := newTat - now
	if diff := now - (newTat - tolerance); diff < 0 {
		d.RetryAfter = micros(-diff)
		ttl = tat - now
	} else {
		d.Allowed = true
	}
	if next := tolerance - ttl; next > 0 {
		d.Remaining = next / t
	}
	d.ResetAfter = micros(ttl)
	if !d.Allowed || r.Peek || r.Cost == 0 {
		return d, outcome{}
	}
	st.a = newTat
	return d, outcome{write: true, expires: newTat}
}
