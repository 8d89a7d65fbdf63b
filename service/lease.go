package service

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// The concurrency limiter's rules, shared by every door that can acquire
// and release: a door that has no release (a gateway check) refuses
// concurrency policies instead, as Batch.Add does with a
// *PolicyKindError.

// LeaseRequest is one acquire as a door reads it: by a named concurrency
// policy, or with its limit inline.
type LeaseRequest struct {
	// ByPolicy says the lease is by the concurrency policy named Policy
	// (an empty name is an unknown policy, as in Request); false, by Limit
	// and TTL, inline.
	ByPolicy bool
	// Policy names the concurrency policy; set only with ByPolicy.
	Policy string
	// Key is the client's key, stored under the policy's prefix.
	Key string
	// ID names the lease; empty means the service makes one up, which the
	// decision carries back.
	// Release: the lease to free, which must be given.
	ID        string
	Limit     int64
	TTL       time.Duration
	OnFailure engine.FailureMode // inline only; zero: the sidecar's default
}

// ErrNoLeases is a lease request to a service whose store holds none.
var ErrNoLeases = errors.New("this sidecar's store holds no leases")

// PolicyKindError is a request of one kind by a policy of the other: a
// decision (RL.ALLOW, a gateway check) by a concurrency policy, or a lease
// by a rate policy. Doors word it for their own commands.
type PolicyKindError struct {
	Name string
	// Concurrency says the policy is a concurrency policy (and the
	// request was a decision); false, a rate policy asked for a lease.
	Concurrency bool
}

func (e *PolicyKindError) Error() string {
	if e.Concurrency {
		return "invalid policy " + e.Name + ": a concurrency policy: its leases are acquired and released, not decided on"
	}
	return "invalid policy " + e.Name + ": a rate policy, not a concurrency policy: it decides requests, it holds no leases"
}

// Acquire takes a lease, or renews the one named r.ID, by r's policy or
// inline limit. A refusal is a decision with Allowed false, not an error.
func (s *Service) Acquire(ctx context.Context, r LeaseRequest) (engine.LeaseDecision, error) {
	req := engine.LeaseRequest{Key: r.Key, Limit: r.Limit, TTL: r.TTL, ID: r.ID, OnFailure: r.OnFailure}
	label := Inline
	if !r.ByPolicy && r.Policy != "" {
		s.CountError(ErrRequest)
		return engine.LeaseDecision{}, errPolicyNotByPolicy(r.Policy)
	}
	if r.ByPolicy {
		p, err := s.leasePolicy(r.Policy, r.Key)
		if err != nil {
			return engine.LeaseDecision{}, err
		}
		req.Key = p.Prefix + r.Key
		req.Limit, req.TTL, req.OnFailure = p.Concurrency.Limit, p.Concurrency.TTL, p.OnFailure
		label = p.Name
	}
	if req.ID == "" {
		req.ID = engine.NewLeaseID()
	}
	if err := req.Validate(); err != nil {
		s.CountError(ErrRequest)
		return engine.LeaseDecision{}, err
	}
	if s.leaser == nil {
		s.CountError(ErrStore)
		return engine.LeaseDecision{}, ErrNoLeases
	}
	ctx, cancel := context.WithTimeout(ctx, s.resetTimeout)
	defer cancel()
	d, err := s.leaser.Acquire(ctx, req)
	if err != nil {
		s.countLeaseError(err)
		return d, err
	}
	s.leases.acquired(label, &req, &d)
	return d, nil
}

// Release frees the lease r.ID of r.Key (under the policy's prefix when
// r.ByPolicy; r's Limit and TTL are not used) and reports whether it was
// held.
func (s *Service) Release(ctx context.Context, r LeaseRequest) (bool, error) {
	key, id, label := r.Key, r.ID, Inline
	if !r.ByPolicy && r.Policy != "" {
		s.CountError(ErrRequest)
		return false, errPolicyNotByPolicy(r.Policy)
	}
	if r.ByPolicy {
		p, err := s.leasePolicy(r.Policy, key)
		if err != nil {
			return false, err
		}
		key, label = p.Prefix+key, p.Name
	}
	if err := engine.ValidateKey(key); err != nil {
		s.CountError(ErrRequest)
		return false, err
	}
	if err := engine.ValidateLeaseID(id); err != nil {
		s.CountError(ErrRequest)
		return false, err
	}
	if s.leaser == nil {
		s.CountError(ErrStore)
		return false, ErrNoLeases
	}
	ctx, cancel := context.WithTimeout(ctx, s.resetTimeout)
	defer cancel()
	held, err := s.leaser.Release(ctx, key, id)
	if err != nil {
		s.countLeaseError(err)
		return false, err
	}
	if held {
		s.leases.released(label, key, id)
	}
	return held, nil
}

