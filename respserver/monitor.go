package respserver

import (
	"bytes"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/monitor"
)

// MONITOR streams every command the server runs to the connections that
// asked, in Redis's line format (package internal/monitor, whose hub
// holds the watchers' backlogs). A decision's line is fed once it is
// decided, with the decision it got after " -> ", so that a user can
// watch why a request was refused; any other command's line is fed once
// it has run. As in Redis, a command refused before it runs (unknown,
// wrong arity, NOAUTH) is not shown, nor are the administrative MONITOR,
// CLIENT LIST and CLIENT KILL.
//
// The decision path holds none of its code: a command reaches it through
// one hook on the way in (client.command asks the hub's On, one atomic
// load, and calls execMonitored only while someone watches) and one on
// the way out (deliver calls feedLanded only for a segment that kept
// lines).

func runMonitor(c *client, _ [][]byte) {
	c.out = redcon.AppendOK(c.out)
	if c.mon == nil {
		c.mon = c.s.monitors.Add(c)
	}
}

// unmonitor takes the connection out of MONITOR mode, if it is in it:
// RESET, or the connection closes.
func (c *client) unmonitor() {
	if c.mon != nil {
		c.s.monitors.Remove(c.mon)
		c.mon = nil
	}
}

// Behind closes a monitor that fell behind (monitor.Watcher); Wake is its
// transport's.
func (c *client) Behind(backlog int) {
	c.s.log.Warn("closing a MONITOR client that fell behind", "id", c.id, "addr", c.addr, "backlog", backlog)
	c.kill()
}

func (c *client) Wake() { c.conn.Wake() }

// execMonitored is exec while someone monitors (client.command): it runs
// the command and feeds its line, or keeps it with its pending reply, to
// be fed once decided (feedLanded). As in Redis, a command refused before
// it runs is not shown.
func (c *client) execMonitored(args [][]byte) (hold bool) {
	g, n, o := c.cur, len(c.cur.pend), len(c.out)
	switch c.exec(args) {
	case held:
		return true
	case ran:
		c.feedCommand(args)
	case queued:
		c.keepLine(g, n, o, args)
	}
	return false
}

// feedCommand feeds the line of a command that has run and is not a
// decision.
func (c *client) feedCommand(args [][]byte) {
	if monitor.Hidden(args) {
		return
	}
	c.monLine = monitor.AppendLine(c.monLine[:0], time.Now(), c.monAddr, args)
	c.monLine = append(c.monLine, "\r\n"...)
	c.s.monitors.Feed(c.monLine)
}

// keepLine keeps a decision's line with its pending reply, the one after
// the first n of g, to be fed with its decision; or, when it was answered
// at once (c.out grew past o with its error), feeds the line with that.
func (c *client) keepLine(g *segment, n, o int, args [][]byte) {
	now := time.Now()
	if len(g.pend) > n {
		p := &g.pend[n]
		p.mon = int32(len(g.mon)) + 1
		g.mon = monitor.AppendLine(g.mon, now, c.monAddr, args)
		g.mon = append(g.mon, '\n')
		return
	}
	// Answered at once: c.out ends with its "-ERR …\r\n".
	msg := c.out[o:]
	msg = bytes.TrimSuffix(bytes.TrimPrefix(msg, []byte("-")), []byte("\r\n"))
	c.monLine = monitor.AppendLine(c.monLine[:0], now, c.monAddr, args)
	c.monLine = monitor.AppendError(c.monLine, str(msg))
	c.s.monitors.Feed(c.monLine)
}

// feedLanded feeds the lines kept in a landed segment, each with the reply
// its command got.
func (c *client) feedLanded(g *segment) {
	for i := range g.pend {
		p := &g.pend[i]
		switch {
		case p.mon == 0:
		case p.req < 0:
			c.feedError(g, p, p.err)
		default:
			d, err := g.batch.Result(p.req)
			c.feedDecision(g, p, d, err)
		}
	}
}

// pendingLine is the line kept for p in g.mon.
func pendingLine(g *segment, p *pending) []byte {
	line := g.mon[p.mon-1:]
	if end := bytes.IndexByte(line, '\n'); end >= 0 {
		line = line[:end]
	}
	return line
}

// feedDecision feeds a decided request's line with the decision it got:
// allowed, remaining, retry_after_ms and what decided it, as the client
// reads them (shadow mode's admission, CL.THROTTLE's refusal of a
// quantity over its burst).
func (c *client) feedDecision(g *segment, p *pending, d *engine.Decision, err error) {
	c.monLine = append(c.monLine[:0], pendingLine(g, p)...)
	if err != nil {
		c.monLine = monitor.AppendError(c.monLine, requestError(err, p.cmd))
		c.s.monitors.Feed(c.monLine)
		return
	}
	path := g.batch.Path(p.req)
	o := monitor.Outcome{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfterMs: ceilMillis(d.RetryAfter),
		Path: c.s.cfg.Service.PathName(path), Shadow: g.batch.Shadowed(p.req)}
	if p.shape == shapeThrottleOver {
		o.Allowed, o.RetryAfterMs = false, -1 // never: the quantity is over the burst
	}
	// Why, as the explanation says it (service.Brief): computed here
	// only, while someone watches.
	br := g.batch.Brief(p.req)
	if br.ByPolicy {
		o.Policy = br.Policy
	} else {
		o.Rule = br.Policy
	}
	var st [64]byte
	o.Limit, o.Algorithm, o.State = br.Bound, br.Limit.Algorithm.String(), br.AppendState(st[:0])
	if path == engine.PathLocal || path == engine.PathFailOpen || path == engine.PathFailClosed {
		o.OnFailure = br.OnFailure.String()
	}
	c.monLine = monitor.AppendOutcome(c.monLine, o)
	c.s.monitors.Feed(c.monLine)
}

// feedError feeds the line of a command answered with an error in its
// place behind decisions.
func (c *client) feedError(g *segment, p *pending, msg string) {
	c.monLine = append(c.monLine[:0], pendingLine(g, p)...)
	c.monLine = monitor.AppendError(c.monLine, msg)
	c.s.monitors.Feed(c.monLine)
}
