package respserver

import (
	"cmp"
	"runtime/debug"
	"slices"
	"time"
)

// overBudget closes the connections holding the most input until what the
// others hold is within the budget, as Redis's maxmemory-clients does.
// The goroutine serving each one finds its evict flag set, answers
// errInputBudget and closes it.
func (s *Server) overBudget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	over := s.stats.input.Load() - s.cfg.MaxInputMemory
	cs := make([]*client, 0, len(s.conns))
	for c := range s.conns {
		if c.evict.Load() {
			over -= c.inputBytes() // closing already: its bytes are as good as returned
		} else {
			cs = append(cs, c)
		}
	}
	if over <= 0 {
		return
	}
	// The largest first; of equal ones the newest, which has sent the
	// least of what it announced (a client that a reservation for its
	// announced argument put over the budget is closed before one that
	// holds as much and has sent more of it).
	slices.SortFunc(cs, func(a, b *client) int {
		return cmp.Or(cmp.Compare(b.inputBytes(), a.inputBytes()), cmp.Compare(b.id, a.id))
	})
	for _, c := range cs {
		if over <= 0 {
			break
		}
		over -= c.inputBytes()
		c.evict.Store(true)
		s.stats.evicted.Add(1)
		s.log.Warn("closing a client over the input budget", "id", c.id, "addr", c.addr, "held", c.inputBytes(), "max_input_memory", s.cfg.MaxInputMemory)
		c.conn.Wake() // it answers the error and closes
	}
}

// inputBytes is what the connection holds against the budget.
func (c *client) inputBytes() int64 { return c.inputHeld.Load() }

// returnAtLeast is the smallest buffer whose release has the server give
// memory back to the system, and returnAfter how long after a release it
// does: Go returns freed memory to the system only slowly, and its
// collector (GOGC 400 in the binary) may not even run on an idle server,
// so a burst of large inputs would otherwise keep its resident memory
// long after its clients left. Once a second at most, however many
// buffers are released meanwhile: a forced collection costs a few
// milliseconds.
const (
	returnAtLeast = 1 << 20
	returnAfter   = time.Second
)

// released notes that a connection dropped a buffer of n bytes.
func (s *Server) released(n int) {
	if n < returnAtLeast || !s.returning.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(returnAfter, func() {
		s.returning.Store(false)
		debug.FreeOSMemory()
	})
}
