package chain

// Queued reports how many callers wait in the batcher's queues, for the
// tests that watch a batch gather.
func (b *Batcher) Queued() int {
	lanes := []*lane{b.one}
	if b.one == nil {
		lanes = *b.lanes.Load()
	}
	n := 0
	for _, l := range lanes {
		l.mu.Lock()
		n += len(l.pending)
		l.mu.Unlock()
	}
	return n
}
