package redispipe

import (
	"sync"
	"time"
)

// The deadline on Redis's clock. A stamped command (Pipe.SendStamped)
// carries the time after which its sender has been answered without it,
// on the clock of the Redis that runs it, so that a Redis that paused (a
// slow command, a fork, a failover) and runs it on resuming can tell it
// is too late. Its reply carries Redis's time as the command read it, and
// each pipe keeps an offset estimate to its Redis's clock (Clock).
//
// A reply that Redis sent at its time r for a command sent at s and read
// back at e (this process's clock) says the offset is r - (s+e)/2 within
// (e-s)/2. The estimate is the sample with the smallest round trip over
// the last clockWindow to 2*clockWindow, so its error is half the
// smallest round trip seen lately (tens of µs on a LAN), plus what the
// two clocks drift apart over that age (under 1 ms at 100 ppm). The
// deadline sent is the sender's plus the offset, the error and
// clockMargin: a command that Redis starts before its sender's deadline
// is never late, whatever the estimate's error within its bound; one that
// starts up to twice the error plus clockMargin after it may still run.
// A sample that contradicts the estimate beyond both errors (a clock
// stepped) replaces it.

// clockWindow is how long a best sample stands before a newer window's
// best replaces it.
const clockWindow = 5 * time.Second

// clockMargin covers the drift of the two clocks over a sample's age and
// the rounding of times to µs.
const clockMargin = 2 * time.Millisecond

// offsetSample is one reply's view of a Redis clock's offset: Redis's
// time minus this process's, in µs, within err µs, seen at at.
type offsetSample struct {
	offset, err int64
	at          time.Time
}

// Clock keeps an estimate of the offset to one Redis's clock: each pipe
// has one, and a user that reaches a Redis some other way (go-redis) may
// keep its own. It is safe for concurrent use; its zero value has no
// estimate.
type Clock struct {
	mu        sync.Mutex
	cur, prev offsetSample // the best of this window and the one before; err 0: none
	since     time.Time    // this window's start
}

// sample is the offset that a call sent at sent, whose reply read at got
// carries Redis's time redis (µs), shows, and false when the times are
// not a round trip.
func sample(sent, got time.Time, redis int64) (offsetSample, bool) {
	rtt := got.Sub(sent).Microseconds()
	if sent.IsZero() || rtt < 0 || redis <= 0 {
		return offsetSample{}, false
	}
	mid := sent.UnixMicro() + rtt/2
	return offsetSample{offset: redis - mid, err: rtt/2 + 1, at: got}, true
}

// Observe takes the sample of a command sent at sent whose reply, read at
// got, says Redis's clock read redis (µs) when the command started.
func (c *Clock) Observe(sent, got time.Time, redis int64) {
	s, ok := sample(sent, got, redis)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	best, have := c.bestLocked(got)
	switch {
	case !have || !agree(s, best):
		// The first sample, or Redis's clock (or ours) was stepped: the
		// old samples describe a clock that is gone.
		c.cur, c.prev, c.since = s, offsetSample{}, got
	case got.Sub(c.since) >= clockWindow:
		c.prev, c.cur, c.since = c.cur, s, got
	case s.err <= c.cur.err || c.cur.err == 0:
		c.cur = s
	}
}

// agree tells whether two samples can both hold: their ranges meet.
func agree(a, b offsetSample) bool {
	d := a.offset - b.offset
	if d < 0 {
		d = -d
	}
	return d <= a.err+b.err+clockMargin.Microseconds()
}

// bestLocked is the estimate at now: the better of this window's best
// and, while it is recent, the one before's. c.mu is locked.
func (c *Clock) bestLocked(now time.Time) (offsetSample, bool) {
	best := c.cur
	if c.prev.err > 0 && now.Sub(c.prev.at) < 2*clockWindow && (best.err == 0 || c.prev.err < best.err) {
		best = c.prev
	}
	return best, best.err > 0
}

// Deadline is local, a time on this process's clock, on Redis's clock
// (µs) and late enough that no error within the estimate's bound makes a
// command that Redis starts before local late: 0 (none) while there is no
// estimate, or when local is zero.
func (c *Clock) Deadline(local time.Time) int64 { return c.deadlineAt(local, time.Now()) }

// deadlineAt is Deadline with the estimate as it stands at now.
func (c *Clock) deadlineAt(local, now time.Time) int64 {
	if local.IsZero() {
		return 0
	}
	c.mu.Lock()
	best, ok := c.bestLocked(now)
	c.mu.Unlock()
	if !ok {
		return 0
	}
	return local.UnixMicro() + best.offset + best.err + clockMargin.Microseconds()
}
