package respserver

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tidwall/redcon"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/internal/membudget"
	"github.com/sluice-rl/sluice/internal/monitor"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/internal/transport"
	"github.com/sluice-rl/sluice/service"
)

// client is one connection's state. Only the goroutine serving the
// connection (its own, or its event loop's: its transport) touches it.
//
// A connection's decisions queue in its current segment (cur) until the
// transport hands them to the service; then the segment is in flight
// (flying) until its results land, and the next decisions queue behind
// it. At most one segment is in flight per connection, so its decisions
// take effect in the order it sent them; replies go out in that order
// too, errors and all. A command that is not a decision (RL.RESET, HELLO,
// AUTH, …) waits (held) until everything before it has landed, so that it
// sees and makes effects in order; nothing after it runs meanwhile.
type client struct {
	s    *Server
	id   int64
	addr string
	// conn serves the connection's bytes (package transport; conn.go is
	// the client's side): set before the client is shared, then read
	// only.
	conn transport.Transport

	in input
	// budget is its share of the input budget (budget.go): what it holds,
	// set by its own goroutine, and whether the budget closes it.
	budget *membudget.Holder

	// What other connections read of this one, for CLIENT LIST and
	// CLIENT KILL (clientlist.go): set before it is shared, or atomic.
	laddr   string
	monAddr string // its address on MONITOR lines
	created time.Time
	fd      atomic.Int32           // its descriptor; -1 when unknown
	active  atomic.Int64           // UnixNano of its last read, for idle=
	queued  atomic.Int64           // bytes read and not yet run, for qbuf=
	lastCmd atomic.Pointer[string] // the full name of the last command it ran, for cmd=
	shown   *command               // the command lastCmd names, so that a pipeline of one command stores it once
	// killed is set by CLIENT KILL from another connection: the goroutine
	// or loop serving this one closes it.
	killed atomic.Bool
	// infoMu guards the writes of name, libName, libVer and proto, which
	// CLIENT LIST reads from other connections; the connection's own
	// goroutine reads them without it, as only it writes them.
	infoMu sync.Mutex

	// mon is set while the connection runs MONITOR (monitor.go); monLine
	// is where the lines it and others see of its commands are written.
	mon     *monitor.Tap
	monLine []byte

	proto   int  // 2 or 3
	named   bool // RL.REPLY MAP: decisions are written as maps (reply.go)
	authed  bool
	name    string
	libName string
	libVer  string
	quit    bool // QUIT was read: answer what came before it, then close
	multi   bool // a MULTI was refused: commands are refused until EXEC or DISCARD (transactions.go)
	held    bool // a command waits for what is in flight to land

	// commands counts the commands run since proceed last added them to
	// the server's count: one atomic add per read, not per command.
	commands int64

	// last is the command this connection sent last: a pipeline mostly
	// repeats one, and comparing its name costs less than a lookup.
	last *command

	// trace is the parent of this connection's decision spans, set by
	// RL.TRACE; the zero value traces nothing.
	trace trace.SpanContext

	cur    *segment // queued: decisions and replies owed after them
	flying *segment // handed to the service, or a reset under way; nil if none
	spare  *segment // a landed segment, kept for reuse
	out    []byte
}

// segment is a run of a connection's owed replies: the decisions queued in
// its batch, errors in their places, or one RL.RESET's answer.
type segment struct {
	c     *client
	batch *service.Batch
	pend  []pending
	// An RL.RESET under way, off the loop: its keys, then its outcome.
	reset    []string
	resetErr error
	// Another command run off the loop (offLoop: RL.ACQUIRE, RL.RELEASE):
	// appends its reply once it has landed.
	answer func([]byte) []byte
	// mon holds the MONITOR lines of its pending replies, each ended by
	// a newline, while someone monitors (monitor.go): deliver hands the
	// segment to MONITOR only when it holds some.
	mon []byte
}

