package service

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// TestLeaseBook follows leases through the book as the service does: a
// renewal moves a lease's end, a release or its end drops it, the gauge
// follows, the sweep walks the book at most once a second (at once when
// the clock went back), and a full book sweeps before it refuses to
// follow a new lease.
func TestLeaseBook(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	b := &leaseBook{book: book[leaseRef, booked]{now: func() time.Time { return now }}}
	granted := &engine.LeaseDecision{Allowed: true, Path: engine.PathStore}
	acquire := func(key string, ttl time.Duration, d *engine.LeaseDecision) {
		b.acquired("p", &engine.LeaseRequest{Key: key, ID: "id", TTL: ttl}, d)
	}
	stats := func() (held int64, expired, released uint64) {
		c := b.byPolicy.get("p")
		return c.held.Load(), c.events[LeaseExpired].Load(), c.events[LeaseReleased].Load()
	}
	check := func(step string, held int64, expired, released uint64) {
		t.Helper()
		if h, e, r := stats(); h != held || e != expired || r != released {
			t.Errorf("%s: held %d, expired %d, released %d; want %d, %d, %d", step, h, e, r, held, expired, released)
		}
	}

	acquire("a", 10*time.Second, granted)
	acquire("b", 10*time.Second, granted)
	acquire("c", time.Second, &engine.LeaseDecision{Allowed: true, Path: engine.PathFailOpen}) // held nowhere
	acquire("d", time.Second, &engine.LeaseDecision{})                                         // refused
	check("two followed", 2, 0, 0)

	now = t0.Add(8 * time.Second)
	acquire("a", 10*time.Second, &engine.LeaseDecision{Allowed: true, Renewed: true, Path: engine.PathStore})
	check("a renewed", 2, 0, 0)

	now = t0.Add(10 * time.Second)
	b.sweep()
	check("b ended, a renewed", 1, 1, 0)

	now = t0.Add(19 * time.Second)
	b.released("p", "x", "id") // not followed: counted, nothing held changes
	check("an unknown released", 1, 1, 1)
	b.released("p", "a", "id")
	check("a released", 0, 1, 2)

	b.sweep()
	acquire("e", 500*time.Millisecond, granted)
	now = t0.Add(19*time.Second + 900*time.Millisecond)
	b.sweep() // under a second since the last: e stays
	check("swept under a second ago", 1, 1, 2)
	now = t0.Add(20 * time.Second)
	b.sweep()
	check("e ended", 0, 2, 2)
	now = t0.Add(19 * time.Second) // the clock went back
	acquire("f", 500*time.Millisecond, granted)
	now = t0.Add(19*time.Second + 600*time.Millisecond)
	b.sweep() // before the last sweep: at once
	check("f ended, the clock back", 0, 3, 2)

	// A full book sweeps before it refuses to follow: leases that ended
	// make room, else the new lease is counted but not followed.
	for i := range maxBooked {
		b.acquired("q", &engine.LeaseRequest{Key: strconv.Itoa(i), ID: "id", TTL: time.Second}, granted)
	}
	acquire("g", time.Minute, granted)
	check("book full", 0, 3, 2)
	now = now.Add(time.Second)
	acquire("h", time.Minute, granted)
	check("book swept when full", 1, 3, 2)
	if q := b.byPolicy.get("q"); len(b.entries) != 1 || q.held.Load() != 0 || q.events[LeaseExpired].Load() != maxBooked {
		t.Errorf("after the sweep, %d leases followed, q held %d, expired %d; want 1, 0, %d",
			len(b.entries), q.held.Load(), q.events[LeaseExpired].Load(), maxBooked)
	}
}
