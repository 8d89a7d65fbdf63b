package chain

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// GuardConfig configures a Guard. Zero values mean the documented defaults.
type GuardConfig struct {
	// Store is the shared store the guard protects callers from: the deny
	// cache and batcher in front of Redis.
	Store engine.Store
	// Local enforces limits in this sidecar alone for FailLocal requests:
	// the in-memory store. Its Submit must answer before it returns and
	// never fail as a batch (the memory store's never does), since the
	// guard answers the batch as soon as Local's Submit returns. Nil makes
	// FailLocal behave as FailOpen.
	Local engine.Store
	// Default is the failure mode of requests that name none. Zero means
	// FailLocal when Local is set, FailOpen otherwise.
	Default engine.FailureMode
	// Threshold is how many failed round trips in a row open the breaker.
	// Zero means 3.
	Threshold int
	// ProbeEvery is how long the open breaker waits before it lets one
	// batch through to see whether the store is back. Zero means 250ms.
	ProbeEvery time.Duration
	// OnBreaker, if set, is called (outside any lock) when the breaker opens
	// (with the error that opened it) or closes (with nil), for logs.
	OnBreaker func(open bool, cause error)
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// Leaser holds the shared store's leases (guardlease.go); nil means
	// Store's own if it is a Leaser, else the guard holds no leases.
	// Local's leases, if it is a Leaser, answer FailLocal.
	Leaser engine.Leaser
	// LeaseTimeout bounds each call to Leaser. Zero means 100ms.
	LeaseTimeout time.Duration
	// MaxLocalLeases bounds how many leases granted by Local the guard
	// remembers, to release them there. Zero means 10,000.
	MaxLocalLeases int

	// Sidecars, if set, says how many sidecars share the fleet's limits,
	// as the shared store last told (at least 1; internal/fleet learns
	// it): FailLocal then decides with each limit, and each concurrency
	// limit, scaled to this sidecar's share, 1/Sidecars() of it
	// (share.go). Nil gives FailLocal the whole limit. Called on each
	// FailLocal decision: it must be quick and safe for concurrent use.
	Sidecars func() int
}

// Guard is a Store that keeps deciding when the shared store fails. Each
// request that the store cannot decide gets its failure mode's answer:
// allowed, refused, or decided by the local in-memory store. A breaker
// stops sending to a store that keeps failing, so that requests do not each
// wait out a deadline, and lets one batch through every ProbeEvery to find
// out when it is back; recovery needs no restart.
type Guard struct {
	store, local engine.Store
	def          engine.FailureMode
	threshold    int
	probeEvery   time.Duration
	onBreaker    func(bool, error)
	now          func() time.Time
	sidecars     func() int // GuardConfig.Sidecars: the local share (share.go)

	mu        sync.Mutex
	failures  int         // consecutive failed round trips; guarded by mu
	failing   atomic.Bool // failures > 0 or the breaker is open: record must lock
	openUntil time.Time   // zero while closed; guarded by mu
	probing   bool        // a probe is in flight; guarded by mu

	open     atomic.Bool
	fallback atomic.Uint64
	// unreplicated counts the durable requests answered by their failure
	// mode because the replicas did not acknowledge their charges.
	unreplicated atomic.Uint64
	lastRound    atomic.Int64 // UnixNano of the last outcome from the store
	flights      sync.Pool    // *guardFlight

	leases guardLeases
}

var _ engine.Store = (*Guard)(nil)

