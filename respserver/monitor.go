package respserver

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/resp"
)

// MONITOR streams every command the server runs to the connections that
// asked, in Redis's line format:
//
//	+1767225600.000123 [0 127.0.0.1:50312] "RL.GCRA" "user:42" "5" "10" "1m" -> allowed=1 remaining=4 retry_after_ms=0 path=memory
//
// A decision's line is fed once it is decided, with the decision it got
// after " -> ", so that a user can watch why a request was refused; any
// other command's line is fed once it has run. As in Redis, a command
// refused before it runs (unknown, wrong arity, NOAUTH) is not shown, nor
// are the administrative MONITOR, CLIENT LIST and CLIENT KILL, and AUTH's
// arguments and HELLO's AUTH pair read "(redacted)".
//
// It costs nothing while no one monitors, and the decision path holds
// none of its code: a command reaches it through one hook on the way in
// (client.command reads one atomic count, Server.monitoring, and calls
// execMonitored only when it is not 0) and one on the way out (deliver
// calls feedLanded only for a segment that kept lines). While someone does, the connection that ran
// a command formats its line and appends it to each monitor's backlog
// under monMu; the goroutine or loop serving the monitor writes it, woken
// only when its backlog was empty. A monitor whose backlog passes
// maxMonitorBacklog, because it reads slower than commands arrive, is
// closed: it must not hold memory or the connections it watches.

// maxMonitorBacklog bounds the lines waiting for one monitor's socket:
// past it the monitor is closed.
const maxMonitorBacklog = 1 << 20

// monitor is one connection in MONITOR mode.
type monitor struct {
	c     *client
	lines []byte // guarded by Server.monMu: fed, not yet taken by the connection's goroutine or loop
}

func runMonitor(c *client, _ [][]byte) {
	c.out = redcon.AppendOK(c.out)
	if c.mon != nil {
		return
	}
	m := &monitor{c: c}
	c.mon = m
	s := c.s
	s.monMu.Lock()
	s.monitors = append(s.monitors, m)
	s.monitoring.Add(1)
	s.monMu.Unlock()
}

// unmonitor takes the connection out of MONITOR mode, if it is in it:
// RESET, or the connection closes.
func (c *client) unmonitor() {
	m := c.mon
	if m == nil {
		return
	}
	c.mon = nil
	s := c.s
	s.monMu.Lock()
	defer s.monMu.Unlock()
	if i := slices.Index(s.monitors, m); i >= 0 { // not when feed dropped it
		s.dropMonitorLocked(i)
	}
}

func (s *Server) dropMonitorLocked(i int) {
	s.monitors = slices.Delete(s.monitors, i, i+1)
	s.monitoring.Add(-1)
}

// feed appends a finished line to every monitor's backlog, waking the
// ones whose backlog was empty, and closes a monitor that fell behind.
func (s *Server) feed(line []byte) {
	s.monMu.Lock()
	defer s.monMu.Unlock()
	for i := 0; i < len(s.monitors); i++ {
		m := s.monitors[i]
		if len(m.lines)+len(line) > maxMonitorBacklog {
			s.log.Warn("closing a MONITOR client that fell behind", "id", m.c.id, "addr", m.c.addr, "backlog", len(m.lines))
			s.dropMonitorLocked(i)
			i--
			m.lines = nil
			m.c.kill()
			continue
		}
		if len(m.lines) == 0 {
			m.c.conn.wake()
		}
		m.lines = append(m.lines, line...)
	}
}

// takeMonitorLines appends the lines waiting for this monitor to dst.
func (c *client) takeMonitorLines(dst []byte) []byte {
	s := c.s
	s.monMu.Lock()
	defer s.monMu.Unlock()
	m := c.mon
	dst = append(dst, m.lines...)
	if cap(m.lines) > keepInput {
		m.lines = nil // a burst grew it: let it go
	} else {
		m.lines = m.lines[:0]
	}
	return dst
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

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
	if hiddenFromMonitor(args) {
		return
	}
	c.monLine = appendMonitorLine(c.monLine[:0], time.Now(), c.monAddr, args)
	c.monLine = append(c.monLine, "\r\n"...)
	c.s.feed(c.monLine)
}

