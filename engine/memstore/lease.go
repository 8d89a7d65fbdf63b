package memstore

import (
	"context"
	"strings"
	"sync"

	"github.com/sluice-rl/sluice/engine"
)

// memLeases is the in-memory store's leases, kept apart from its rate
// states: a lease set is a map that grows and shrinks, which the fixed
// slots of the rate states are not shaped for. Leases are not the hot
// path, so one lock guards them all.
//
// It is bounded like the rate states: at most max leases in all. Past it,
// sets whose leases all expired go first, then the least recently used of
// a sample of sets: as with the rate states, eviction forgets state
// rather than refuse service.
type memLeases struct {
	mu   sync.Mutex
	sets map[string]*memLeaseSet // guarded by mu
	n    int                     // leases held in all sets, expired ones included; guarded by mu
	tick uint64                  // guarded by mu
}

type memLeaseSet struct {
	leaseSet
	used uint64 // memLeases.tick at the last access
}

var _ engine.Leaser = (*Store)(nil)

// maxLeases is the most leases the store keeps: as many as rate states.
func (m *Store) maxLeases() int { return m.shards[0].cap * memoryShards }

// Acquire implements Leaser. It never fails but for invalid parameters.
func (m *Store) Acquire(_ context.Context, r engine.LeaseRequest) (engine.LeaseDecision, error) {
	if err := r.Validate(); err != nil {
		return engine.LeaseDecision{}, err
	}
	now := m.now().UnixMicro()
	l := &m.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sets[r.Key]
	if s == nil {
		if l.sets == nil {
			l.sets = map[string]*memLeaseSet{}
		}
		s = &memLeaseSet{leaseSet: leaseSet{ids: map[string]int64{}}}
	} else {
		l.n -= int(s.expire(now))
	}
	_, renew := s.ids[r.ID]
	if !renew && len(s.ids) < int(r.Limit) && l.n >= m.maxLeases() {
		l.evict(now, m.maxLeases(), s)
	}
	before := len(s.ids)
	d := s.acquire(now, &r)
	l.n += len(s.ids) - before
	l.tick++
	s.used = l.tick
	switch {
	case len(s.ids) == 0:
		delete(l.sets, r.Key)
	case l.sets[r.Key] != s:
		l.sets[strings.Clone(r.Key)] = s // the caller's key may alias a buffer it reuses
	}
	return d, nil
}

// evict makes room for one lease: it drops every expired lease, and if
// that frees nothing, the least recently used of a sample of sets other
// than keep.
func (l *memLeases) evict(now int64, max int, keep *memLeaseSet) {
	for k, s := range l.sets {
		l.n -= int(s.expire(now))
		if len(s.ids) == 0 {
			delete(l.sets, k)
		}
	}
	for l.n >= max {
		var victim string
		var v *memLeaseSet
		sampled := 0
		for k, s := range l.sets { // map order is random: a sample
			if s == keep {
				continue
			}
			if v == nil || s.used < v.used {
				victim, v = k, s
			}
			if sampled++; sampled == evictionSample {
				break
			}
		}
		if v == nil {
			return // only keep holds leases: it may grow to its limit
		}
		l.n -= len(v.ids)
		delete(l.sets, victim)
	}
}

// Release implements Leaser.
func (m *Store) Release(_ context.Context, key, id string) (bool, error) {
	if err := engine.ValidateKey(key); err != nil {
		return false, err
	}
	if err := engine.ValidateLeaseID(id); err != nil {
		return false, err
	}
	now := m.now().UnixMicro()
	l := &m.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sets[key]
	if s == nil {
		return false, nil
	}
	l.n -= int(s.expire(now))
	_, held := s.ids[id]
	if held {
		delete(s.ids, id)
		l.n--
	}
	if len(s.ids) == 0 {
		delete(l.sets, key)
	}
	return held, nil
}

// resetLeases forgets key's leases.
func (m *Store) resetLeases(key string) {
	l := &m.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sets[key]; s != nil {
		l.n -= len(s.ids)
		delete(l.sets, key)
	}
}

// Leases reports how many leases the store holds, expired ones included
// until a touch of their key (or an eviction) drops them.
func (m *Store) Leases() int {
	l := &m.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// leaseSet is one key's leases: each id's expiry, in µs since the epoch.
// The algorithm is a pure function of (set, now, request), as the rate
// algorithms are; lua/lease.lua does the same on a sorted set.
type leaseSet struct {
	ids map[string]int64
	// held is the most leases ever held at once since the set was
	// created: what the Redis script records beside its set.
	held int64
}

// expire drops the leases that end at or before now and returns how many.
func (s *leaseSet) expire(now int64) int64 {
	var n int64
	for id, end := range s.ids {
		if end <= now {
			delete(s.ids, id)
			n++
		}
	}
	return n
}

// acquire decides r at now against s (expired leases already dropped).
func (s *leaseSet) acquire(now int64, r *engine.LeaseRequest) engine.LeaseDecision {
	d := engine.LeaseDecision{Limit: r.Limit, ID: r.ID}
	end := now + r.TTL.Microseconds()
	held := int64(len(s.ids))
	switch _, ok := s.ids[r.ID]; {
	case ok:
		d.Allowed, d.Renewed = true, true
		s.ids[r.ID] = end
	case held < r.Limit:
		d.Allowed = true
		s.ids[r.ID] = end
		held++
	default:
		oldest := int64(-1)
		for _, e := range s.ids {
			if oldest < 0 || e < oldest {
				oldest = e
			}
		}
		d.RetryAfter = engine.Micros(oldest - now)
	}
	s.held = max(s.held, held)
	d.Remaining = max(r.Limit-held, 0)
	return d
}
