// Package service holds the rules every front door shares, so that a door
// (RESP, and any other protocol) is a thin codec: it parses its protocol
// into Requests, hands them to the service in a Batch, and encodes the
// results. The service resolves each request to its policy or inline
// limit, puts the policy's prefix before the client's key, applies shadow
// mode, leaves the failure mode to the store chain through the request,
// counts every decision and error, and records a span per decision when
// the caller traces.
//
// It is shaped as envoyproxy/ratelimit's layers are: configuration
// (engine.Policies) → service → store chain (engine.Store). Doors never
// see Redis or a policy; the service never sees a protocol.
//
// Batches go in whole and complete through a callback (Decide), so that a
// door reads everything a client sent, hands it in as one batch, and a
// door that must not wait (an event loop) can be told when the results
// are in rather than block for them; a door that may block waits with
// DecideWait.
package service

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/record"
)

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	// Store decides requests: the whole store chain (guard, deny cache,
	// batcher, Redis) or the in-memory store. Required.
	Store engine.Store
	// Policies resolves policy names. Nil means no policies are loaded:
	// a request by policy name then gets ErrNoPolicies.
	Policies engine.Policies
	// Tracer, when set, records a span for each decision of a batch whose
	// Trace is set. Nil turns tracing off.
	Tracer trace.Tracer
	// Leaser holds the concurrency limiter's leases (lease.go); nil means
	// Store's own if it is an engine.Leaser, else none: a lease request
	// then gets ErrNoLeases.
	Leaser engine.Leaser
	// StoreName names what engine.PathStore means in this process, for
	// a reader watching decisions (MONITOR): "redis" when the store is the
	// central Redis, "memory" when it is the in-memory store. Empty means
	// "store".
	StoreName string
	// ResetTimeout bounds one Reset, one Acquire or Release, and an
	// explanation's reads of the state held (ExplainHeld). Zero means
	// 2s. Decisions get no
	// deadline here: the store bounds its own waits (engine.Store).
	ResetTimeout time.Duration
	// Recorder, when set, is given the inputs and outcome of one decision
	// in its sample (record.Writer.Sample), every door's alike, off the
	// decision path. Nil records nothing.
	Recorder *record.Writer
	// InFlight is how many round trips the store has in flight at once
	// (the batcher's limit): a door that hands over a large round of
	// decisions cuts it into as many parts, so that the store decides one
	// while the door answers another. Zero or 1: rounds go whole.
	InFlight int
	// Digest, when set, is the digest of the policies in use, for an
	// explanation of a decision by policy (Explanation.Digest): the
	// policies file's watcher's.
	Digest func() string
	// States reads back the state the store holds for a key, for an
	// explanation that asks for it (Batch.ExplainHeld: RL.EXPLAIN): the
	// central Redis's, or the in-memory store's. Nil: an explanation says
	// what the decision shows, and reads nothing.
	States StateReader
	// Durable is the durability of the requests decided by no named
	// policy (the inline commands, the gateway doors' rules): a policy
	// says its own (engine.Durability). Zero: answered at once.
	Durable engine.Durability

	// MaxReservations bounds the reservations this sidecar holds open
	// (reserve.go); zero means DefaultMaxReservations.
	MaxReservations int
	// Now is the reservations' clock, which ends them at their TTL; nil
	// means time.Now.
	Now func() time.Time
}

// Service decides batches of requests for every front door. Its methods
// are safe for concurrent use.
type Service struct {
	store        engine.Store
	policies     engine.Policies
	tracer       trace.Tracer
	resetTimeout time.Duration
	storeName    string
	inFlight     int
	recorder     *record.Writer
	digest       func() string
	durable      engine.Durability // the inline requests'
	states       StateReader

	leaser engine.Leaser

	decisions    decisions
	leases       leaseBook
	reservations reservationBook
	errors       [numErrorKinds]atomicCount
	flights      sync.Pool // *flight
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("service: Config.Store is required")
	}
	if cfg.ResetTimeout < 0 {
		return nil, errors.New("service: negative Config.ResetTimeout")
	}
	if cfg.ResetTimeout == 0 {
		cfg.ResetTimeout = 2 * time.Second
	}
	if cfg.MaxReservations < 0 {
		return nil, errors.New("service: negative Config.MaxReservations")
	}
	s := &Service{store: cfg.Store, policies: cfg.Policies, tracer: cfg.Tracer, resetTimeout: cfg.ResetTimeout,
		leaser: cfg.Leaser, storeName: cmp.Or(cfg.StoreName, engine.PathStore.String()), inFlight: cfg.InFlight,
		recorder: cfg.Recorder, digest: cfg.Digest, durable: cfg.Durable, states: cfg.States}
	if s.leaser == nil {
		s.leaser, _ = cfg.Store.(engine.Leaser)
	}
	s.reservations.max, s.reservations.now = cmp.Or(cfg.MaxReservations, DefaultMaxReservations), cfg.Now
	s.flights.New = func() any {
		f := &flight{s: s}
		f.landed = f.land
		return f
	}
	return s, nil
}

// InFlight is Config.InFlight: how many parts a door cuts a large round
// into.
func (s *Service) InFlight() int { return s.inFlight }

// PathName names a decision's path for a reader: the store's name
// (Config.StoreName) for engine.PathStore, the path's own name for the
// others (deny_cache, local_fallback, fail_open, fail_closed, grant).
func (s *Service) PathName(p engine.Path) string {
	if p == engine.PathStore {
		return s.storeName
	}
	return p.String()
}

// Tracing tells whether decisions can be traced: a door refuses a caller's
// request for spans when it cannot.
func (s *Service) Tracing() bool { return s.tracer != nil }

