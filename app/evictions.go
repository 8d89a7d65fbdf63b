package app

import (
	"context"
	"time"
)

// Evictions by the in-memory store are a silent loss unless said: each
// forgets a key's count, so that its next request is decided as its
// first, and a client that fills the store with keys of its own can so
// reset another's. watchEvictions says so while it happens: a warning at
// most once every evictionNoteEvery, with the count since the last one.
// INFO (memory_store_evictions) and /metrics
// (sluice_memory_store_evictions_total) count them all along.
const (
	evictionNoteEvery = 10 * time.Second
	// evictionPoll is how often the count is read: the first eviction is
	// told within it, not a whole evictionNoteEvery later.
	evictionPoll = time.Second
)

// watchEvictions reads the in-memory store's eviction count every
// evictionPoll until ctx ends, and warns while it grows.
func (s *Sidecar) watchEvictions(ctx context.Context) error {
	t := time.NewTicker(evictionPoll)
	defer t.Stop()
	told := s.mem.Evictions()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			n := s.mem.Evictions()
			if n == told || now.Sub(last) < evictionNoteEvery {
				continue
			}
			s.log.Warn("the in-memory store is evicting keys whose counts still matter: past --max-keys each eviction forgets a key's count, and its next request is decided as its first; raise --max-keys",
				"evicted", n-told, "memory_store_evictions", n, "max_keys", s.cfg.MaxKeys, "memory_store_keys", s.mem.Len())
			told, last = n, now
		}
	}
}