// NewGuard returns a guard with its breaker closed.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	if cfg.Store == nil {
		return nil, errors.New("chain: guard needs a store")
	}
	if cfg.Threshold < 0 || cfg.ProbeEvery < 0 || cfg.LeaseTimeout < 0 || cfg.MaxLocalLeases < 0 {
		return nil, errors.New("chain: guard threshold, probe interval, lease timeout and local leases must not be negative")
	}
	if cfg.Default == engine.FailDefault {
		cfg.Default = engine.FailOpen
		if cfg.Local != nil {
			cfg.Default = engine.FailLocal
		}
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = 3
	}
	if cfg.ProbeEvery == 0 {
		cfg.ProbeEvery = 250 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Guard{store: cfg.Store, local: cfg.Local, def: cfg.Default, threshold: cfg.Threshold,
		probeEvery: cfg.ProbeEvery, onBreaker: cfg.OnBreaker, now: cfg.Now, sidecars: cfg.Sidecars}
	g.leases = guardLeases{shared: cfg.Leaser, timeout: cmp.Or(cfg.LeaseTimeout, 100*time.Millisecond),
		max: cmp.Or(cfg.MaxLocalLeases, 10_000)}
	if g.leases.shared == nil {
		g.leases.shared, _ = cfg.Store.(engine.Leaser)
	}
	g.leases.local, _ = cfg.Local.(engine.Leaser)
	g.flights.New = func() any {
		f := &guardFlight{g: g}
		f.landed = f.land
		return f
	}
	return g, nil
}

// Submit sends the batch on to the store unless the breaker is open, and
// decides by failure mode whatever the store could not.
func (g *Guard) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	probe, ok := g.admit()
	if !ok {
		done(g.fail(reqs, res))
		return
	}
	f := g.flights.Get().(*guardFlight)
	f.reqs, f.res, f.done, f.probe = reqs, res, done, probe
	g.store.Submit(reqs, res, deadline, f.landed)
}

// guardFlight is a submitted batch the guard waits for; pooled, with its
// callback bound once, so that a submission allocates nothing.
type guardFlight struct {
	g      *Guard
	reqs   []engine.Request
	res    []engine.Result
	done   func(error)
	probe  bool
	landed func(error)
}

func (f *guardFlight) land(err error) {
	g, reqs, res, done, probe := f.g, f.reqs, f.res, f.done, f.probe
	f.reqs, f.res, f.done = nil, nil, nil
	g.flights.Put(f)
	if err != nil && errors.Is(err, engine.ErrNotDurable) {
		// The store answered; its replicas did not in time. The requests
		// get their failure mode, and the breaker, which protects every
		// request from a failing store, hears a success.
		g.record(nil, probe)
		g.unreplicated.Add(uint64(len(reqs)))
	} else {
		g.record(err, probe)
	}
	if err != nil {
		err = g.fail(reqs, res)
	}
	done(err)
}