// flight is one Decide on its way: the batches, the scratch they are
// joined in, and the caller's done. Pooled, with its callback bound once,
// so that a Decide allocates nothing.
type flight struct {
	s      *Service
	bs     []*Batch
	reqs   []engine.Request // the batches joined, when there are several
	res    []engine.Result
	start  time.Time // for spans, when a batch is traced
	done   func()
	landed func(error)
}

// Decide decides the batches' requests as one batch for the store, so
// that the requests of many clients share one round trip, and calls done
// once every result is in. It does not wait for the store: done runs
// exactly once, before Decide returns when the store answers at once (the
// in-memory store, the deny cache, an open breaker), else later on the
// goroutine that completes the round trip. The batches must not be
// touched until done runs; done must be quick and must not call Decide.
func (s *Service) Decide(bs []*Batch, done func()) {
	f := s.flights.Get().(*flight)
	f.bs, f.done = append(f.bs[:0], bs...), done
	traced := false
	for _, b := range bs {
		b.res = sized(b.res, len(b.reqs))
		traced = traced || b.traced()
	}
	if traced {
		f.start = time.Now()
	}
	if len(bs) == 1 {
		s.store.Submit(bs[0].reqs, bs[0].res, time.Time{}, f.landed)
		return
	}
	for _, b := range bs {
		f.reqs = append(f.reqs, b.reqs...)
	}
	f.res = sized(f.res, len(f.reqs))
	s.store.Submit(f.reqs, f.res, time.Time{}, f.landed)
}

// DecideWait decides b and returns once its results are in: Decide for a
// door that serves each request on a goroutine of its own and may block
// (gRPC, HTTP, RESP without an event loop). The store bounds the wait
// (engine.Store). Once b is warm it allocates nothing: b keeps the
// channel it waits on.
func (s *Service) DecideWait(b *Batch) {
	if b.landed == nil {
		b.landed = make(chan struct{}, 1)
		b.signal = func() { b.landed <- struct{}{} }
	}
	b.one[0] = b
	s.Decide(b.one[:], b.signal)
	<-b.landed
	b.one[0] = nil
}

// land completes a flight: it hands each batch its results, applies
// shadow mode, counts, traces, and tells the caller.
func (f *flight) land(err error) {
	s := f.s
	if len(f.bs) > 1 && err == nil {
		off := 0
		for _, b := range f.bs {
			off += copy(b.res, f.res[off:])
		}
	}
	var end time.Time
	for _, b := range f.bs {
		b.err = err
		s.settle(b)
		if b.traced() {
			if end.IsZero() {
				end = time.Now()
			}
			s.trace(b, f.start, end)
		}
	}
	done := f.done
	clear(f.bs)
	clear(f.reqs) // drop the keys, which alias the doors' buffers
	clear(f.res)
	f.bs, f.reqs, f.res, f.done = f.bs[:0], f.reqs[:0], f.res[:0], nil
	s.flights.Put(f)
	done()
}

// settle applies shadow mode to a decided batch and counts its outcomes.
func (s *Service) settle(b *Batch) {
	var t tally
	var now int64 // for the recorder, read once for the batch if needed
	for i := range b.reqs {
		r, m := &b.res[i], &b.meta[i]
		switch {
		case b.err != nil:
			s.CountError(ErrStore)
			continue
		case r.Err != nil:
			if errors.Is(r.Err, engine.ErrInvalid) {
				s.CountError(ErrRequest)
			} else {
				s.CountError(ErrStore)
			}
			continue
		}
		d := &r.Decision
		if s.recorder != nil && s.recorder.Sample(b.reqs[i].Key[m.prefix:]) {
			now = s.record(b, i, now)
		}
		outcome := Allowed
		if !d.Allowed {
			outcome = Refused
			// Shadow mode: counted as the refusal it was, answered as an
			// admission.
			if m.shadow {
				outcome, d.Allowed, d.RetryAfter = Shadow, true, 0
				m.shadowed = true
			}
		}
		if m.reserve {
			s.reserved(b, i)
		}
		// A multi-limit decision counts under the algorithm of the limit
		// it came from.
		t.add(&s.decisions, decided{policy: m.policy, alg: b.Limit(i).Algorithm, outcome: outcome, path: r.Path})
	}
	t.flush(&s.decisions)
}

// Reset forgets each key's state under every algorithm, so that its next
// request finds the full capacity. Every key is checked before any is
// reset; the first invalid one is a *engine.ParamError. Either kind of
// error is counted.
func (s *Service) Reset(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := engine.ValidateKey(k); err != nil {
			s.CountError(ErrRequest)
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.resetTimeout)
	defer cancel()
	for _, k := range keys {
		if err := s.store.Reset(ctx, k); err != nil {
			s.CountError(ErrStore)
			return err
		}
	}
	return nil
}

// ResetPolicy forgets each client key's state under the policy name:
// every one of its limits, and its leases (RL.RESET POLICY name key …).
// The policy must exist; its keys are checked as Reset checks them.
func (s *Service) ResetPolicy(ctx context.Context, name string, keys []string) error {
	p, err := s.lookup(name)
	if err != nil {
		s.CountError(ErrRequest)
		return err
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		if err := engine.ValidateKey(k); err != nil {
			s.CountError(ErrRequest)
			return err
		}
		full[i] = p.Prefix + k
	}
	ctx, cancel := context.WithTimeout(ctx, s.resetTimeout)
	defer cancel()
	for _, k := range full {
		if err := s.store.Reset(ctx, k, p.Limits...); err != nil {
			s.CountError(ErrStore)
			return err
		}
	}
	return nil
}

// sized is r with length n, reusing its array when it is large enough.
func sized(r []engine.Result, n int) []engine.Result {
	if cap(r) < n {
		return make([]engine.Result, n, 2*n)
	}
	return r[:n]
}