// pending is a reply owed in pipeline order: a queued decision, or an error
// that was found while decisions before it were still queued.
type pending struct {
	req    int // index into batch, or -1 for err
	shape  shape
	detail bool // RL.ALLOW … DETAIL: each limit's reply too
	// mon, when not 0, is 1 + where the command's MONITOR line starts in
	// the segment's mon: the reply it gets is added to it once known.
	mon int32
	cmd *command
	err string
}

// newClient makes a connection's state. Its transport is register's to
// set; until then (and for the tests' clients without a network) it is a
// goroutine's without a net.Conn: work runs in place, and there is
// nothing to wake or close.
func newClient(s *Server, addr string) *client {
	c := &client{
		s:       s,
		id:      s.nextID.Add(1),
		addr:    addr,
		monAddr: addr,
		proto:   2,
		authed:  s.cfg.RequirePass == "",
		created: time.Now(),
	}
	c.conn = transport.NewGoConn(nil, c, s.cfg.Service)
	c.fd.Store(-1)
	c.active.Store(c.created.UnixNano())
	c.cur = c.newSegment()
	c.in.p = resp.NewParser(s.cfg.MaxArgs, s.cfg.MaxRequestBytes)
	s.joinBudget(c)
	return c
}

func (c *client) newSegment() *segment {
	if g := c.spare; g != nil {
		c.spare = nil
		return g
	}
	return &segment{c: c, batch: c.s.cfg.Service.NewBatch().From("resp")}
}

// empty tells whether the segment owes nothing.
func (g *segment) empty() bool { return len(g.pend) == 0 && g.reset == nil && g.answer == nil }

// command runs one command, or reports that it must wait (hold) for what
// is in flight or queued before it: then nothing of it has run, and the
// transport runs it again once those have landed. It is MONITOR's one
// hook on the way in: while no one monitors, a command goes to exec and
// nothing else; while someone does, through monitor.go's execMonitored,
// which feeds its line.
func (c *client) command(args [][]byte) (hold bool) {
	if c.s.monitors.On() {
		return c.execMonitored(args)
	}
	return c.exec(args) == held
}

// outcome is what exec did with a command.
type outcome uint8

const (
	ran     outcome = iota // run: its reply written, or owed in its place
	queued                 // a decision: queued, or owed its error in its place
	refused                // not run: unknown, wrong arity, not authenticated, in a refused MULTI, or no command at all
	held                   // not run yet: it waits for what is queued or in flight before it
)

// exec runs one command, or holds it (see command). Decisions are queued.
func (c *client) exec(args [][]byte) outcome {
	if len(args) == 0 {
		c.commands++
		return refused
	}
	cmd := c.last
	if cmd == nil || !resp.Is(args[0], cmd.name) {
		cmd = lookup(args[0])
		c.last = cmd
	}
	if cmd != nil && cmd.run != nil && (c.flying != nil || !c.cur.empty()) &&
		len(args) >= cmd.minArgs && (cmd.maxArgs == 0 || len(args) <= cmd.maxArgs) && (c.authed || cmd.noAuth) {
		return held
	}
	c.commands++
	if cmd != nil && cmd != c.shown {
		c.shown = cmd
		c.lastCmd.Store(&cmd.name)
	}
	switch {
	case cmd == nil:
		c.fail(unknownCommand(args))
	case len(args) < cmd.minArgs || (cmd.maxArgs > 0 && len(args) > cmd.maxArgs):
		c.fail(arityError(cmd.name))
	case !c.authed && !cmd.noAuth:
		c.fail(errNoAuth)
	case c.multi && !cmd.inMulti:
		c.fail(errInMulti)
	case cmd.parse != nil:
		c.queue(cmd, args)
		return queued
	default:
		c.count() // INFO counts itself, as it did when every command settled first
		cmd.run(c, args)
		return ran
	}
	return refused
}

// count adds the commands run since the last count to the server's.
func (c *client) count() {
	if c.commands > 0 {
		c.s.stats.commands.Add(c.commands)
		c.commands = 0
	}
}