// leasePolicy finds a concurrency policy.
func (s *Service) leasePolicy(name, key string) (engine.Policy, error) {
	p, err := s.lookup(name)
	if err == nil && p.Concurrency.Limit == 0 {
		err = &PolicyKindError{Name: p.Name}
	}
	if err == nil && key == "" {
		err = engine.ValidateKey("")
	}
	if err != nil {
		s.CountError(ErrRequest)
	}
	return p, err
}

func (s *Service) countLeaseError(err error) {
	if errors.Is(err, engine.ErrInvalid) {
		s.CountError(ErrRequest)
	} else {
		s.CountError(ErrStore)
	}
}

// LeaseEvent is what happened to a lease, for its counter.
type LeaseEvent uint8

// The lease events.
const (
	LeaseAcquired LeaseEvent = iota // a new lease granted
	LeaseRenewed                    // a held lease acquired again
	LeaseRefused                    // every slot was held
	LeaseReleased                   // freed by its client
	LeaseExpired                    // ended at its TTL, never released through this sidecar
	numLeaseEvents
)

var leaseEventNames = [numLeaseEvents]string{"acquired", "renewed", "refused", "released", "expired"}

func (e LeaseEvent) String() string { return leaseEventNames[e] }

// leaseCounts is one policy's lease counters.
type leaseCounts struct {
	events [numLeaseEvents]atomic.Uint64
	held   atomic.Int64
}

// maxBooked bounds how many leases the service follows for its gauge.
const maxBooked = 100_000

// leaseBook follows the leases granted through this sidecar until they
// are released through it or end, for the gauge of leases held per policy
// (no key is a metric label: the book is how a count per policy exists
// without one). Summed over sidecars, the gauge is the leases in flight;
// a lease released through another sidecar than the one that granted it
// is counted by the granting one until its TTL. Past maxBooked leases a
// new one is counted as acquired but not followed.
type leaseBook struct {
	byPolicy registry[leaseCounts]
	book[leaseRef, booked]
}

type leaseRef struct{ key, id string }

type booked struct {
	counts *leaseCounts
	ends   time.Time
}

func (e booked) end() time.Time { return e.ends }

func (e booked) expire() {
	e.counts.held.Add(-1)
	e.counts.events[LeaseExpired].Add(1)
}

func (b *leaseBook) acquired(policy string, r *engine.LeaseRequest, d *engine.LeaseDecision) {
	c := b.byPolicy.get(policy)
	switch {
	case !d.Allowed:
		c.events[LeaseRefused].Add(1)
		return
	case d.Renewed:
		c.events[LeaseRenewed].Add(1)
	default:
		c.events[LeaseAcquired].Add(1)
	}
	if d.Path == engine.PathFailOpen {
		return // held nowhere
	}
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	ref := leaseRef{r.Key, r.ID}
	if e, ok := b.entries[ref]; ok {
		e.ends = now.Add(r.TTL)
		b.entries[ref] = e
		return
	}
	if !b.roomLocked(now, maxBooked) {
		return
	}
	b.addLocked(leaseRef{strings.Clone(r.Key), strings.Clone(r.ID)}, booked{counts: c, ends: now.Add(r.TTL)})
	c.held.Add(1)
}

func (b *leaseBook) released(policy, key, id string) {
	c := b.byPolicy.get(policy)
	c.events[LeaseReleased].Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.removeLocked(leaseRef{key, id}); ok {
		e.counts.held.Add(-1)
	}
}

// LeaseStats are one policy's lease counts.
type LeaseStats struct {
	Held   int64                  // leases granted through this sidecar and not yet ended
	Events [numLeaseEvents]uint64 // by LeaseEvent
}

// EachLeasePolicy calls f with each policy's lease counts (Inline for the
// inline RL.ACQUIRE), for metrics and INFO; leases that ended by now are
// counted as expired first.
func (s *Service) EachLeasePolicy(f func(policy string, st LeaseStats)) {
	s.leases.sweep()
	s.leases.byPolicy.each(func(policy string, c *leaseCounts) {
		st := LeaseStats{Held: c.held.Load()}
		for e := range numLeaseEvents {
			st.Events[e] = c.events[e].Load()
		}
		f(policy, st)
	})
}

// LeaseTotals sums every policy's lease counts.
func (s *Service) LeaseTotals() LeaseStats {
	var t LeaseStats
	s.EachLeasePolicy(func(_ string, st LeaseStats) {
		t.Held += st.Held
		for e := range st.Events {
			t.Events[e] += st.Events[e]
		}
	})
	return t
}
