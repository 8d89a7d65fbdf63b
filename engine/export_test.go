package engine

import "fmt"

// Queued reports how many callers wait in the batcher's queue, for the
// tests that watch a batch gather.
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// StateOf prints the state the memory store keeps for key under alg, and
// when it ends, or "" when it keeps none that is live at now (µs): for the
// tests that compare two stores' states.
func (m *MemoryStore) StateOf(alg Algorithm, key string, now int64) string {
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
	return fmt.Sprintf("a=%d b=%d c=%d log=%v expires=%d", e.a, e.b, e.c, e.log, e.expires)
}
