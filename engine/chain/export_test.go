package chain

// Queued reports how many callers wait in the batcher's queue, for the
// tests that watch a batch gather.
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}
