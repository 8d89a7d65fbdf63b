package service

import (
	"sync"
	"time"
)

// book follows what this sidecar hands out until it is given back or
// ends: the leases it grants (leaseBook), the reservations it holds
// (reservationBook). Entries that ended are swept when the book is read
// (sweep, for the metrics and INFO) or full (roomLocked), not by a
// goroutine or timer each. The zero book is empty and reads the wall
// clock.
type book[K comparable, V ending] struct {
	now func() time.Time // nil: the wall clock; tests inject theirs

	mu      sync.Mutex
	entries map[K]V   // guarded by mu
	swept   time.Time // guarded by mu
}

// ending is what a book holds: an entry that ends, and that counts
// itself expired when the book drops it at its end.
type ending interface {
	end() time.Time
	expire()
}

func (b *book[K, V]) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

// addLocked holds v under k.
func (b *book[K, V]) addLocked(k K, v V) {
	if b.entries == nil {
		b.entries = map[K]V{}
	}
	b.entries[k] = v
}

// removeLocked drops k's entry and returns it, if the book holds one.
func (b *book[K, V]) removeLocked(k K) (V, bool) {
	v, ok := b.entries[k]
	if ok {
		delete(b.entries, k)
	}
	return v, ok
}

// roomLocked reports whether the book holds fewer than most entries,
// once those that ended by now are swept when it holds that many.
func (b *book[K, V]) roomLocked(now time.Time, most int) bool {
	if len(b.entries) < most {
		return true
	}
	b.sweepLocked(now)
	return len(b.entries) < most
}

// sweepLocked drops the entries that ended by now, counting them expired.
func (b *book[K, V]) sweepLocked(now time.Time) {
	b.swept = now
	for k, v := range b.entries {
		if !now.Before(v.end()) {
			delete(b.entries, k)
			v.expire()
		}
	}
}

// sweep sweeps at most once a second, so that a scrape and an INFO
// together do not walk the book twice, and at once when the clock went
// back.
func (b *book[K, V]) sweep() {
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.swept) >= time.Second || now.Before(b.swept) {
		b.sweepLocked(now)
	}
}
