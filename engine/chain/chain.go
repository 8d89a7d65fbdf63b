// Package chain is what stands between the service and the shared store
// (the central Redis), in this order from the service down:
//
//	grants    (when on) a hot key's requests admitted from units the store
//	          granted this sidecar, with no round trip (grants.go)
//	guard     answers by each request's failure mode while the store cannot
//	          (the in-memory store enforcing limits locally, by default),
//	          with a breaker that stops sending to a store that keeps failing
//	deny      a refused key is refused locally until its retry-after
//	batcher   all callers' decisions share round trips
//	store     the shared store: one batch, one round trip
//
// Each part is an engine.Store wrapping the next, with one entry point
// (Submit). The grants sit above the guard so that a sidecar that loses
// the store spends what it holds first, and the guard refuses a grant it
// cannot ask for. New owns the order, so that the sidecar and the tests build
// the same chain; the parts' constructors stay exported for the tests of
// each part alone. Leases (engine.Leaser) go from the guard straight to the
// shared store: a concurrency refusal is never remembered or batched.
//
// chain imports engine, the chosen libraries and internal/watch (whose
// Every ticks the idle check, as it does the other watchers) only: the
// shared store is any engine.Store, which package upstream implements.
package chain

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/watch"
)

// Config configures a Chain. Zero values mean the documented defaults of
// the parts they configure.
type Config struct {
	// Store is the shared store: the Redis store. Required.
	Store engine.Store
	// Shard, if set, gives each of the store's shards (a Cluster's
	// masters) its own batches and round trips (BatcherConfig.Shard).
	Shard engine.Shards
	// Local decides FailLocal requests in this sidecar alone: the
	// in-memory store (GuardConfig.Local). Nil makes FailLocal act as
	// FailOpen.
	Local engine.Store
	// Leaser holds the shared store's leases; nil means Store's own if it
	// is a Leaser.
	Leaser engine.Leaser
	// Sidecars, if set, divides FailLocal's limits among the fleet
	// (GuardConfig.Sidecars); nil: each sidecar enforces the whole limit.
	Sidecars func() int
	// Default is the failure mode of requests that name none
	// (GuardConfig.Default).
	Default engine.FailureMode
	// Timeout bounds each round trip, from when its call is queued, and
	// each lease call. Zero means 100ms.
	Timeout time.Duration
	// MaxBatch and MaxInFlight size the batches and the round trips in
	// flight (BatcherConfig); OnBatch observes each round trip.
	MaxBatch, MaxInFlight int
	OnBatch               func(start time.Time, size int, err error)
	// DenyCacheSize bounds the refusals remembered
	// (DenyCacheConfig.MaxEntries).
	DenyCacheSize int
	// Threshold, ProbeEvery and OnBreaker tune and watch the guard's
	// breaker (GuardConfig).
	Threshold  int
	ProbeEvery time.Duration
	OnBreaker  func(open bool, cause error)
	// Check, if set, asks the shared store whether it can decide, without
	// deciding anything (upstream.Store.Check). The chain then runs it
	// every CheckEvery while no round trip has answered meanwhile, so that
	// a sidecar sent no traffic still knows when the store fails and when
	// it is back; each run is bounded by Timeout.
	Check func(ctx context.Context) error
	// CheckEvery is how often the idle check runs. Zero means 1s.
	CheckEvery time.Duration
	// Now is the clock of the grants, the guard and the deny cache; nil
	// means time.Now.
	Now func() time.Time
	// Grants puts the grant layer on top (GrantsConfig): hot keys decided
	// from units granted to this sidecar. Off by default.
	Grants bool
	// GrantKeys bounds the keys the grant layer counts
	// (GrantsConfig.MaxKeys).
	GrantKeys int
}

// Chain is the guard, the deny cache and the batcher in front of a shared
// store, as one engine.Store and engine.Leaser.
type Chain struct {
	top     engine.Store // grants, or the guard without them
	grants  *Grants      // nil: off
	guard   *Guard
	deny    *DenyCache
	batcher *Batcher
	check   func(context.Context) error
	timeout time.Duration
	denyCap int // DenyCacheConfig.MaxEntries, for INFO

	stop    context.CancelFunc // ends the idle checks; nil without Check
	stopped chan struct{}      // closed when they have ended

	stopFlush    context.CancelFunc // ends the grants' flush; nil without grants
	flushStopped chan struct{}
}

var (
	_ engine.Store  = (*Chain)(nil)
	_ engine.Leaser = (*Chain)(nil)
)

