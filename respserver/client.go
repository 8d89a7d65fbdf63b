package respserver

import (
	"fmt"
	"net"
	"runtime/debug"
	"unsafe"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/service"
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

	// last is the command this connection sent last: a pipeline mostly
	// repeats one, and comparing its name costs less than a lookup.
	last *command

	// batch holds the queued decisions until settle; its Trace is set by
	// RL.TRACE. Reused per pipeline, with pend and out, so that a warm
	// connection allocates nothing.
	batch  *service.Batch
	single [1]*service.Batch // one(): no slice allocated per settle
	pend   []pending
	out    []byte
}

// pending is a reply owed in pipeline order: a queued decision, or an error
// that was found while decisions before it were still queued.
type pending struct {
	req   int // index into batch, or -1 for err
	shape shape
	cmd   *command
	err   string
}

func newClient(s *Server, addr string) *client {
	c := &client{
		s:      s,
		id:     s.nextID.Add(1),
		addr:   addr,
		proto:  2,
		authed: s.cfg.RequirePass == "",
		batch:  s.cfg.Service.NewBatch(),
	}
	c.in.p = parser{maxArgs: int64(s.cfg.MaxArgs), maxBulk: int64(s.cfg.MaxRequestBytes)}
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
		req, sh, msg := cmd.parse(cmd, args)
		if msg != "" {
			c.fail(msg)
			return
		}
		i, err := c.batch.Add(req)
		if err != nil {
			c.owe(requestError(err, cmd)) // the service counted it
			return
		}
		if sh == shapeRL && c.batch.Limit(i).Algorithm == engine.LeakyBucket {
			sh = shapeLeaky
		}
		c.pend = append(c.pend, pending{req: i, shape: sh, cmd: cmd})
		return
	}
	c.settle()
	cmd.run(c, args)
}

// fail counts an error the server found itself and owes its reply.
func (c *client) fail(msg string) {
	c.s.cfg.Service.CountError(service.ErrRequest)
	c.owe(msg)
}

// owe owes an error reply: queued behind pending decisions, or at once.
func (c *client) owe(msg string) {
	if len(c.pend) == 0 {
		c.out = redcon.AppendError(c.out, msg)
		return
	}
	c.pend = append(c.pend, pending{req: -1, err: msg})
}

// settle decides the queued requests as one batch and writes every owed
// reply in order.
func (c *client) settle() {
	if c.batch.Len() > 0 {
		c.s.cfg.Service.Decide(c.one(), c.answer)
		return
	}
	c.answer()
}

// one is the client's batch as the one batch of a Decide.
func (c *client) one() []*service.Batch {
	c.single[0] = c.batch
	return c.single[:]
}

// answer writes every owed reply in order, once the batch is decided.
func (c *client) answer() {
	c.s.stats.commands.Add(c.commands)
	c.commands = 0
	for i := range c.pend {
		p := &c.pend[i]
		if p.req < 0 {
			c.out = redcon.AppendError(c.out, p.err)
			continue
		}
		d, err := c.batch.Result(p.req)
		if err != nil {
			c.out = redcon.AppendError(c.out, requestError(err, p.cmd))
			continue
		}
		c.out = appendDecision(c.out, d, p.shape, c.proto)
	}
	c.dropQueue()
}

// dropQueue empties the queue of requests and owed replies.
func (c *client) dropQueue() {
	c.batch.Clear()
	clear(c.pend)
	c.pend = c.pend[:0]
}

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
// error and closes the connection once it is written.
func (c *client) internalError() {
	c.dropQueue()
	c.out = redcon.AppendError(c.out, "ERR internal error")
	c.quit = true
}

// str views an argument as a string without copying. Arguments alias the
// connection's input, which is not written again until the commands read
// from it are settled (compact), and nothing keeps such a string past its
// settle: stores copy the keys they keep.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
