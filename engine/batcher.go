package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// BatcherConfig configures a Batcher. Zero values mean the documented
// defaults.
type BatcherConfig struct {
	// Store decides the batches: the Redis store.
	Store Store
	// MaxBatch caps the requests sent in one round trip. Zero means 1024.
	// A single caller's pipeline larger than this still goes whole.
	MaxBatch int
	// MaxInFlight caps the round trips in flight at once. Zero means 1:
	// the next batch gathers for the whole of the round trip in flight,
	// so batches are larger and Redis and the sidecar each spend less per
	// decision (at -c 50 -P 1, about a tenth less Redis CPU than with 2,
	// measured with go run ./bench). More lanes help a Redis far away.
	MaxInFlight int
	// OnBatch, if set, is called after each round trip with its start, its
	// size and its error: the hook for metrics and traces.
	OnBatch func(start time.Time, size int, err error)
	// Timeout bounds each call, from when it is queued to when its round
	// trip returns: a call that waits for a round trip in flight has only
	// what is left for its own. Zero means 100ms: a healthy Redis answers
	// in well under a millisecond, so a slow one is a failed one.
	Timeout time.Duration
	// Now is the clock OnBatch's start is read from; nil means time.Now.
	// (The round trip's deadline is the context's, on the real clock.)
	Now func() time.Time
}

// Batcher is a Store that gathers the requests of all its callers into
// batches for the Store behind it, so that many decisions share one round
// trip. It uses no timer: whatever is queued when a round trip can start
// goes at once, and while round trips are in flight the next batch
// gathers, so a lone request never waits and a busy one waits for at most
// one round trip.
//
// There are no worker goroutines: a caller that finds a round trip free
// leads it itself, sending the queue (its own request among it), and when
// the round trip returns hands the lead to the first caller still queued.
// A lone request thus reaches the store without a goroutine switch.
type Batcher struct {
	store    Store
	sender   Sender // store, when it is one: round trips are sent, not waited for
	maxBatch int
	inFlight int
	timeout  time.Duration
	onBatch  func(time.Time, int, error)
	now      func() time.Time

	mu      sync.Mutex
	pending []*call       // guarded by mu
	leaders int           // round trips led now, or handed to a caller about to lead; guarded by mu
	closed  bool          // guarded by mu
	drained chan struct{} // closed when closed and leaders reaches 0; guarded by mu

	calls   sync.Pool
	scratch sync.Pool // *batchScratch
	waiters sync.Pool // *waiter
	batches atomic.Uint64
	decided atomic.Uint64
}

// call is one caller's requests, waiting in the queue.
type call struct {
	reqs []Request
	res  []Result
	err  error
	// done, for a call that does not wait (Submit), is told when its
	// results are in; a call that waits (Decide) is woken instead.
	done func(error)
	// deadline is when the call's answer is due: Timeout after it was
	// queued, however long it waited for a round trip to be free.
	deadline time.Time
	asked    bool // handed the lead, not yet taken; guarded by Batcher.mu
	// wake tells the caller false when its results are in, true when it
	// must lead a round trip. Two slots: a call asked to lead can be
	// decided by another leader before it wakes.
	wake chan bool
}

// batchScratch is a leader's buffers, pooled between round trips.
type batchScratch struct {
	batch []*call
	reqs  []Request
	res   []Result
	start time.Time // when the round trip started, for OnBatch
	// landed completes a round trip sent through a Sender: Batcher.landed
	// bound to this scratch.
	landed func(error)
}

// waiter is how a caller of Decide waits for a round trip sent through a
// Sender.
type waiter struct {
	ch   chan error
	done func(error)
}

// ErrClosed is returned by a Batcher's Decide after Close.
var ErrClosed = errors.New("engine: batcher closed")

// ErrQueuedTooLong fails a batch whose calls spent their whole Timeout
// waiting for a round trip to be free: it is not sent.
var ErrQueuedTooLong = errors.New("engine: the round trip's deadline passed while it waited for the one in flight")

var _ Submitter = (*Batcher)(nil)

