package respserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
)

// client is one connection's state. Only the goroutine serving the
// connection (its own, or its event loop's) touches it, except netConn.
type client struct {
	s    *Server
	id   int64
	addr string
	// netConn is the connection a goroutine of its own serves; nil for one
	// an event loop serves. Set before the client is shared, then read
	// only.
	netConn net.Conn

	in input

	proto   int // 2 or 3
	authed  bool
	name    string
	libName string
	libVer  string
	quit    bool // QUIT was read: answer what came before it, then close

	// commands counts the commands read since the last settle, which adds
	// them to the server's count: one atomic add per pipeline.
	commands int64

	// trace is the parent of this connection's decision spans, set by
	// RL.TRACE; the zero value traces nothing.
	trace trace.SpanContext

	// policy is the policy the command being parsed named, if any: parse
	// sets it, exec keeps it with the queued request.
	policy policyRef

	// last is the command this connection sent last: a pipeline mostly
	// repeats one, and comparing its name costs less than a lookup.
	last *command

	// Reused per pipeline, so that a warm connection allocates nothing.
	// keys holds the policy-prefixed keys of the queued requests, which
	// alias it until they are settled (stores copy what they keep).
	keys []byte
	reqs []engine.Request
	res  []engine.Result
	pend []pending
	out  []byte
}

// pending is a reply owed in pipeline order: a queued decision, or an error
// that was found while decisions before it were still queued.
type pending struct {
	req    int // index into reqs, or -1 for err
	shape  shape
	cmd    *command
	err    string
	policy policyRef // RL.ALLOW's policy; zero for the inline commands
}

// policyRef is what a reply needs of the policy a request named.
type policyRef struct {
	name   string // "" for the inline commands
	shadow bool
}

func newClient(s *Server, addr string) *client {
	c := &client{
		s:      s,
		id:     s.nextID.Add(1),
		addr:   addr,
		proto:  2,
		authed: s.cfg.RequirePass == "",
	}
	c.in.guard = frameGuard{maxArgs: int64(s.cfg.MaxArgs), maxBulk: int64(s.cfg.MaxRequestBytes)}
	return c
}

// exec runs one command. Decisions are queued until settle; anything else
// settles the queue first, so replies and effects keep the pipeline's order.
func (c *client) exec(args [][]byte) {
	c.commands++
	if len(args) == 0 {
		return
	}
	cmd := c.last
	if cmd == nil || !named(args[0], cmd.name) {
		cmd = lookup(args[0])
		c.last = cmd
	}
	if cmd == nil {
		c.fail(unknownCommand(args))
		return
	}
	if len(args) < cmd.minArgs || (cmd.maxArgs > 0 && len(args) > cmd.maxArgs) {
		c.fail(arityError(cmd.name))
		return
	}
	if !c.authed && !cmd.noAuth {
		c.fail(errNoAuth)
		return
	}
	if cmd.parse != nil {
		c.policy = policyRef{}
		req, sh, msg := cmd.parse(c, cmd, args)
		if msg != "" {
			c.fail(msg)
			return
		}
		c.reqs = append(c.reqs, req)
		c.pend = append(c.pend, pending{req: len(c.reqs) - 1, shape: sh, cmd: cmd, policy: c.policy})
		return
	}
	c.settle()
	cmd.run(c, args)
}

// fail owes an error reply: queued behind pending decisions, or at once.
func (c *client) fail(msg string) {
	c.s.stats.errors.Add(1)
	c.s.observeFailure("request")
	if len(c.pend) == 0 {
		c.out = appendError(c.out, msg)
		return
	}
	c.pend = append(c.pend, pending{req: -1, err: msg})
}

// settle decides the queued requests as one batch and writes every owed
// reply in order.
func (c *client) settle() {
	var err error
	if len(c.reqs) > 0 {
		c.res = sized(c.res, len(c.reqs))
		err = c.decide()
	}
	c.answer(err)
}

// tracing tells whether this connection's decisions get spans.
func (c *client) tracing() bool { return c.trace.IsValid() && c.s.cfg.Tracer != nil }

// decide asks the store for the queued requests' decisions, into c.res.
func (c *client) decide() error {
	var start time.Time
	if c.tracing() {
		start = time.Now()
	}
	// No deadline of its own: the store bounds its waits (see
	// engine.Store), so a pipeline pays for no timer here.
	err := c.s.cfg.Store.Decide(context.Background(), c.reqs, c.res)
	if c.tracing() {
		c.traceDecisions(start, err)
	}
	return err
}

