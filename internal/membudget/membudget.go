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
// concurrent use.
type Budget struct {
	limit     int64
	total     atomic.Int64 // what every holder holds
	seq       atomic.Int64 // the last holder's number
	returning atomic.Bool  // a return of memory to the system is scheduled (Released)

	mu      sync.Mutex
	holders map[*Holder]struct{} // guarded by mu
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

// Total is what every holder holds now.
func (b *Budget) Total() int64 { return b.total.Load() }

// Holder is one connection's share. Set and Leave may be called from any
// goroutine, but one at a time: the owner's.
type Holder struct {
	b       *Budget
	seq     int64 // the order holders joined in: of two equal, the newer is closed first
	held    atomic.Int64
	evicted atomic.Bool
	evict   func(held int64)
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

// Held is what the holder holds against the budget.
func (h *Holder) Held() int64 { return h.held.Load() }

// Evicted reports whether the budget has picked this holder to close.
func (h *Holder) Evicted() bool { return h.evicted.Load() }

// Set says the holder now holds n bytes. Growing past the budget picks
// holders to close (this one among them, when it holds the most).
func (h *Holder) Set(n int64) {
	d := n - h.held.Swap(n)
	if d == 0 {
		return
	}
	if total := h.b.total.Add(d); d > 0 && total > h.b.limit {
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

// over picks the holders holding the most until what the others hold is
// within the limit, as Redis's maxmemory-clients does.
func (b *Budget) over() {
	b.mu.Lock()
	defer b.mu.Unlock()
	over := b.total.Load() - b.limit
	hs := make([]*Holder, 0, len(b.holders))
	for h := range b.holders {
		switch {
		case h.evicted.Load():
			over -= h.Held() // closing already: its bytes are as good as returned
		case h.Held() > 0: // closing one that holds nothing would return nothing
			hs = append(hs, h)
		}
	}
	if over <= 0 {
		return
	}
	// The largest first; of equal ones the newest, which has sent the
	// least of what it announced (a client that a reservation for its
	// announced argument put over the budget is closed before one that
	// holds as much and has sent more of it).
	slices.SortFunc(hs, func(x, y *Holder) int {
		return cmp.Or(cmp.Compare(y.Held(), x.Held()), cmp.Compare(y.seq, x.seq))
	})
	for _, h := range hs {
		if over <= 0 {
			break
		}
		held := h.Held()
		over -= held
		h.evicted.Store(true)
		h.evict(held)
	}
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