// keepLine keeps a decision's line with its pending reply, the one after
// the first n of g, to be fed with its decision; or, when it was answered
// at once (c.out grew past o with its error), feeds the line with that.
func (c *client) keepLine(g *segment, n, o int, args [][]byte) {
	now := time.Now()
	if len(g.pend) > n {
		p := &g.pend[n]
		p.mon = int32(len(g.mon)) + 1
		g.mon = appendMonitorLine(g.mon, now, c.monAddr, args)
		g.mon = append(g.mon, '\n')
		return
	}
	// Answered at once: c.out ends with its "-ERR …\r\n".
	msg := c.out[o:]
	msg = bytes.TrimSuffix(bytes.TrimPrefix(msg, []byte("-")), []byte("\r\n"))
	c.monLine = appendMonitorLine(c.monLine[:0], now, c.monAddr, args)
	c.monLine = appendErrorOutcome(c.monLine, str(msg))
	c.s.feed(c.monLine)
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
		c.monLine = appendErrorOutcome(c.monLine, requestError(err, p.cmd))
		c.s.feed(c.monLine)
		return
	}
	allowed, retry := d.Allowed, ceilMillis(d.RetryAfter)
	if p.shape == shapeThrottleOver {
		allowed, retry = false, -1 // never: the quantity is over the burst
	}
	b := c.monLine
	b = append(b, " -> allowed="...)
	if allowed {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	b = append(b, " remaining="...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, " retry_after_ms="...)
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, " path="...)
	b = append(b, c.s.cfg.Service.PathName(g.batch.Path(p.req))...)
	if g.batch.Shadowed(p.req) {
		b = append(b, " shadow=refused"...)
	}
	c.monLine = append(b, "\r\n"...)
	c.s.feed(c.monLine)
}

// feedError feeds the line of a command answered with an error in its
// place behind decisions.
func (c *client) feedError(g *segment, p *pending, msg string) {
	c.monLine = append(c.monLine[:0], pendingLine(g, p)...)
	c.monLine = appendErrorOutcome(c.monLine, msg)
	c.s.feed(c.monLine)
}

// appendErrorOutcome ends a line with the error reply a command got, as
// redis-cli prints one; a monitor line is a simple string, so no line
// break may reach it.
func appendErrorOutcome(dst []byte, msg string) []byte {
	dst = append(dst, " -> (error) "...)
	for i := 0; i < len(msg); i++ {
		if ch := msg[i]; ch == '\r' || ch == '\n' {
			dst = append(dst, ' ')
		} else {
			dst = append(dst, ch)
		}
	}
	return append(dst, "\r\n"...)
}

// hiddenFromMonitor tells the commands Redis keeps out of MONITOR as
// administrative: MONITOR itself, CLIENT LIST and CLIENT KILL.
func hiddenFromMonitor(args [][]byte) bool {
	switch {
	case resp.Is(args[0], "monitor"):
		return true
	case resp.Is(args[0], "client") && len(args) > 1:
		return resp.Is(args[1], "list") || resp.Is(args[1], "kill")
	}
	return false
}

// appendMonitorLine writes a MONITOR line without its end, as Redis's
// replicationFeedMonitors does: "+<seconds>.<microseconds> [0 <addr>]"
// and each argument quoted and escaped; AUTH's arguments and the pair
// after HELLO's AUTH read "(redacted)", as Redis redacts them.
func appendMonitorLine(dst []byte, now time.Time, addr string, args [][]byte) []byte {
	us := now.UnixMicro()
	dst = append(dst, '+')
	dst = strconv.AppendInt(dst, us/1e6, 10)
	dst = append(dst, '.')
	frac := us % 1e6
	for d := int64(100000); d > 1 && frac < d; d /= 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendInt(dst, frac, 10)
	dst = append(dst, " [0 "...)
	dst = append(dst, addr...)
	dst = append(dst, "] "...)
	secret := redacted(args)
	for i, a := range args {
		if i > 0 {
			dst = append(dst, ' ')
		}
		if i < len(secret) && secret[i] {
			dst = append(dst, `"(redacted)"`...)
		} else {
			dst = resp.AppendRepr(dst, a)
		}
	}
	return dst
}

// redacted marks the arguments MONITOR must not show: every argument of
// AUTH, the user and password after HELLO's AUTH. Nil for any other
// command.
func redacted(args [][]byte) []bool {
	switch {
	case resp.Is(args[0], "auth"):
		secret := make([]bool, len(args))
		for i := 1; i < len(args); i++ {
			secret[i] = true
		}
		return secret
	case resp.Is(args[0], "hello"):
		var secret []bool
		for i := 2; i < len(args); i++ {
			switch {
			case strings.EqualFold(str(args[i]), "auth") && i+2 < len(args):
				if secret == nil {
					secret = make([]bool, len(args))
				}
				secret[i+1], secret[i+2] = true, true
				i += 2
			case strings.EqualFold(str(args[i]), "setname"):
				i++
			}
		}
		return secret
	}
	return nil
}
