// Package membudget is the process's one bound on what its doors'
// connections hold in memory for their clients: input read and not yet
// decided, answers not yet written. It is Redis 7's maxmemory-clients
// (--max-input-memory): each connection is a Holder that says how many
// bytes it holds; when the total passes the limit, the holders holding
// the most are told to close, largest first, until what the others hold
// fits.
//
// It is a leaf of its own so that every door (the RESP server, the gRPC
// transport) counts in the same total without one importing another.
// A holder's owner decides what it counts and how it closes: the budget
// only adds, compares and picks.
package membudget

import (
	"cmp"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Budget is the shared total and its limit. Its methods are safe for
// concurrent use, and no caller of Set ever waits for another: the doors'
// goroutines and the RESP door's event loop all call it on every read,
// and an event loop that waited there would keep every client on it
// waiting (see over).
type Budget struct {
	limit     int64
	total     atomic.Int64 // what every holder not picked to close holds
	seq       atomic.Int64 // the last holder's number
	returning atomic.Bool  // a return of memory to the system is scheduled (Released)
	pending   atomic.Bool  // a Set went over while another goroutine was picking

	mu      sync.Mutex
	holders map[*Holder]struct{} // guarded by mu
	picking []candidate          // pick's list, reused; guarded by mu
}

// New is a budget of limit bytes.
func New(limit int64) (*Budget, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("membudget: the limit must be positive, not %d", limit)
	}
	return &Budget{limit: limit, holders: map[*Holder]struct{}{}}, nil
}

// Limit is the budget's bound in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Total is what the holders hold now, but for those picked to close:
// theirs is as good as returned.
func (b *Budget) Total() int64 { return b.total.Load() }

// Holder is one connection's share. Set and Leave may be called from any
// goroutine, but one at a time: the owner's.
type Holder struct {
	b     *Budget
	seq   int64 // the order holders joined in: of two equal, the newer is closed first
	evict func(held int64)

	// mu makes a Set and the budget's pick of this holder one before the
	// other, so that what the holder holds leaves the total exactly once.
	// Only the owner and pick take it: never contended for long.
	mu      sync.Mutex
	held    atomic.Int64 // written under mu; read without it by Held
	evicted atomic.Bool  // written under mu
}

// Join adds a holder that holds nothing yet. evict is called once, when
// the budget picks this holder to close, with what it held then: from
// whichever goroutine's Set went over, with the budget's lock held, so it
// must not block nor take a lock that a caller of Set may hold (it sets a
// flag and wakes the holder's own goroutine, which closes it).
func (b *Budget) Join(evict func(held int64)) *Holder {
	h := &Holder{b: b, seq: b.seq.Add(1), evict: evict}
	b.mu.Lock()
	b.holders[h] = struct{}{}
	b.mu.Unlock()
	return h
}

// Held is what the holder holds.
func (h *Holder) Held() int64 { return h.held.Load() }

// Evicted reports whether the budget has picked this holder to close.
func (h *Holder) Evicted() bool { return h.evicted.Load() }

// Set says the holder now holds n bytes. Growing past the budget picks
// holders to close (this one among them, when it holds the most). Once
// the holder is picked, what it holds no longer counts: it is closing.
func (h *Holder) Set(n int64) {
	h.mu.Lock()
	d := n - h.held.Swap(n)
	if h.evicted.Load() || d == 0 {
		h.mu.Unlock()
		return
	}
	total := h.b.total.Add(d)
	h.mu.Unlock()
	if d > 0 && total > h.b.limit {
		h.b.over()
	}
}

// Leave takes the holder out: what it held is returned.
func (h *Holder) Leave() {
	h.Set(0)
	h.b.mu.Lock()
	delete(h.b.holders, h)
	h.b.mu.Unlock()
}

// over has the holders holding the most picked until what the others
// hold is within the limit. It never waits: when another goroutine is
// picking, it leaves a note (pending) that has that one look again once
// done, so that an event loop whose read went over is not held up behind
// the goroutines of a flood that all went over at once (each waiting for
// the lock, then sorting every holder, in turn: seconds under
// bench/doorflood's three doors at once).
func (b *Budget) over() {
	b.pending.Store(true)
	for b.pending.Load() && b.mu.TryLock() {
		b.pending.Store(false)
		b.pick()
		b.mu.Unlock()
	}
}

// pick is over's work, with b.mu held: the largest holders first, as
// Redis's maxmemory-clients does.
func (b *Budget) pick() {
	if b.total.Load() <= b.limit {
		return
	}
	hs := b.picking[:0]
	for h := range b.holders {
		// Closing one that holds nothing would return nothing.
		if held := h.Held(); held > 0 && !h.evicted.Load() {
			hs = append(hs, candidate{h, held})
		}
	}
	// The largest first; of equal ones the newest, which has sent the
	// least of what it announced (a client that a reservation for its
	// announced argument put over the budget is closed before one that
	// holds as much and has sent more of it).
	slices.SortFunc(hs, func(x, y candidate) int {
		return cmp.Or(cmp.Compare(y.held, x.held), cmp.Compare(y.h.seq, x.h.seq))
	})
	for _, c := range hs {
		if b.total.Load() <= b.limit {
			break
		}
		h := c.h
		h.mu.Lock()
		held := h.held.Load()
		if held == 0 {
			h.mu.Unlock() // emptied since (leaving, perhaps): nothing to return
			continue
		}
		h.evicted.Store(true)
		b.total.Add(-held)
		h.mu.Unlock()
		h.evict(held)
	}
	clear(hs)
	b.picking = hs[:0]
}

// candidate is a holder as pick saw it: sorted by what it held then,
// since its owner may change it meanwhile.
type candidate struct {
	h    *Holder
	held int64
}

// returnAtLeast is the smallest buffer whose release has the process give
// memory back to the system, and returnAfter how long after a release it
// does: Go returns freed memory to the system only slowly, and its
// collector (GOGC 400 in the binary) may not even run on an idle server,
// so a burst of large inputs would otherwise keep the resident memory
// long after its clients left. Once a second at most, however many
// buffers are released meanwhile: a forced collection costs a few
// milliseconds.
const (
	returnAtLeast = 1 << 20
	returnAfter   = time.Second
)

// Released notes that a holder dropped a buffer of n bytes: a large one
// has the process return freed memory to the system a moment later.
func (b *Budget) Released(n int) {
	if n < returnAtLeast || !b.returning.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(returnAfter, func() {
		b.returning.Store(false)
		debug.FreeOSMemory()
	})
}
