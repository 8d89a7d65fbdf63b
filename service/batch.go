package service

import (
	"cmp"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
)

// Request is one decision as a door reads it: by a named policy, or with
// its limit inline.
type Request struct {
	// ByPolicy says the request is decided by the policy named Policy;
	// false, by Limit, inline. It is a flag of its own, not an empty
	// Policy, so that a client's empty or missing name is an unknown
	// policy and never falls through to an inline key.
	ByPolicy bool
	// Policy names the policy to decide by; set only with ByPolicy.
	Policy string
	// Key is the client's key. Under a policy the service stores it under
	// the policy's prefix. It may alias a door's buffer until the batch is
	// decided.
	Key  string
	Cost int64
	Peek bool
	// Charge takes Cost even over the limit: a cost known after the work
	// (engine.Request's Charge).
	Charge bool
	// Detail asks for each limit's own decision beside the one the
	// request gets (RL.ALLOW … DETAIL): see Batch.Detail.
	Detail bool
	// Reserve makes the request a reservation of Cost, its estimate
	// (reserve.go): granted as a take, its record held for ReserveTTL
	// (zero: DefaultReservationTTL) until Service.Settle; its id is
	// Batch.Reservation's. With Peek, a look at the estimate: no grant,
	// no record (RL.EXPLAIN RL.RESERVE …).
	Reserve    bool
	ReserveTTL time.Duration

	// An inline request's rules; under a policy, the policy's own.
	Limit     engine.Limit
	OnFailure engine.FailureMode // zero: the sidecar's default
	Shadow    bool               // decide and count, but always allow
	// Label names the request's rule in the counters (a door's own bounded
	// name, such as a rate-limit config's rule); empty means Inline. Never
	// a client's value: every label is a metric series.
	Label string
	// Digest identifies the configuration Label's rule came from (an
	// Envoy rate-limit config's Digest), for the explanation; empty
	// without one.
	Digest string
}

// ErrNoPolicies is a request by policy name when no policies are loaded.
var ErrNoPolicies = errors.New("no policies are loaded: start sluice with --policies FILE")

// UnknownPolicyError is a request that names a policy the loaded set does
// not have.
type UnknownPolicyError struct{ Name string }

func (e *UnknownPolicyError) Error() string {
	if e.Name == "" {
		return `invalid policy "": no such policy`
	}
	return "invalid policy " + e.Name + ": no such policy"
}

// errPolicyNotByPolicy is a door's mistake: a policy name on a request
// not marked ByPolicy, which would otherwise be decided inline.
func errPolicyNotByPolicy(name string) error {
	return fmt.Errorf("service: request names policy %q without ByPolicy", name)
}

// Batch is a door's requests, decided together. A door keeps one per
// client and reuses it: once warm, a batch allocates nothing.
type Batch struct {
	s *Service
	// Trace, when valid, makes each decision a span under it.
	Trace trace.SpanContext
	// Door names the door the batch's requests came through (resp, http,
	// grpc), for a recording. Set once, by the door that made the batch.
	Door string

	reqs []engine.Request
	res  []engine.Result
	meta []meta
	keys []byte // the prefixed keys of reqs, which alias it
	err  error  // the whole batch's error, once decided
	// parts holds the multi-limit requests' own decisions, which their
	// Detail slices point into. A request keeps the array it was given
	// when parts grew after it: the store writes there and Detail reads
	// it back through the request, so both always meet.
	parts []engine.Decision

	// DecideWait's: the batch as a one-batch list, and the channel it
	// waits on with the callback that fills it, made on first use.
	one    [1]*Batch
	landed chan struct{}
	signal func()
}

// meta is what the service keeps of a request's policy.
type meta struct {
	policy   string // Inline for the inline requests
	shadow   bool
	shadowed bool   // refused by the store, answered as allowed (shadow mode)
	detail   bool   // the door asked for each limit's decision
	byPolicy bool   // decided by the policy named policy; else inline, policy its label
	prefix   int    // the length of the policy's prefix before the client's key
	digest   string // the door's rules' digest (Request.Digest)
	// A reservation's (Request.Reserve): its record's TTL, and its id
	// once admitted.
	reserve     bool
	ttl         time.Duration
	reservation string
}

// noParts is zero decisions, to append without allocating.
var noParts [engine.MaxLimits]engine.Decision

// NewBatch returns an empty batch for s.
func (s *Service) NewBatch() *Batch { return &Batch{s: s} }

// From sets the batch's Door and returns it: s.NewBatch().From("resp").
func (b *Batch) From(door string) *Batch {
	b.Door = door
	return b
}

