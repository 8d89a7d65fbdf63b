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
// are in rather than block for them.
package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
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
	// ResetTimeout bounds one Reset. Zero means 2s. Decisions get no
	// deadline here: the store bounds its own waits (engine.Store).
	ResetTimeout time.Duration
}

// Service decides batches of requests for every front door. Its methods
// are safe for concurrent use.
type Service struct {
	store        engine.Store
	policies     engine.Policies
	tracer       trace.Tracer
	resetTimeout time.Duration

	decisions decisions
	errors    [numErrorKinds]atomicCount
	scratch   sync.Pool // *joined
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
	s := &Service{store: cfg.Store, policies: cfg.Policies, tracer: cfg.Tracer, resetTimeout: cfg.ResetTimeout}
	s.scratch.New = func() any { return new(joined) }
	return s, nil
}

// Tracing tells whether decisions can be traced: a door refuses a caller's
// request for spans when it cannot.
func (s *Service) Tracing() bool { return s.tracer != nil }

// joined is the scratch that several batches are decided in as one.
type joined struct {
	reqs []engine.Request
	res  []engine.Result
}

// Decide decides the batches' requests as one batch for the store, so
// that the requests of many clients share one round trip, and calls done
// once every result is in. done runs exactly once, on the goroutine that
// completes the batches: before Decide returns when the store answers at
// once, as every store does today (the chain bounds its own waits, see
// engine.Store). The batches must not be touched until done runs.
func (s *Service) Decide(bs []*Batch, done func()) {
	s.decide(bs)
	done()
}

func (s *Service) decide(bs []*Batch) {
	var start time.Time
	traced := false
	for _, b := range bs {
		b.res = sized(b.res, len(b.reqs))
		traced = traced || b.traced()
	}
	if traced {
		start = time.Now()
	}
	var err error
	if len(bs) == 1 {
		if b := bs[0]; len(b.reqs) > 0 {
			err = s.store.Decide(context.Background(), b.reqs, b.res)
		}
	} else {
		err = s.decideJoined(bs)
	}
	for _, b := range bs {
		b.err = err
		s.settle(b)
		if b.traced() {
			s.trace(b, start, time.Now())
		}
	}
}

// decideJoined decides several batches as one.
func (s *Service) decideJoined(bs []*Batch) error {
	j := s.scratch.Get().(*joined)
	defer s.scratch.Put(j)
	for _, b := range bs {
		j.reqs = append(j.reqs, b.reqs...)
	}
	if len(j.reqs) == 0 {
		return nil
	}
	j.res = sized(j.res, len(j.reqs))
	err := s.store.Decide(context.Background(), j.reqs, j.res)
	off := 0
	for _, b := range bs {
		off += copy(b.res, j.res[off:])
	}
	clear(j.reqs) // drop the keys, which alias the doors' buffers
	clear(j.res)
	j.reqs, j.res = j.reqs[:0], j.res[:0]
	return err
}

// settle applies shadow mode to a decided batch and counts its outcomes.
func (s *Service) settle(b *Batch) {
	var t tally
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
		outcome := Allowed
		if !d.Allowed {
			outcome = Refused
			// Shadow mode: counted as the refusal it was, answered as an
			// admission.
			if m.shadow {
				outcome, d.Allowed, d.RetryAfter = Shadow, true, 0
			}
		}
		t.add(&s.decisions, decided{policy: m.policy, alg: b.reqs[i].Limit.Algorithm, outcome: outcome, path: r.Path})
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

// sized is r with length n, reusing its array when it is large enough.
func sized(r []engine.Result, n int) []engine.Result {
	if cap(r) < n {
		return make([]engine.Result, n, 2*n)
	}
	return r[:n]
}
