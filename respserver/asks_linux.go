//go:build linux

package respserver

// What other goroutines ask of a connection an event loop serves. The
// loop alone reads, writes and closes its connections, so CLIENT KILL
// from another connection, or a MONITOR line fed by one, sets the
// connection's state (killed, its monitor's backlog) and posts the loop a
// look at it.

// ask has the loop look at c. A connection not adopted yet has no lc: the
// loop checks killed when it welcomes it, and it monitors nothing yet.
func (l *loop) ask(c *client) {
	l.mu.Lock()
	lc := c.lc
	l.mu.Unlock()
	if lc != nil {
		l.el.Post(func() { l.answer(lc) })
	}
}

// answer closes a connection killed, or moves a monitor's lines to its
// replies, written this turn; a monitor whose socket has not taken
// maxMonitorBacklog of them is closed, as feed closes one whose backlog
// grows past it.
func (l *loop) answer(lc *loopConn) {
	if lc.fd < 0 {
		return
	}
	c := lc.c
	switch {
	case c.killed.Load():
		l.close(lc, nil)
	case c.mon != nil:
		c.out = c.takeMonitorLines(c.out)
		if len(c.out) > maxMonitorBacklog {
			l.s.log.Warn("closing a MONITOR client that fell behind", "id", c.id, "addr", c.addr, "unsent", len(c.out))
			l.close(lc, nil)
			return
		}
		l.touch(lc)
	}
}