// NewBatcher returns a batcher in front of cfg.Store.
func NewBatcher(cfg BatcherConfig) (*Batcher, error) {
	if cfg.Store == nil {
		return nil, errors.New("engine: batcher needs a store")
	}
	if cfg.MaxBatch < 0 || cfg.MaxInFlight < 0 || cfg.Timeout < 0 {
		return nil, errors.New("engine: batcher sizes and timeout must not be negative")
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 1024
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 1
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	b := &Batcher{store: cfg.Store, maxBatch: cfg.MaxBatch, inFlight: cfg.MaxInFlight,
		timeout: cfg.Timeout, onBatch: cfg.OnBatch, now: cfg.Now}
	b.sender, _ = cfg.Store.(Sender)
	b.calls.New = func() any { return &call{wake: make(chan bool, 2)} }
	b.scratch.New = func() any {
		sc := new(batchScratch)
		sc.landed = func(err error) { b.landed(sc, err) }
		return sc
	}
	b.waiters.New = func() any {
		w := &waiter{ch: make(chan error, 1)}
		w.done = func(err error) { w.ch <- err }
		return w
	}
	return b, nil
}

// Decide queues reqs and waits for their round trip, leading it when one
// is free. It does not return before its round trip does, so res is never
// written after it returns; the round trip's own deadline (Timeout) bounds
// the wait, and ctx is only checked on entry.
func (b *Batcher) Decide(ctx context.Context, reqs []Request, res []Result) error {
	if len(reqs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.sender != nil {
		w := b.waiters.Get().(*waiter)
		b.Submit(reqs, res, w.done)
		err := <-w.ch
		b.waiters.Put(w)
		return err
	}
	c := b.calls.Get().(*call)
	c.reqs, c.res, c.err, c.deadline = reqs, res, nil, time.Now().Add(b.timeout)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.calls.Put(c)
		return ErrClosed
	}
	b.pending = append(b.pending, c)
	lead := b.leaders < b.inFlight
	if lead {
		b.leaders++
	}
	b.mu.Unlock()
	for {
		if lead && b.lead(c) {
			// A call that does not wait is next: a goroutine of its own
			// leads on, so that this caller is not kept for it.
			go b.leadOn()
		}
		if lead = <-c.wake; !lead {
			break
		}
	}
	err := c.err
	c.reqs, c.res = nil, nil
	b.calls.Put(c)
	return err
}

// Submit queues reqs without waiting and calls done once their round trip
// returns. When a round trip is free the caller sends it through a Sender
// and goes on at once, or else a goroutine leads it, so that the caller
// (an event loop) goes on at once too; otherwise the requests gather for
// the round trip after the one in flight.
func (b *Batcher) Submit(reqs []Request, res []Result, done func(error)) {
	if len(reqs) == 0 {
		done(nil)
		return
	}
	c := b.calls.Get().(*call)
	c.reqs, c.res, c.err, c.done, c.deadline = reqs, res, nil, done, time.Now().Add(b.timeout)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		c.reqs, c.res, c.done = nil, nil, nil
		b.calls.Put(c)
		done(ErrClosed)
		return
	}
	b.pending = append(b.pending, c)
	lead := b.leaders < b.inFlight
	if lead {
		b.leaders++
	}
	b.mu.Unlock()
	switch {
	case lead && b.sender != nil:
		b.send()
	case lead:
		go b.leadOn()
	}
}

// send sends the queue's head through the Sender and returns; the round
// trip's completion (landed) hands the lead on. A batch whose deadline
// passed while it queued fails unsent, and the next is tried.
func (b *Batcher) send() {
	for {
		sc := b.scratch.Get().(*batchScratch)
		b.mu.Lock()
		sc.batch = b.take(sc.batch[:0])
		b.mu.Unlock()
		if len(sc.batch) > 0 {
			if deadline := b.gather(sc); time.Until(deadline) > 0 {
				b.sender.Send(deadline, sc.reqs, sc.res, sc.landed)
				return
			}
			b.finish(sc, ErrQueuedTooLong)
		}
		if !b.next(sc) {
			return
		}
	}
}

// landed completes a round trip sent through the Sender, and sends the
// next while calls are queued.
func (b *Batcher) landed(sc *batchScratch, err error) {
	b.finish(sc, err)
	if b.next(sc) {
		b.send()
	}
}

// next puts sc back and hands the lead on; it reports whether the lead
// stays with this leader (see handOff).
func (b *Batcher) next(sc *batchScratch) (again bool) {
	b.mu.Lock()
	again = b.handOff()
	b.mu.Unlock()
	clear(sc.batch)
	b.scratch.Put(sc)
	return again
}

// leadOn leads round trips for as long as calls that do not wait are next.
func (b *Batcher) leadOn() {
	for b.lead(nil) {
	}
}