// queue parses a decision and queues it in the current segment.
func (c *client) queue(cmd *command, args [][]byte) {
	req, sh, msg := cmd.parse(cmd, args)
	if msg != "" {
		c.fail(msg)
		return
	}
	g := c.cur
	i, err := g.batch.Add(req)
	if err != nil {
		c.owe(requestError(err, cmd)) // the service counted it
		return
	}
	if sh == shapeRL && g.batch.Leaky(i) {
		sh = shapeLeaky
	}
	g.pend = append(g.pend, pending{req: i, shape: sh, cmd: cmd, detail: req.Detail})
}

// fail counts an error the server found itself and owes its reply.
func (c *client) fail(msg string) {
	c.s.cfg.Service.CountError(service.ErrRequest)
	c.owe(msg)
}

// owe owes an error reply: at once when nothing is owed before it, else
// queued in its place.
func (c *client) owe(msg string) {
	if c.flying == nil && c.cur.empty() {
		c.out = redcon.AppendError(c.out, msg)
		return
	}
	c.cur.pend = append(c.cur.pend, pending{req: -1, err: msg})
}

// lift takes the current segment to hand over, when one is queued and
// none is in flight; the next decisions queue in a new one. A segment
// with no decision (only errors owed behind a landed one) is delivered at
// once instead, and lift returns nil.
func (c *client) lift() *segment {
	g := c.cur
	if c.flying != nil || g.empty() {
		return nil
	}
	c.cur = c.newSegment()
	if g.batch.Len() == 0 {
		c.deliver(g)
		return nil
	}
	g.batch.Trace = c.trace
	c.flying = g
	return g
}

// deliver writes a landed segment's replies in order, and keeps it for
// reuse.
func (c *client) deliver(g *segment) {
	if c.flying == g {
		c.flying = nil
	}
	if g.reset != nil {
		if g.resetErr != nil {
			c.out = redcon.AppendError(c.out, requestError(g.resetErr, nil))
		} else {
			c.out = redcon.AppendInt(c.out, int64(len(g.reset)))
		}
	}
	if g.answer != nil {
		c.out = g.answer(c.out)
	}
	for i := range g.pend {
		p := &g.pend[i]
		if p.req < 0 {
			c.out = redcon.AppendError(c.out, p.err)
			continue
		}
		d, err := g.batch.Result(p.req)
		if err != nil {
			c.out = redcon.AppendError(c.out, requestError(err, p.cmd))
			continue
		}
		if p.detail {
			_, names, parts := g.batch.Detail(p.req)
			c.out = appendDetail(c.out, d, p.shape, c.form(), names, parts)
			continue
		}
		if p.shape == shapeReserve {
			c.out = appendReservation(c.out, d, g.batch.Reservation(p.req), c.form())
			continue
		}
		c.out = appendDecision(c.out, d, p.shape, c.form())
	}
	if len(g.mon) > 0 { // MONITOR's one hook on the way out: lines kept by execMonitored
		c.feedLanded(g)
	}
	g.clear()
	c.spare = g
}

func (g *segment) clear() {
	g.batch.Clear()
	clear(g.pend)
	g.pend, g.reset, g.resetErr, g.answer, g.mon = g.pend[:0], nil, nil, nil, g.mon[:0]
}

// idle tells whether nothing is owed: no segment queued or in flight.
func (c *client) idle() bool { return c.flying == nil && c.cur.empty() }

// recoverPanic, deferred around running a connection's commands, turns a
// panic into an internal error reply and a closed connection: a bug, not
// an input, and it must not take the process down.
func (c *client) recoverPanic() {
	if r := recover(); r != nil {
		c.s.panicked(r)
		c.internalError()
	}
}

// panicked logs a recovered panic.
func (s *Server) panicked(r any) {
	s.log.Error("panic in command handler", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
}

// internalError drops what the client has queued, answers an internal
// error and closes the connection once it is written. A segment in flight
// is left to land (the service owns it until then) and is dropped then.
func (c *client) internalError() {
	c.cur.clear()
	c.held = false
	c.out = redcon.AppendError(c.out, errInternal)
	c.quit = true
}

// str views an argument as a string without copying. Arguments alias the
// connection's input, which is not written again until the commands read
// from it are settled (compact), and nothing keeps such a string past its
// settle: stores copy the keys they keep.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