// answer writes every owed reply in order: the queued requests' decisions
// are in c.res, unless err failed them all.
func (c *client) answer(batchErr error) {
	c.s.stats.commands.Add(c.commands)
	c.commands = 0
	if len(c.pend) == 0 {
		return
	}
	var t tally
	for i := range c.pend {
		p := &c.pend[i]
		switch {
		case p.req < 0:
			c.out = appendError(c.out, p.err)
		case batchErr != nil:
			c.s.stats.errors.Add(1)
			c.s.observeFailure("store")
			c.out = appendError(c.out, storeError(batchErr))
		case c.res[p.req].Err != nil:
			err := c.res[p.req].Err
			c.s.stats.errors.Add(1)
			if errors.Is(err, engine.ErrInvalid) {
				c.s.observeFailure("request")
			} else {
				c.s.observeFailure("store")
			}
			c.out = appendError(c.out, requestError(err, p.cmd))
		default:
			r := &c.res[p.req]
			d := r.Decision
			// Shadow mode: counted as the refusal it was, answered as an
			// admission.
			shadow := p.policy.shadow && !d.Allowed
			if shadow {
				d.Allowed, d.RetryAfter = true, 0
			}
			t.add(c.s, decided{p.policy.name, c.reqs[p.req].Limit.Algorithm, d.Allowed && !shadow, shadow, r.Path})
			c.out = appendDecision(c.out, &d, p.shape, c.proto)
		}
	}
	t.flush(c.s)
	c.dropQueue()
}

// dropQueue empties the queue of requests and owed replies.
func (c *client) dropQueue() {
	clear(c.reqs) // drop the keys, which alias the input
	c.keys = c.keys[:0]
	clear(c.res)
	clear(c.pend)
	c.reqs, c.res, c.pend = c.reqs[:0], c.res[:0], c.pend[:0]
}

// sized is s with length n, reusing its array when it is large enough.
func sized(s []engine.Result, n int) []engine.Result {
	if cap(s) < n {
		return make([]engine.Result, n, 2*n)
	}
	return s[:n]
}

// recoverPanic, deferred around running a connection's commands, turns a
// panic into an internal error reply and a closed connection: a bug, not
// an input, and it must not take the process down.
func (c *client) recoverPanic() {
	if r := recover(); r != nil {
		c.s.log.Error("panic in command handler", "panic", fmt.Sprint(r), "id", c.id)
		c.dropQueue()
		c.out = appendError(c.out, "ERR internal error")
		c.quit = true
	}
}

// decided is what the counters and the Observer learn of a decision.
type decided struct {
	policy  string // "" for the inline commands
	alg     engine.Algorithm
	allowed bool // and not only by shadow mode
	shadow  bool
	path    engine.Path
}

// tally counts a pipeline's decisions for the server's counters and its
// Observer in runs of alike ones, so that a pipeline adds to the shared
// counters once per run rather than once per decision: they are contended
// by every connection.
type tally struct {
	run decided
	n   int
}

func (t *tally) add(s *Server, d decided) {
	if t.n > 0 && d != t.run {
		t.flush(s)
	}
	t.run = d
	t.n++
}

func (t *tally) flush(s *Server) {
	if t.n == 0 {
		return
	}
	d, n := t.run, int64(t.n)
	t.n = 0
	if int(d.path) < len(s.stats.paths) {
		s.stats.paths[d.path].Add(n)
	}
	switch {
	case d.shadow:
		s.stats.shadowed.Add(n)
	case d.allowed:
		s.stats.allowed.Add(n)
	default:
		s.stats.denied.Add(n)
	}
	if o := s.cfg.Observer; o != nil {
		name := d.policy
		if name == "" {
			name = "inline"
		}
		o.Decided(name, d.alg, d.allowed, d.shadow, d.path, int(n))
	}
}

// prefixed is prefix+key, written into the connection's key buffer: valid
// until the queued requests are settled. A buffer that grows leaves the
// earlier keys in the old array, which they keep alive.
func (c *client) prefixed(prefix string, key []byte) string {
	start := len(c.keys)
	c.keys = append(append(c.keys, prefix...), key...)
	return str(c.keys[start:])
}

// str views an argument as a string without copying. Arguments alias the
// connection's input, which is not written again until the commands read
// from it are settled (compact), and nothing keeps such a string past its
// settle: stores copy the keys they keep.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
