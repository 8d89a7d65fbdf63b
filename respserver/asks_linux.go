//go:build linux

package respserver

import "github.com/tidwall/redcon"

// What other goroutines ask of a connection an event loop serves. The
// loop alone reads, writes and closes its connections, so CLIENT KILL
// from another connection, the input budget's eviction or a MONITOR line
// fed by one sets the connection's state (killed, evict, its monitor's
// backlog) and wakes it: posts the loop a look at it.

// wake has the loop look at the connection. One not adopted yet is not
// looked at: the loop checks killed when it welcomes it, and it monitors
// nothing and holds no input yet.
func (lc *loopConn) wake() {
	l := lc.l
	l.mu.Lock()
	adopted := lc.adopted
	l.mu.Unlock()
	if adopted {
		l.el.Post(func() { l.answer(lc) })
	}
}

// answer closes a connection evicted, with the input budget's error, or
// killed, or moves a monitor's lines to its replies, written this turn; a
// monitor whose socket has not taken maxMonitorBacklog of them is closed,
// as feed closes one whose backlog grows past it.
func (l *loop) answer(lc *loopConn) {
	if lc.fd < 0 {
		return
	}
	c := lc.c
	switch {
	case c.evict.Load():
		c.out = redcon.AppendError(c.out, errInputBudget)
		l.write(lc)
		l.close(lc, nil)
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
