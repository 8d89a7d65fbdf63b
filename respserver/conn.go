package respserver

import (
	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/monitor"
	"github.com/sluice-rl/sluice/internal/transport"
	"github.com/sluice-rl/sluice/service"
)

// The client as its transport drives it (transport.Conn): what a read
// brought, what is handed over and lands, what is written. A transport
// calls these on the goroutine serving the connection.

var (
	_ transport.Conn  = (*client)(nil)
	_ monitor.Watcher = (*client)(nil)
)

// maxQueued bounds the replies a connection may owe behind its batch in
// flight before its event loop stops reading it until that batch lands.
const maxQueued = 4096

func (c *client) Room() []byte { return c.room() }

// Filled runs what a read of n bytes into Room completed, short of
// handing it over.
func (c *client) Filled(n int) {
	defer c.recoverPanic()
	c.take(n)
}

func (c *client) Reading() bool {
	return !c.held && (c.flying == nil || len(c.cur.pend) < maxQueued)
}

// Lift takes the queued decisions to hand over; when only errors were
// owed, and are out, what waited behind them runs first.
func (c *client) Lift() transport.Segment {
	defer c.recoverPanic()
	for {
		if g := c.lift(); g != nil {
			return g
		}
		if !c.held || c.flying != nil {
			return nil
		}
		c.proceed()
	}
}

// Landed writes a landed segment's replies and runs what waited for it.
func (c *client) Landed(s transport.Segment, gone bool) {
	g := s.(*segment)
	if gone {
		g.clear() // the connection is gone: nothing to answer
		if c.flying == g {
			c.flying = nil
		}
		return
	}
	defer c.recoverPanic()
	c.deliver(g)
	if c.held && c.flying == nil {
		c.proceed()
	}
}

func (c *client) Out() []byte { return c.out }

// Sent drops the first n bytes of Out, written, and a buffer a huge
// pipeline grew once all are.
func (c *client) Sent(n int) {
	if n < len(c.out) {
		c.out = c.out[:copy(c.out, c.out[n:])]
		return
	}
	if cap(c.out) > 1<<20 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
}

// Flushed drops the input that the commands run came from.
func (c *client) Flushed()   { c.compact() }
func (c *client) Idle() bool { return c.idle() }
func (c *client) Done() bool { return c.quit }
func (c *client) Failed()    { c.internalError() }

func (c *client) Closed(err error) { c.s.closed(c, err) }

// Woken answers what another connection asked: the input budget's error
// for one evicted, a close for one killed, or a monitor's lines; a
// monitor whose socket has not taken monitor.MaxBacklog of them is closed,
// as feed closes one whose backlog grows past it.
func (c *client) Woken() transport.Wakeup {
	switch {
	case c.evicted():
		c.out = redcon.AppendError(c.out, errInputBudget)
		return transport.Evict
	case c.killed.Load():
		return transport.Kill
	case c.mon != nil:
		c.out = c.s.monitors.Take(c.mon, c.out)
		if len(c.out) > monitor.MaxBacklog {
			c.s.log.Warn("closing a MONITOR client that fell behind", "id", c.id, "addr", c.addr, "unsent", len(c.out))
			return transport.Kill
		}
	}
	return transport.Serve
}

// Batch is what the segment hands over.
func (g *segment) Batch() *service.Batch { return g.batch }
