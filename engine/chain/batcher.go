package chain

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// BatcherConfig configures a Batcher. Zero values mean the documented
// defaults.
type BatcherConfig struct {
	// Store decides the batches: the Redis store. Its Submit should
	// return once the batch is on its way, since the batcher submits from
	// its callers' goroutines (an event loop's among them).
	Store engine.Store
	// Shard, if set, routes each request to the store that decides it
	// (upstream.Store.Shards on Redis Cluster: the master of its key), and
	// each such store gets its own lane: queue, batches and MaxInFlight
	// round trips. Nil: every batch goes to Store.
	Shard engine.Shards
	// MaxBatch caps the requests sent in one round trip. Zero means 1024.
	// A single caller's pipeline larger than this still goes whole.
	MaxBatch int
	// MaxInFlight caps the round trips in flight at once. Zero means 1:
	// the next batch gathers for the whole of the round trip in flight,
	// so batches are larger and Redis spends less per decision. The
	// sidecar uses 2, with its event loop handing a large round over in
	// two parts, so that Redis works on one while the loop answers the
	// other; more lanes also help a Redis far away.
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
	// (The round trip's deadline is on the real clock.)
	Now func() time.Time
}

// Batcher is a Store that gathers the requests of all its callers into
// batches for the store behind it, so that many decisions share one round
// trip. It uses no timer: whatever is queued when a round trip can start
// goes at once, and while round trips are in flight the next batch
// gathers, so a lone request never waits and a busy one waits for at most
// one round trip.
//
// It has no goroutines of its own: a caller that finds a round trip free
// sends it (its own requests among the queue) and goes on, and the round
// trip's completion sends the next batch, if calls are queued, from the
// goroutine that completed it. An event loop thus writes its batch to
// Redis itself.
//
// With Shard set (Redis Cluster), each shard (master) has a lane of its
// own: its queue and its MaxInFlight round trips, so that a master's
// batch never waits for another master's round trip, and a caller's
// requests are split by shard (engine.SubmitSplit).
type Batcher struct {
	store    engine.Store
	shard    engine.Shards // nil: one lane, to store
	maxBatch int
	inFlight int
	timeout  time.Duration
	onBatch  func(time.Time, int, error)
	now      func() time.Time

	one   *lane                   // the lane without Shard
	lanes atomic.Pointer[[]*lane] // with Shard: one per shard, copied on write under mu
	route engine.Shards           // with Shard: the lane of a request's shard

	mu     sync.Mutex
	closed bool // guarded by mu

	calls   sync.Pool
	scratch sync.Pool // *batchScratch
	batches atomic.Uint64
	decided atomic.Uint64
}

// lane is one store's queue and round trips.
type lane struct {
	b     *Batcher
	store engine.Store

	mu      sync.Mutex
	pending []*call       // guarded by mu
	flying  int           // round trips in flight, or about to be sent; guarded by mu
	closed  bool          // guarded by mu
	drained chan struct{} // closed when closed and flying reaches 0; guarded by mu
}

// call is one caller's requests, waiting in the queue.
type call struct {
	reqs []engine.Request
	res  []engine.Result
	done func(error) // told when the results are in
	// deadline is when the call's answer is due: Timeout after it was
	// queued, however long it waited for a round trip to be free, or the
	// caller's own deadline if that is sooner.
	deadline time.Time
}

// batchScratch is a round trip's buffers, pooled between round trips.
type batchScratch struct {
	lane  *lane
	batch []*call
	reqs  []engine.Request
	res   []engine.Result
	start time.Time // when the round trip started, for OnBatch
	// landed completes the round trip: lane.landed bound to this
	// scratch.
	landed func(error)
}

// ErrClosed is the error a Batcher's Submit completes with after Close.
var ErrClosed = errors.New("chain: batcher closed")

// ErrQueuedTooLong fails a batch whose calls spent their whole Timeout
// waiting for a round trip to be free: it is not sent.
var ErrQueuedTooLong = errors.New("chain: the round trip's deadline passed while it waited for the one in flight")

var _ engine.Store = (*Batcher)(nil)

