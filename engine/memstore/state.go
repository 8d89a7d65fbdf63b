package memstore

import (
	"context"
	"slices"

	"github.com/sluice-rl/sluice/engine"
)

// StateKey names the state the memory store keeps for key under l, as
// the Redis key is written less its prefix and algorithm: the key itself
// for a single-limit request (l.Name empty), else "{key}:name", one
// state per limit of a multi-limit request.
func (m *Store) StateKey(key string, l engine.NamedLimit) string {
	if l.Name == "" {
		return key
	}
	return "{" + key + "}:" + l.Name
}

// ReadState returns the state the store keeps for key under l and its
// clock now (µs), for an explanation: a copy, taken under the shard's
// lock. A key it keeps no live state for reads as the zero State, which
// every algorithm reads as full capacity. It never fails.
func (m *Store) ReadState(_ context.Context, key string, l engine.NamedLimit) (engine.State, int64, error) {
	now := m.now().UnixMicro()
	sk := stateKey{l.Limit.Algorithm, key}
	if l.Name != "" {
		sk = limitStateKey(key, l)
	}
	h := m.hash(sk.alg, sk.key)
	s := m.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.lookup(sk, h)
	if i < 0 {
		return engine.State{}, now, nil
	}
	e := s.entry(i)
	if now >= e.expires {
		return engine.State{}, now, nil
	}
	st := e.State
	st.Log = slices.Clone(e.Log)
	return st, now, nil
}
