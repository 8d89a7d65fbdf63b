package respserver

import (
	"slices"
	"time"
)

// aLongTimeAgo, as a read deadline, wakes a goroutine blocked in Read.
var aLongTimeAgo = time.Unix(1, 0)

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
	slices.SortFunc(cs, func(a, b *client) int { return int(b.inputBytes() - a.inputBytes()) })
	for _, c := range cs {
		if over <= 0 {
			break
		}
		over -= c.inputBytes()
		c.evict.Store(true)
		s.stats.evicted.Add(1)
		s.log.Warn("closing a client over the input budget", "id", c.id, "addr", c.addr, "held", c.inputBytes(), "max_input_memory", s.cfg.MaxInputMemory)
		if c.loop != nil {
			c.loop.evictLater(c)
		} else if c.netConn != nil {
			_ = c.netConn.SetReadDeadline(aLongTimeAgo) // its goroutine wakes, sees evict
		}
	}
}

// inputBytes is what the connection holds against the budget.
func (c *client) inputBytes() int64 { return c.inputHeld.Load() }