// lead runs one round trip for the queue's head, then hands the lead on,
// and reports whether the lead stays with its caller (handOff). self is
// the leading caller's call, which may still be queued; nil for leadOn.
func (b *Batcher) lead(self *call) (again bool) {
	sc := b.scratch.Get().(*batchScratch)
	b.mu.Lock()
	if self != nil {
		self.asked = false // its turn is taken; if still queued, it may be asked again
	}
	sc.batch = b.take(sc.batch[:0])
	b.mu.Unlock()
	if len(sc.batch) > 0 {
		b.run(sc)
	}
	return b.next(sc)
}

// take moves queued calls into batch, up to maxBatch requests (at least
// one call). b.mu is held.
func (b *Batcher) take(batch []*call) []*call {
	n, i := 0, 0
	for ; i < len(b.pending); i++ {
		c := b.pending[i]
		if i > 0 && n+len(c.reqs) > b.maxBatch {
			break
		}
		n += len(c.reqs)
		c.asked = false
		batch = append(batch, c)
	}
	rest := copy(b.pending, b.pending[i:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	return batch
}

// handOff passes this leader's turn to the first queued caller not already
// asked to lead when that caller waits (Decide); when it does not wait
// (Submit), the turn stays with this leader and handOff returns true. With
// no one queued the turn is given up. b.mu is held.
func (b *Batcher) handOff() (again bool) {
	for _, c := range b.pending {
		if c.asked {
			continue
		}
		if c.done != nil {
			return true
		}
		c.asked = true
		c.wake <- true
		return false
	}
	b.leaders--
	if b.closed && b.leaders == 0 && b.drained != nil {
		close(b.drained)
		b.drained = nil
	}
	return false
}

// run decides one batch and hands each caller its results.
func (b *Batcher) run(sc *batchScratch) {
	deadline := b.gather(sc)
	var err error
	if time.Until(deadline) <= 0 {
		err = ErrQueuedTooLong
	} else {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err = b.store.Decide(ctx, sc.reqs, sc.res)
		cancel()
	}
	b.finish(sc, err)
}

// gather joins the batch's requests into sc.reqs, sizes sc.res, and
// returns the round trip's deadline.
func (b *Batcher) gather(sc *batchScratch) time.Time {
	sc.reqs = sc.reqs[:0]
	for _, c := range sc.batch {
		sc.reqs = append(sc.reqs, c.reqs...)
	}
	if cap(sc.res) < len(sc.reqs) {
		sc.res = make([]Result, len(sc.reqs))
	}
	sc.res = sc.res[:len(sc.reqs)]
	if b.onBatch != nil {
		sc.start = b.now()
	}
	// The round trip is due when its oldest call is: a call that queued
	// behind a slow round trip has only what is left of its own Timeout,
	// so that no answer waits more than Timeout in all.
	deadline := sc.batch[0].deadline
	for _, c := range sc.batch[1:] {
		if c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	return deadline
}

// finish hands each caller of a decided batch its results, or err.
func (b *Batcher) finish(sc *batchScratch, err error) {
	if b.onBatch != nil {
		b.onBatch(sc.start, len(sc.reqs), err)
	}
	b.batches.Add(1)
	b.decided.Add(uint64(len(sc.reqs)))
	off := 0
	for _, c := range sc.batch {
		n := len(c.reqs)
		if err != nil {
			c.err = err
		} else {
			copy(c.res, sc.res[off:off+n])
		}
		off += n
		if done := c.done; done != nil {
			cerr := c.err
			c.reqs, c.res, c.done = nil, nil, nil
			b.calls.Put(c)
			done(cerr)
			continue
		}
		c.wake <- false
	}
	clear(sc.reqs) // drop key strings for the collector
	clear(sc.res)
}

// Reset passes through: resets are rare and must not wait behind a batch.
func (b *Batcher) Reset(ctx context.Context, key string, limits ...NamedLimit) error {
	return b.store.Reset(ctx, key, limits...)
}

// Close refuses new calls and waits until the queued ones are decided.
func (b *Batcher) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	if b.leaders == 0 {
		b.mu.Unlock()
		return
	}
	drained := make(chan struct{})
	b.drained = drained
	b.mu.Unlock()
	<-drained
}

// BatcherStats counts what the batcher did, for INFO and metrics.
type BatcherStats struct {
	Batches   uint64 // round trips made
	Decisions uint64 // requests sent in them
}

// Stats returns the counts so far.
func (b *Batcher) Stats() BatcherStats {
	return BatcherStats{Batches: b.batches.Load(), Decisions: b.decided.Load()}
}
