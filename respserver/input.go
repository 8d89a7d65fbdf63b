package respserver

import (
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/internal/resp"
)

// input is what a connection has read: commands already run, complete
// commands waiting to run (behind a held one), then the start of a
// command not complete yet. The keys of queued and flying decisions alias
// buf, so it is compacted in place only when the client is idle.
type input struct {
	buf    []byte
	parsed int // buf[:parsed] holds commands already run
	p      resp.Parser
	args   [][]byte // reused for each command's arguments
	perr   string   // a protocol error met after the complete commands: answered once they have run
	// unauth is a frame over the limits before authentication, met after
	// the complete commands (resp.Unauthenticated): the scan stopped at
	// buf[stopped], and the bytes from there are kept unread. Once the
	// commands before it have run, it is read again if one of them
	// authenticated the client, else answered as perr.
	unauth  string
	stopped int
}

// DefaultMaxArgs is Config.MaxArgs's default.
const DefaultMaxArgs = resp.DefaultMaxArgs

const (
	// readSize is the room a connection reads into: a pipeline of a few
	// dozen decisions arrives in one read.
	readSize = 4 << 10
	// keepInput is the largest input buffer a connection keeps once it is
	// empty again; a larger one, grown for a large pipeline, is dropped.
	keepInput = 64 << 10
	// maxRead is the most one read takes: a large argument arrives over
	// several turns of the event loop, and every other connection the
	// loop serves is read in between, so that a client sending megabytes
	// delays a small command by a turn of reads this size, not by its
	// megabytes.
	maxRead = 64 << 10
)

// room is where to read into, at the end of the input: never more than
// the request limit leaves, so that one read cannot overshoot it.
func (c *client) room() []byte {
	in := &c.in
	if cap(in.buf)-len(in.buf) < readSize/2 {
		c.grow()
	}
	room := in.buf[len(in.buf):cap(in.buf)]
	if left := c.s.cfg.MaxRequestBytes - (len(in.buf) - in.parsed); len(room) > left {
		room = room[:max(left, 1)]
	}
	return room[:min(len(room), maxRead)]
}

// grow moves what has not run into a new array (the old one stays as it
// is, for queued and flying keys alias it), twice what it holds: a large
// argument's array grows with what arrives of it, never past what its
// header announced. The budget is charged the announced length from the
// moment the header is read (footprint), so a client that announces more
// than the budget leaves is closed as soon as it starts (the largest
// holders go first), and one closed so is given no new array; at most
// readSize more.
//
// Not the announced length at once: the flood of clients that each send
// the start of a 16 MB argument and stop would have the event loop make a
// 16 MB array for each, and under the memory limit the collector has the
// goroutine that allocates pay for them, in assists and waits for a
// collection to start: the loop, and every client on it with it, stopped
// for seconds (bench/doorflood, every door at once). Doubling makes what
// arrives cost at most twice itself.
func (c *client) grow() {
	in := &c.in
	kept := len(in.buf) - in.parsed
	size := max(2*kept, readSize)
	if need := in.p.Need(); need > 0 {
		size = min(size, kept+need+readSize) // what the argument needs, and a read's room for the headers after it
	}
	size = min(size, c.s.cfg.MaxRequestBytes+readSize)
	c.account(c.footprintAt(size))
	if c.evicted() {
		size = min(size, kept+readSize)
	}
	grown := make([]byte, kept, size)
	copy(grown, in.buf[in.parsed:])
	in.p.Shift(in.parsed)
	in.stopped -= in.parsed
	in.buf, in.parsed = grown, 0
}

