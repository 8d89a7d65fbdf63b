package respserver

import "time"

// joinBudget counts c in the input budget (package membudget, shared with
// the other doors): when the budget picks it to close, as Redis's
// maxmemory-clients does, the goroutine or loop serving it finds it
// evicted, answers errInputBudget and closes it. The budget picks only a
// holder that holds something, which c does once its own goroutine has
// read: c.conn is set by then.
func (s *Server) joinBudget(c *client) {
	c.budget = s.budget.Join(func(held int64) {
		s.stats.evicted.Add(1)
		if unsaid, ok := s.stats.evictedLog.Allow(time.Now()); ok {
			// This client's, and how many others since the last line
			// (INFO's evicted_clients counts them all).
			s.log.Warn("closing a client over the input budget", "id", c.id, "addr", c.addr, "held", held,
				"max_input_memory", s.budget.Limit(), "others_since_last_line", unsaid)
		}
		c.conn.Wake() // it answers the error and closes
	})
}

// inputBytes is what the connection holds against the budget.
func (c *client) inputBytes() int64 { return c.budget.Held() }

// evicted reports whether the budget has picked c to close.
func (c *client) evicted() bool { return c.budget.Evicted() }
