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
	// MaxInFlight caps the round trips in flight at once. Zero means 4.
	MaxInFlight int
	// OnBatch, if set, is called after each round trip with its start, its
	// size and its error: the hook for metrics and traces.
	OnBatch func(start time.Time, size int, err error)
	// Timeout bounds each round trip. Zero means 100ms: a healthy Redis
	// answers in well under a millisecond, so a slow one is a failed one.
	Timeout time.Duration
}

// Batcher is a Store that gathers the requests of all its callers into
// batches for the Store behind it, so that many decisions share one round
// trip. It uses no timer: whatever is queued when a worker is free goes at
// once, and while batches are in flight the next one gathers, so a lone
// request never waits and a busy one waits for at most one round trip.
type Batcher struct {
	store    Store
	maxBatch int
	timeout  time.Duration
	onBatch  func(time.Time, int, error)
	wake     chan struct{} // one token per worker that should look at the queue
	done     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	pending []*call // guarded by mu
	closed  bool    // guarded by mu

	calls   sync.Pool
	batches atomic.Uint64
	decided atomic.Uint64
}

// call is one caller's requests, waiting for a worker.
type call struct {
	reqs []Request
	res  []Result
	err  error
	done chan struct{}
}

// ErrClosed is returned by a Batcher's Decide after Close.
var ErrClosed = errors.New("engine: batcher closed")

var _ Store = (*Batcher)(nil)

// NewBatcher starts the batcher's workers; Close stops them.
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
		cfg.MaxInFlight = 4
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	b := &Batcher{
		store:    cfg.Store,
		maxBatch: cfg.MaxBatch,
		timeout:  cfg.Timeout,
		onBatch:  cfg.OnBatch,
		wake:     make(chan struct{}, cfg.MaxInFlight),
		done:     make(chan struct{}),
	}
	b.calls.New = func() any { return &call{done: make(chan struct{}, 1)} }
	for range cfg.MaxInFlight {
		b.wg.Add(1)
		go b.work()
	}
	return b, nil
}

// Decide queues reqs and waits for their batch. It does not return before
// its batch does, so res is never written after it returns; the batch's
// own deadline (Timeout) bounds the wait, and ctx is only checked on entry.
func (b *Batcher) Decide(ctx context.Context, reqs []Request, res []Result) error {
	if len(reqs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c := b.calls.Get().(*call)
	c.reqs, c.res, c.err = reqs, res, nil
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.calls.Put(c)
		return ErrClosed
	}
	b.pending = append(b.pending, c)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // every worker already has a wake-up coming
	}
	<-c.done
	err := c.err
	c.reqs, c.res = nil, nil
	b.calls.Put(c)
	return err
}

// Reset passes through: resets are rare and must not wait behind a batch.
func (b *Batcher) Reset(ctx context.Context, key string) error {
	return b.store.Reset(ctx, key)
}

// Close stops the workers after the queued calls are decided.
func (b *Batcher) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	close(b.done)
	b.wg.Wait()
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

func (b *Batcher) work() {
	defer b.wg.Done()
	var (
		batch []*call
		reqs  []Request
		res   []Result
	)
	for {
		select {
		case <-b.wake:
		case <-b.done:
			// Drain what callers queued before Close.
			for b.take(&batch) {
				reqs, res = b.run(batch, reqs, res)
			}
			return
		}
		for b.take(&batch) {
			reqs, res = b.run(batch, reqs, res)
		}
	}
}

// take moves queued calls into batch, up to maxBatch requests (at least one
// call), and reports whether there were any.
func (b *Batcher) take(batch *[]*call) bool {
	*batch = (*batch)[:0]
	b.mu.Lock()
	defer b.mu.Unlock()
	n, i := 0, 0
	for ; i < len(b.pending); i++ {
		c := b.pending[i]
		if i > 0 && n+len(c.reqs) > b.maxBatch {
			break
		}
		n += len(c.reqs)
		*batch = append(*batch, c)
	}
	rest := copy(b.pending, b.pending[i:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	return len(*batch) > 0
}

// run decides one batch and hands each caller its results. reqs and res are
// the worker's buffers, grown as needed and returned for reuse.
func (b *Batcher) run(batch []*call, reqs []Request, res []Result) ([]Request, []Result) {
	reqs = reqs[:0]
	for _, c := range batch {
		reqs = append(reqs, c.reqs...)
	}
	if cap(res) < len(reqs) {
		res = make([]Result, len(reqs))
	}
	res = res[:len(reqs)]
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	err := b.store.Decide(ctx, reqs, res)
	cancel()
	if b.onBatch != nil {
		b.onBatch(start, len(reqs), err)
	}
	b.batches.Add(1)
	b.decided.Add(uint64(len(reqs)))
	off := 0
	for _, c := range batch {
		n := len(c.reqs)
		if err != nil {
			c.err = err
		} else {
			copy(c.res, res[off:off+n])
		}
		off += n
		c.done <- struct{}{}
	}
	clear(reqs) // drop key strings for the collector
	clear(res)
	return reqs, res
}

// Queued reports how many callers wait for a worker.
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}