// Add resolves r and queues it, returning its index for Result. A request
// that cannot be decided is not queued: its error is returned for the door
// to answer in its place (ErrNoPolicies, *UnknownPolicyError, a
// *PolicyKindError for a concurrency policy, or a *engine.ParamError
// naming the parameter). Either way the error is counted.
func (b *Batch) Add(r Request) (int, error) {
	req := engine.Request{Key: r.Key, Limit: r.Limit, Cost: r.Cost, Peek: r.Peek, Charge: r.Charge, OnFailure: r.OnFailure, Durable: b.s.durable}
	m := meta{policy: cmp.Or(r.Label, Inline), shadow: r.Shadow, digest: r.Digest}
	if !r.ByPolicy && r.Policy != "" {
		b.s.CountError(ErrRequest)
		return -1, errPolicyNotByPolicy(r.Policy)
	}
	if r.ByPolicy {
		p, err := b.s.lookup(r.Policy)
		if err != nil {
			b.s.CountError(ErrRequest)
			return -1, err
		}
		if p.Concurrency.Limit > 0 {
			b.s.CountError(ErrRequest)
			return -1, &PolicyKindError{Name: p.Name, Concurrency: true}
		}
		if r.Key == "" {
			b.s.CountError(ErrRequest)
			return -1, engine.ValidateKey("")
		}
		req.Key, req.Limit, req.OnFailure, req.Durable = b.prefixed(p.Prefix, r.Key), p.Limit, p.OnFailure, p.Durable
		m = meta{policy: p.Name, shadow: p.Shadow, detail: r.Detail, byPolicy: true, prefix: len(p.Prefix)}
		if len(p.Limits) > 0 {
			// Each limit's decision is kept even when the door did not
			// ask: it says which limit bound (Limit).
			req.Limits = p.Limits
			at := len(b.parts)
			b.parts = append(b.parts, noParts[:len(p.Limits)]...)
			req.Detail = b.parts[at:len(b.parts):len(b.parts)]
		}
	}
	if r.Reserve && !r.Peek {
		if err := b.reserve(&req, &m, r.ReserveTTL); err != nil {
			b.s.CountError(ErrRequest)
			return -1, err
		}
	}
	if err := req.Validate(); err != nil {
		b.s.CountError(ErrRequest)
		return -1, err
	}
	b.reqs = append(b.reqs, req)
	b.meta = append(b.meta, m)
	return len(b.reqs) - 1, nil
}

func (s *Service) lookup(name string) (engine.Policy, error) {
	if s.policies == nil {
		return engine.Policy{}, ErrNoPolicies
	}
	p, ok := s.policies.Lookup(name)
	if !ok {
		return p, &UnknownPolicyError{Name: name}
	}
	return p, nil
}

// Len is how many requests are queued.
func (b *Batch) Len() int { return len(b.reqs) }

// Limit is the limit request i is decided by: its own, or its policy's;
// under a multi-limit policy, once decided, the limit its decision came
// from (engine.Binding).
func (b *Batch) Limit(i int) engine.Limit {
	r := &b.reqs[i]
	if r.Multi() {
		return r.Limits[engine.Binding(r.Detail)].Limit
	}
	return r.Limit
}

// Leaky reports whether request i is decided by a leaky bucket, whose
// reply carries the delay to wait.
func (b *Batch) Leaky(i int) bool { return b.reqs[i].HasLeaky() }

// Detail reports whether the door asked for request i's limits' own
// decisions, and returns them once decided, with their names: a
// multi-limit policy's limits, or a one-limit policy's one, named by the
// policy, whose one part is the reply itself. Under shadow mode a
// multi-limit policy's parts stay the store's own.
func (b *Batch) Detail(i int) (bool, []engine.NamedLimit, []engine.Decision) {
	if !b.meta[i].detail {
		return false, nil, nil
	}
	r := &b.reqs[i]
	if r.Multi() {
		return true, r.Limits, r.Detail
	}
	return true, []engine.NamedLimit{{Name: b.meta[i].policy, Limit: r.Limit}}, []engine.Decision{b.res[i].Decision}
}

// Result is request i's decision, once the batch is decided, or the error
// it met instead (the whole batch's, or its own).
func (b *Batch) Result(i int) (*engine.Decision, error) {
	if b.err != nil {
		return nil, b.err
	}
	if r := &b.res[i]; r.Err != nil {
		return nil, r.Err
	}
	return &b.res[i].Decision, nil
}

// Shadowed reports whether request i was refused and is answered as
// allowed only because it runs in shadow mode: a door whose protocol
// reports the refusal beside the admission (Envoy's limit_remaining 0)
// needs to know.
func (b *Batch) Shadowed(i int) bool { return b.meta[i].shadowed }

// Path is what decided request i, once the batch is decided: the store,
// the deny cache or a failure mode. Service.PathName names it for a
// reader.
func (b *Batch) Path(i int) engine.Path { return b.res[i].Path }

// Clear empties the batch for reuse, keeping its Trace.
func (b *Batch) Clear() {
	clear(b.reqs) // drop the keys, which alias the door's input
	clear(b.res)
	b.reqs, b.res, b.meta, b.keys, b.parts, b.err = b.reqs[:0], b.res[:0], b.meta[:0], b.keys[:0], b.parts[:0], nil
}

func (b *Batch) traced() bool { return b.Trace.IsValid() && b.s.tracer != nil }

// prefixed is prefix+key, written into the batch's key buffer: valid until
// Clear. A buffer that grows leaves the earlier keys in the old array,
// which they keep alive; stores copy the keys they keep.
func (b *Batch) prefixed(prefix, key string) string {
	start := len(b.keys)
	b.keys = append(append(b.keys, prefix...), key...)
	k := b.keys[start:]
	return unsafe.String(unsafe.SliceData(k), len(k))
}
