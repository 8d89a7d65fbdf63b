package respserver

// input is what a connection has read: the commands run since the last
// settle, then the start of a command not complete yet. The queued
// requests' keys alias buf, so it is compacted only after a settle.
type input struct {
	buf    []byte
	parsed int // buf[:parsed] holds commands already run
	p      parser
	args   [][]byte // reused for each command's arguments
}

const (
	// readSize is the room a connection reads into: a pipeline of a few
	// dozen decisions arrives in one read.
	readSize = 4 << 10
	// keepInput is the largest input buffer a connection keeps once it is
	// empty again; a larger one, grown for a large pipeline, is dropped.
	keepInput = 64 << 10
)

// spare is room at the end of the input to read into: never more than
// the request limit leaves, so that one read cannot overshoot it.
func (c *client) spare() []byte {
	in := &c.in
	if cap(in.buf)-len(in.buf) < readSize/2 {
		// The old array stays as it is: queued keys may alias it.
		grown := make([]byte, len(in.buf), max(2*cap(in.buf), readSize))
		copy(grown, in.buf)
		in.buf = grown
	}
	room := in.buf[len(in.buf):cap(in.buf)]
	if left := c.s.cfg.MaxRequestBytes - (len(in.buf) - in.parsed); len(room) > left {
		room = room[:max(left, 1)]
	}
	return room
}

// take runs the commands that the n bytes just read into spare complete.
// Decisions stay queued for settle. A frame that breaks the protocol or a
// limit is answered with a protocol error, in order behind the replies
// owed before it, and the connection is marked to close (c.quit).
func (c *client) take(n int) {
	in := &c.in
	start := len(in.buf)
	in.buf = in.buf[:start+n]
	fine, msg := in.p.scan(in.buf, start)
	if msg != "" {
		in.buf = in.buf[:start+fine]
	}
	k := 0
	for _, cmd := range in.p.cmds {
		if c.quit {
			break
		}
		args := in.args[:0]
		for _, a := range in.p.spans[k : k+cmd.args] {
			args = append(args, in.buf[a.at:a.at+a.n:a.at+a.n])
		}
		k += cmd.args
		in.args, in.parsed = args, cmd.end
		if len(args) > 0 { // an empty inline line is no command, as in Redis
			c.exec(args)
		}
	}
	in.p.consumed()
	if msg == "" && len(in.buf)-in.parsed >= c.s.cfg.MaxRequestBytes {
		msg = errRequestTooBig
	}
	if msg != "" && !c.quit {
		c.fail("ERR " + msg)
		c.quit = true
	}
}

// compact drops the input that settled commands came from and keeps an
// incomplete command's start. Call it only after settle.
func (c *client) compact() {
	in := &c.in
	if in.parsed == 0 && len(in.buf) > 0 {
		return // nothing to drop: a large command arriving read by read is not copied again
	}
	n := copy(in.buf, in.buf[in.parsed:])
	in.p.shift(in.parsed)
	in.buf, in.parsed = in.buf[:n], 0
	if n == 0 && cap(in.buf) > keepInput {
		in.buf = nil
	}
}
