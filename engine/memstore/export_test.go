package memstore

import (
	"fmt"

	"github.com/sluice-rl/sluice/engine"
)

// StateOf prints the state the memory store keeps for key under alg, and
// when it ends, or "" when it keeps none that is live at now (µs): for the
// tests that compare two stores' states.
func (m *Store) StateOf(alg engine.Algorithm, key string, now int64) string {
	h := m.hash(alg, key)
	s := m.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.lookup(stateKey{alg, key}, h)
	if i < 0 {
		return ""
	}
	e := s.entry(i)
	if now >= e.expires {
		return ""
	}
	return fmt.Sprintf("a=%d b=%d c=%d log=%v expires=%d", e.A, e.B, e.C, e.Log, e.expires)
}