// New builds the chain in front of cfg.Store and starts its idle checks.
// Close ends them and drains the batcher.
func New(cfg Config) (*Chain, error) {
	if cfg.Store == nil {
		return nil, errors.New("chain: Config.Store is required")
	}
	if cfg.CheckEvery < 0 {
		return nil, errors.New("chain: negative Config.CheckEvery")
	}
	b, err := NewBatcher(BatcherConfig{Store: cfg.Store, Shard: cfg.Shard, MaxBatch: cfg.MaxBatch, MaxInFlight: cfg.MaxInFlight,
		Timeout: cfg.Timeout, OnBatch: cfg.OnBatch})
	if err != nil {
		return nil, err
	}
	if cfg.DenyCacheSize == 0 {
		cfg.DenyCacheSize = defaultDenyCacheSize // the default, known here for INFO
	}
	dcfg := DenyCacheConfig{Store: b, MaxEntries: cfg.DenyCacheSize, Now: cfg.Now}
	if cfg.Grants {
		// Units another sidecar's grant held come back before a
		// window's retry-after.
		dcfg.WindowHold = GrantsReturnWithin
	}
	d, err := NewDenyCache(dcfg)
	if err != nil {
		return nil, err
	}
	leaser := cfg.Leaser
	if leaser == nil {
		leaser, _ = cfg.Store.(engine.Leaser)
	}
	g, err := NewGuard(GuardConfig{Store: d, Local: cfg.Local, Default: cfg.Default, Threshold: cfg.Threshold,
		ProbeEvery: cfg.ProbeEvery, OnBreaker: cfg.OnBreaker, Now: cfg.Now, Leaser: leaser, LeaseTimeout: cfg.Timeout,
		Sidecars: cfg.Sidecars})
	if err != nil {
		return nil, err
	}
	c := &Chain{top: g, guard: g, deny: d, batcher: b, check: cfg.Check, timeout: b.timeout, denyCap: cfg.DenyCacheSize}
	if cfg.Grants {
		if c.grants, err = NewGrants(GrantsConfig{Store: g, MaxKeys: cfg.GrantKeys, Now: cfg.Now, Away: g.ChargeLocal, Failing: g.Failing, Sidecars: g.share}); err != nil {
			return nil, err
		}
		c.top = c.grants
		ctx, stop := context.WithCancel(context.Background())
		c.stopFlush, c.flushStopped = stop, make(chan struct{})
		go func() {
			defer close(c.flushStopped)
			c.grants.Run(ctx)
		}()
	}
	if c.check != nil {
		ctx, stop := context.WithCancel(context.Background())
		c.stop, c.stopped = stop, make(chan struct{})
		every := cfg.CheckEvery
		if every == 0 {
			every = time.Second
		}
		go func() {
			defer close(c.stopped)
			c.checkWhileIdle(ctx, every)
		}()
	}
	return c, nil
}

// Submit implements engine.Store: through the grants (when on), the
// guard, the deny cache and the batcher to the shared store.
func (c *Chain) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	c.top.Submit(reqs, res, deadline, done)
}

// Reset implements engine.Store: it drops this sidecar's grants of the
// key, resets it in the shared store and in the local one, and drops its
// remembered refusals (Guard.Reset).
func (c *Chain) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	return c.top.Reset(ctx, key, limits...)
}

// Acquire implements engine.Leaser through the guard (Guard.Acquire).
func (c *Chain) Acquire(ctx context.Context, r engine.LeaseRequest) (engine.LeaseDecision, error) {
	return c.guard.Acquire(ctx, r)
}

// Release implements engine.Leaser through the guard (Guard.Release).
func (c *Chain) Release(ctx context.Context, key, id string) (bool, error) {
	return c.guard.Release(ctx, key, id)
}

// Forget drops the key's remembered refusals and this sidecar's grants of
// it: for a reset that another sidecar announces, whose shared state is
// already gone.
func (c *Chain) Forget(key string) {
	if c.grants != nil {
		c.grants.Forget(key)
	}
	c.deny.Forget(key)
}

// DropGrants drops every grant this sidecar holds (Grants.DropAll): for a
// policy reload, whose limits may not be those the grants were taken
// under. Nothing without grants.
func (c *Chain) DropGrants() {
	if c.grants != nil {
		c.grants.DropAll()
	}
}

// Check runs Config.Check now, bounded by ctx alone (at start, a
// connection still dialing may take longer than a round trip's Timeout;
// the idle checks are bounded by Timeout), and tells
// the breaker its outcome (Guard.Health): a failure opens it at once. It
// returns the check's error, nil without a Check.
func (c *Chain) Check(ctx context.Context) error {
	if c.check == nil {
		return nil
	}
	err := c.check(ctx)
	c.guard.Health(err)
	return err
}

// checkWhileIdle checks the shared store every interval unless a round
// trip has answered meanwhile (decisions tell the breaker themselves).
func (c *Chain) checkWhileIdle(ctx context.Context, every time.Duration) {
	watch.Every(ctx, every, func() {
		if time.Since(c.guard.Stats().LastOutcome) < every {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		err := c.check(cctx)
		cancel()
		if ctx.Err() == nil { // not Close
			c.guard.Health(err)
		}
	})
}

// Close ends the idle checks, refuses new calls and waits until the queued
// ones are decided.
func (c *Chain) Close() {
	if c.stopFlush != nil {
		c.stopFlush()
		<-c.flushStopped
	}
	if c.stop != nil {
		c.stop()
		<-c.stopped
	}
	c.batcher.Close()
}

// Stats is the counts of every part, for INFO, metrics and readiness.
type Stats struct {
	Guard     GuardStats
	DenyCache DenyCacheStats
	Batcher   BatcherStats
}

// Stats returns the parts' counts so far.
func (c *Chain) Stats() Stats {
	return Stats{Guard: c.guard.Stats(), DenyCache: c.deny.Stats(), Batcher: c.batcher.Stats()}
}

// GrantStats returns the grant layer's counts (Grants.Stats), zero
// without grants. It walks the keys counted, so it is asked apart from
// Stats.
func (c *Chain) GrantStats() GrantStats {
	if c.grants == nil {
		return GrantStats{}
	}
	return c.grants.Stats()
}