// take runs the commands that the n bytes just read into room complete,
// as far as proceed goes. A frame that breaks the protocol or a limit is
// answered with a protocol error, in order behind the replies owed before
// it, and the connection is marked to close (c.quit).
func (c *client) take(n int) {
	in := &c.in
	start := len(in.buf)
	in.buf = in.buf[:start+n]
	if in.unauth == "" { // else kept unread, behind the frame the scan stopped at
		c.scan(start)
	}
	c.active.Store(time.Now().UnixNano()) // once a read, for CLIENT LIST's idle=
	c.proceed()
	// Replies a client does not read are input it made the server hold:
	// charged with it, as Redis's maxmemory-clients charges both.
	c.account(c.footprint())
}

// scan follows the input from buf[from:], under Redis's limits before
// authentication while the client has not authenticated.
func (c *client) scan(from int) {
	in := &c.in
	in.p.SetUnauthenticated(!c.authed)
	fine, msg := in.p.Scan(in.buf, from)
	switch {
	case resp.Unauthenticated(msg):
		in.unauth, in.stopped = msg, from+fine
	case msg != "":
		in.buf = in.buf[:from+fine]
		in.perr = msg
	}
}

// proceed runs the complete commands read, until one must wait for what
// is in flight (c.held); the transport calls it again once that landed.
func (c *client) proceed() {
	in := &c.in
	c.held = false
run:
	for !c.quit {
		args, end, ok := in.p.Next(in.buf, in.args)
		if !ok {
			break
		}
		in.args = args
		if in.p.TooMany() {
			// Read whole and refused, in its place; the connection reads on.
			c.commands++
			c.fail(tooManyArgs(args[0], c.s.cfg.MaxArgs))
			in.parsed = end
			continue
		}
		if len(args) > 0 && c.command(args) { // an empty inline line is no command, as in Redis
			in.p.Unread()
			c.held = true
			break
		}
		in.parsed = end
	}
	c.queued.Store(int64(len(in.buf) - in.parsed)) // for CLIENT LIST's qbuf=
	c.count()
	if c.held || c.quit {
		return
	}
	if in.unauth != "" {
		if c.authed {
			// An AUTH pipelined before the frame lifted the limit: read
			// it, and what came after it, as an authenticated client's.
			in.unauth = ""
			c.scan(in.stopped)
			goto run
		}
		in.buf, in.perr, in.unauth = in.buf[:in.stopped], in.unauth, ""
	}
	msg := in.perr
	if msg == "" && len(in.buf)-in.parsed >= c.s.cfg.MaxRequestBytes {
		msg = resp.RequestTooBig
	}
	if msg != "" {
		c.fail(protocolError(msg))
		c.quit = true
	}
}

// compact drops the input that run commands came from, in place, when
// nothing aliases it any more: the client is idle.
func (c *client) compact() {
	in := &c.in
	defer func() { c.account(c.footprint()) }() // what was written is no longer held
	if !c.idle() || in.parsed == 0 && len(in.buf) > 0 {
		return // nothing to drop: a large command arriving read by read is not copied again
	}
	n := copy(in.buf, in.buf[in.parsed:])
	in.p.Shift(in.parsed)
	in.stopped -= in.parsed
	in.buf, in.parsed = in.buf[:n], 0
	if n == 0 && cap(in.buf) > keepInput {
		c.s.budget.Released(cap(in.buf))
		in.buf = nil
	}
}

// footprint is what the connection holds for its input and replies: its
// input buffer's capacity, or the length the command under way announced
// when that is more, its unsent replies' and the places of the arguments
// it has read (the parser's and the command's).
func (c *client) footprint() int { return c.footprintAt(cap(c.in.buf)) }

// footprintAt is footprint with an input buffer of capacity size.
func (c *client) footprintAt(size int) int {
	in := &c.in
	announced := len(in.buf) - in.parsed + in.p.Need()
	return max(size, announced) + cap(c.out) + in.p.Footprint() + cap(in.args)*int(unsafe.Sizeof([]byte(nil)))
}

// account sets the bytes this connection holds in the budget's total
// (its input buffer's capacity and its unsent replies'); a total over the
// budget closes the largest holders.
func (c *client) account(held int) { c.budget.Set(int64(held)) }