// NewBatcher returns a batcher in front of cfg.Store.
func NewBatcher(cfg BatcherConfig) (*Batcher, error) {
	if cfg.Store == nil {
		return nil, errors.New("chain: batcher needs a store")
	}
	if cfg.MaxBatch < 0 || cfg.MaxInFlight < 0 || cfg.Timeout < 0 {
		return nil, errors.New("chain: batcher sizes and timeout must not be negative")
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
	b := &Batcher{store: cfg.Store, shard: cfg.Shard, maxBatch: cfg.MaxBatch, inFlight: cfg.MaxInFlight,
		timeout: cfg.Timeout, onBatch: cfg.OnBatch, now: cfg.Now}
	b.calls.New = func() any { return new(call) }
	b.scratch.New = func() any {
		sc := new(batchScratch)
		sc.landed = func(err error) { sc.lane.landed(sc, err) }
		return sc
	}
	if b.shard == nil {
		b.one = &lane{b: b, store: b.store}
	} else {
		b.lanes.Store(new([]*lane))
		b.route = func(r *engine.Request) (engine.Store, error) {
			st, err := b.shard(r)
			if err != nil {
				return nil, err
			}
			return b.laneOf(st)
		}
	}
	return b, nil
}

// laneOf returns shard st's lane, made on first use. Shards are few (a
// Cluster's masters), so a scan of a copy-on-write slice finds it.
func (b *Batcher) laneOf(st engine.Store) (*lane, error) {
	for _, l := range *b.lanes.Load() {
		if l.store == st {
			return l, nil
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	lanes := *b.lanes.Load()
	for _, l := range lanes {
		if l.store == st {
			return l, nil
		}
	}
	l := &lane{b: b, store: st}
	grown := append(slices.Clip(lanes), l)
	b.lanes.Store(&grown)
	return l, nil
}

// Submit queues reqs without waiting and calls done once their round trip
// returns. When a round trip is free the caller sends it and goes on at
// once; otherwise the requests gather for the round trip after the one in
// flight. The round trip is due by deadline or Timeout after now, the
// sooner; a zero deadline means Timeout. With Shard, each shard's
// requests go to its own lane.
func (b *Batcher) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	if b.one != nil {
		b.one.Submit(reqs, res, deadline, done)
		return
	}
	engine.SubmitSplit(b.route, reqs, res, deadline, done)
}

// Submit is Batcher.Submit on one lane.
func (l *lane) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	if len(reqs) == 0 {
		done(nil)
		return
	}
	b := l.b
	due := time.Now().Add(b.timeout)
	if !deadline.IsZero() && deadline.Before(due) {
		due = deadline
	}
	c := b.calls.Get().(*call)
	c.reqs, c.res, c.done, c.deadline = reqs, res, done, due
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.reqs, c.res, c.done = nil, nil, nil
		b.calls.Put(c)
		done(ErrClosed)
		return
	}
	l.pending = append(l.pending, c)
	free := l.flying < b.inFlight
	if free {
		l.flying++
	}
	l.mu.Unlock()
	if free {
		l.send()
	}
}

// Reset passes through (lane is an engine.Store only for SubmitSplit).
func (l *lane) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	return l.store.Reset(ctx, key, limits...)
}

// send sends the queue's head and returns; the round trip's completion
// (landed) sends the next. A batch whose deadline passed while it queued
// fails unsent, and the next is tried.
func (l *lane) send() {
	b := l.b
	for {
		sc := b.scratch.Get().(*batchScratch)
		sc.lane = l
		l.mu.Lock()
		sc.batch = l.take(sc.batch[:0])
		l.mu.Unlock()
		if len(sc.batch) > 0 {
			if deadline := b.gather(sc); time.Until(deadline) > 0 {
				l.store.Submit(sc.reqs, sc.res, deadline, sc.landed)
				return
			}
			b.finish(sc, ErrQueuedTooLong)
		}
		if !l.next(sc) {
			return
		}
	}
}

// landed completes a round trip, and sends the next while calls are
// queued.
func (l *lane) landed(sc *batchScratch, err error) {
	l.b.finish(sc, err)
	if l.next(sc) {
		l.send()
	}
}

// next puts sc back and reports whether calls are queued for another
// round trip; with none, the round trip's slot is given up.
func (l *lane) next(sc *batchScratch) (again bool) {
	clear(sc.batch)
	sc.lane = nil
	l.b.scratch.Put(sc)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) > 0 {
		return true
	}
	l.flying--
	if l.closed && l.flying == 0 && l.drained != nil {
		close(l.drained)
		l.drained = nil
	}
	return false
}

// take moves queued calls into batch, up to maxBatch requests (at least
// one call). l.mu is held.
func (l *lane) take(batch []*call) []*call {
	n, i := 0, 0
	for ; i < len(l.pending); i++ {
		c := l.pending[i]
		if i > 0 && n+len(c.reqs) > l.b.maxBatch {
			break
		}
		n += len(c.reqs)
		batch = append(batch, c)
	}
	rest := copy(l.pending, l.pending[i:])
	clear(l.pending[rest:])
	l.pending = l.pending[:rest]
	return batch
}

// gather joins the batch's requests into sc.reqs, sizes sc.res, and
// returns the round trip's deadline.
func (b *Batcher) gather(sc *batchScratch) time.Time {
	sc.reqs = sc.reqs[:0]
	for _, c := range sc.batch {
		sc.reqs = append(sc.reqs, c.reqs...)
	}
	if cap(sc.res) < len(sc.reqs) {
		sc.res = make([]engine.Result, len(sc.reqs))
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
		if err == nil {
			copy(c.res, sc.res[off:off+n])
		}
		off += n
		done := c.done
		c.reqs, c.res, c.done = nil, nil, nil
		b.calls.Put(c)
		done(err)
	}
	clear(sc.reqs) // drop key strings for the collector
	clear(sc.res)
}

// Reset passes through: resets are rare and must not wait behind a batch.
// With Shard, it goes to the key's shard.
func (b *Batcher) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	if b.shard == nil {
		return b.store.Reset(ctx, key, limits...)
	}
	st, err := b.shard(&engine.Request{Key: key})
	if err != nil {
		return err
	}
	return st.Reset(ctx, key, limits...)
}

// Close refuses new calls and waits until the queued ones are decided.
func (b *Batcher) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true // no lane is made from now on
	lanes := []*lane{b.one}
	if b.one == nil {
		lanes = *b.lanes.Load()
	}
	b.mu.Unlock()
	for _, l := range lanes {
		l.mu.Lock()
		l.closed = true
		var drained chan struct{}
		if l.flying > 0 {
			drained = make(chan struct{})
			l.drained = drained
		}
		l.mu.Unlock()
		if drained != nil {
			<-drained
		}
	}
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