// admit says whether a batch may go to the store, and whether it is the
// open breaker's probe.
func (g *Guard) admit() (probe, ok bool) {
	if !g.open.Load() {
		return false, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.openUntil.IsZero() {
		return false, true
	}
	if g.probing || g.now().Before(g.openUntil) {
		return false, false
	}
	g.probing = true
	return true, true
}

func (g *Guard) record(err error, probe bool) {
	g.lastRound.Store(g.now().UnixNano())
	if err == nil && !probe && !g.failing.Load() {
		return // the common case, a healthy store: nothing to change, no lock
	}
	g.mu.Lock()
	if probe {
		g.probing = false
	}
	changed := false
	if err == nil {
		g.failures = 0
		g.failing.Store(false)
		if !g.openUntil.IsZero() {
			g.openUntil, changed = time.Time{}, true
			g.open.Store(false)
		}
	} else {
		g.failures++
		g.failing.Store(true)
		if g.failures >= g.threshold {
			changed = g.openUntil.IsZero()
			g.openUntil = g.now().Add(g.probeEvery)
			g.open.Store(true)
		}
	}
	g.mu.Unlock()
	if changed && g.onBreaker != nil {
		g.onBreaker(err != nil, err)
	}
}

// Failing reports whether the store is failing: a round trip failed
// since the last that did not, or the breaker is open.
func (g *Guard) Failing() bool { return g.failing.Load() }

// fail decides reqs by their failure modes, in order.
func (g *Guard) fail(reqs []engine.Request, res []engine.Result) error {
	g.fallback.Add(uint64(len(reqs)))
	for i := range reqs {
		r := &reqs[i]
		if err := r.Validate(); err != nil {
			res[i] = engine.Result{Err: err}
			continue
		}
		if r.Grant || r.Refund {
			// Units only the shared store can hand over or take back: a
			// grant is refused (a local or fail-open one would be units
			// no other sidecar knows of), a refund not given.
			res[i] = engine.Result{Path: engine.PathFailClosed, Decision: failDecision(r.Capacity(), false, 0, g.probeEvery)}
			continue
		}
		switch g.mode(r) {
		case engine.FailLocal:
			g.decideLocal(reqs[i:i+1], res[i:i+1]) // by this sidecar's share
		case engine.FailClosed:
			res[i] = engine.Result{Path: engine.PathFailClosed, Decision: failDecision(r.Capacity(), false, 0, g.probeEvery)}
			for j := range r.Detail {
				r.Detail[j] = failDecision(r.Limits[j].Limit.Capacity(), false, 0, g.probeEvery)
			}
		default:
			res[i] = engine.Result{Path: engine.PathFailOpen, Decision: failDecision(r.Capacity(), true, r.Cost, 0)}
			for j := range r.Detail {
				r.Detail[j] = failDecision(r.Limits[j].Limit.Capacity(), true, r.Cost, 0)
			}
		}
	}
	return nil
}

// ignore is the local store's done: it answers at once, never failing as
// a batch.
func ignore(error) {}

// failDecision is a failure mode's answer for a limit of capacity c:
// allowed with the cost taken from a full capacity, or refused for wait.
func failDecision(c int64, allowed bool, cost int64, wait time.Duration) engine.Decision {
	if allowed {
		return engine.Decision{Allowed: true, Limit: c, Remaining: c - cost}
	}
	return engine.Decision{Limit: c, RetryAfter: wait, ResetAfter: wait}
}

func (g *Guard) mode(r *engine.Request) engine.FailureMode {
	m := r.OnFailure
	if m == engine.FailDefault {
		m = g.def
	}
	if m == engine.FailLocal && g.local == nil {
		m = engine.FailOpen
	}
	return m
}

// ErrNotReset is Reset's answer while the breaker is open: the shared
// state could not be reset, but what this sidecar keeps of the key was.
var ErrNotReset = errors.New("the upstream Redis is failing: the shared state was not reset, only this sidecar's remembered refusals and local counts")

// Reset resets the key in the store, and in the local store so that a
// fallback does not keep a state the user asked to forget. While the
// breaker is open it does not wait on the store: it forgets what this
// sidecar keeps of the key (a store that remembers refusals is told to
// Forget) and returns ErrNotReset at once.
func (g *Guard) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	if g.local != nil {
		_ = g.local.Reset(ctx, key, limits...)
	}
	if g.open.Load() {
		if f, ok := g.store.(interface{ Forget(key string) }); ok {
			f.Forget(key)
		}
		return ErrNotReset
	}
	return g.store.Reset(ctx, key, limits...)
}

// Health records the outcome of a check made outside any batch, a call
// that decides nothing: a failure opens the breaker at once, so that
// readiness and the first requests know before a request has to find out;
// a success closes it.
func (g *Guard) Health(err error) {
	if err != nil {
		g.mu.Lock()
		g.failures = max(g.failures, g.threshold-1)
		g.mu.Unlock()
	}
	g.record(err, false)
}

// GuardStats counts what the guard did, for INFO, metrics and readiness.
type GuardStats struct {
	BreakerOpen bool
	Fallbacks   uint64 // requests decided by a failure mode
	// Unreplicated counts those of Fallbacks that were durable requests
	// whose charges the replicas did not acknowledge (engine.ErrNotDurable).
	Unreplicated uint64
	LastOutcome  time.Time // when the store last answered or failed; zero: never
}

// Stats returns the breaker state and the counts so far.
func (g *Guard) Stats() GuardStats {
	s := GuardStats{BreakerOpen: g.open.Load(), Fallbacks: g.fallback.Load(), Unreplicated: g.unreplicated.Load()}
	if ns := g.lastRound.Load(); ns != 0 {
		s.LastOutcome = time.Unix(0, ns)
	}
	return s
}
