package redispipe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/internal/resp"
)

// Pipe is one connection to a standalone Redis (or Sentinel's current
// master, or one Cluster master: Router) on which commands go without
// their senders waiting: a sender writes its command and goes on, and
// the replies are read, in order, and each handed to its sender's Done.
// It is safe for concurrent use.
//
// It dials when first needed, with the client's own dialer (TLS and
// Sentinel's master discovery included), and authenticates and selects
// the database as the client's options say. A reply that does not come
// by its deadline, a broken connection or a reply it cannot read fail
// every reply awaited, and the connection is closed (or drained, see
// abandon): the next send dials again.
type Pipe struct {
	opt   *redis.Options
	stamp Stamp
	stray func(reply any)

	// wmu orders the writes on the connection as awaiting is ordered;
	// taken before mu. mu is never locked across a write, so a reader
	// can take its replies while a writer waits for room in the socket.
	wmu sync.Mutex
	// out is the command being written, copied from its sender's buffer
	// under mu: once its reply is awaited, a failure elsewhere can hand
	// the sender its error, and its buffer back to its pool, while the
	// write is still going. Guarded by wmu.
	out []byte

	mu   sync.Mutex
	conn net.Conn // nil: not connected; guarded by mu
	rd   *replies // conn's replies; guarded by mu
	// polled is rd's descriptor on the event loop that reads rd, nil
	// while a goroutine reads it instead. Guarded by mu.
	polled   *evloop.Watcher
	dialing  bool      // a goroutine is dialing; guarded by mu
	queued   []byte    // commands sent while dialing; guarded by mu
	awaiting []awaited // the replies awaited, oldest first; guarded by mu
	closed   bool      // guarded by mu
	// late fires at the oldest awaited reply's deadline, or before it
	// (it is not moved when a reply comes), and fails the connection if
	// that reply is late. Guarded by mu.
	late *time.Timer
	// loop, if set, is the event loop that reads the connections dialed
	// from now on. Guarded by mu.
	loop *evloop.Loop

	// clock is the offset to this Redis's clock, from the stamped
	// commands' replies (clock.go).
	clock Clock
	// drains holds the connections being drained; guarded by mu.
	drains map[*replies]struct{}
	// twin is the pipe's second connection (Twin), nil until asked for;
	// guarded by mu.
	twin *Pipe
}

// awaited is a reply a sender waits for.
type awaited struct {
	deadline time.Time
	done     Done
	// stamped is a stamped command's (SendStamped), whose reply carries
	// Redis's time; sent is when it was written, for the clock.
	stamped bool
	sent    time.Time
}

// maxDraining bounds the given-up connections a pipe drains at once
// (abandon); past it, one is closed, as any failed connection is.
const maxDraining = 8

// drainFor bounds how long a given-up connection is drained: a Redis
// paused longer has its late replies go unread, and uncounted.
const drainFor = 10 * time.Second

// ErrClosed fails every command sent after Close, and those awaited
// when it was called.
var ErrClosed = errors.New("redispipe: the pipe is closed")

// New returns a pipe that dials as a client of cfg.Options would, or nil
// when a pipe cannot stand in for that client: one with no dialer, or
// whose streaming credentials provider re-authenticates connections
// go-redis owns. A Cluster client's masters get their pipes from a
// Router.
func New(cfg Config) *Pipe {
	opt := cfg.Options
	if opt == nil || opt.StreamingCredentialsProvider != nil || opt.Dialer == nil {
		return nil
	}
	return &Pipe{opt: opt, stamp: cfg.Stamp, stray: cfg.Stray}
}

// Twin returns the pipe's twin: a second pipe to the same Redis,
// configured alike, dialed when first used. It is for commands that hold
// their connection up (WAIT blocks its client until replicas acknowledge
// its writes, and Redis runs nothing else sent on that connection
// meanwhile), so that they hold up none of the pipe's own. Every call
// returns the same twin; UseLoop and Close reach it as they reach the
// pipe.
func (p *Pipe) Twin() *Pipe {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.twin == nil {
		p.twin = &Pipe{opt: p.opt, stamp: p.stamp, stray: p.stray, loop: p.loop, closed: p.closed}
	}
	return p.twin
}

// Timeout is how long a reply may take when its sender set no deadline:
// the client's read timeout (go-redis's default is 3s).
func (p *Pipe) Timeout() time.Duration {
	if p.opt.ReadTimeout > 0 {
		return p.opt.ReadTimeout
	}
	return 3 * time.Second
}

// Deadline is local on this Redis's clock, as a stamped command carries
// it (Clock.Deadline): for a command that reaches the same Redis some
// other way (go-redis).
func (p *Pipe) Deadline(local time.Time) int64 { return p.clock.Deadline(local) }

// Send writes cmd, a whole RESP command, and has done called with its
// reply, or with an error if none comes by deadline (see Done). done
// runs exactly once: on another goroutine (the pipe's reader, or the
// event loop that reads it), or before Send returns when the pipe is
// closed or the write fails (which fails every reply awaited). Send
// copies cmd: the caller may reuse it once Send returns. A zero deadline
// is the sender's to avoid: it fails the reply at once.
func (p *Pipe) Send(cmd []byte, deadline time.Time, done Done) {
	p.send(cmd, deadline, done, false)
}

// SendStamped is Send for a command that carries its deadline (Stamp):
// the pipe writes the deadline in on this Redis's clock, and reads
// Redis's time from the reply, for the clock. The deadline written is
// the sooner of the command's and those of the replies awaited before it:
// the connection fails when the oldest awaited reply is late, and answers
// every command on it then.
func (p *Pipe) SendStamped(cmd []byte, deadline time.Time, done Done) {
	p.send(cmd, deadline, done, true)
}

func (p *Pipe) send(cmd []byte, deadline time.Time, done Done, stamped bool) {
	p.wmu.Lock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wmu.Unlock()
		done(nil, ErrClosed)
		return
	}
	horizon := deadline
	if stamped {
		for _, a := range p.awaiting {
			if a.deadline.Before(horizon) {
				horizon = a.deadline
			}
		}
	}
	conn := p.conn
	if conn == nil {
		p.awaiting = append(p.awaiting, awaited{deadline: deadline, done: done, stamped: stamped})
		p.queued = append(p.queued, cmd...)
		if stamped {
			p.stamp.Put(p.queued, p.clock.Deadline(horizon))
		}
		if !p.dialing {
			p.dialing = true
			go p.dial(deadline)
		}
		p.mu.Unlock()
		p.wmu.Unlock()
		return
	}
	a := awaited{deadline: deadline, done: done, stamped: stamped}
	p.out = append(p.out[:0], cmd...)
	if stamped {
		p.stamp.Put(p.out, p.clock.Deadline(horizon))
		a.sent = time.Now()
	}
	p.awaiting = append(p.awaiting, a)
	if len(p.awaiting) == 1 {
		p.awaitLocked(deadline)
	}
	p.mu.Unlock()
	err := p.write(conn, p.out, deadline)
	p.wmu.Unlock()
	if err != nil {
		p.fail(conn, err)
	}
}

// write writes cmd on conn, waiting for room until deadline, with p.wmu
// locked. Its errors, as the reader's, name the upstream Redis: they
// reach the user as the reason a batch failed.
func (p *Pipe) write(conn net.Conn, cmd []byte, deadline time.Time) error {
	_ = conn.SetWriteDeadline(deadline)
	if _, err := conn.Write(cmd); err != nil {
		return fmt.Errorf("upstream: write to %s: %w", conn.RemoteAddr(), err)
	}
	return nil
}

// awaitLocked has the late timer fire at deadline, the oldest awaited
// reply's. p.mu is locked.
func (p *Pipe) awaitLocked(deadline time.Time) {
	if p.late == nil {
		p.late = time.AfterFunc(time.Until(deadline), p.checkLate)
		return
	}
	p.late.Reset(time.Until(deadline))
}

// checkLate fails the connection if the oldest reply awaited on it is past
// its deadline, or waits for that deadline.
func (p *Pipe) checkLate() {
	p.mu.Lock()
	conn := p.conn
	if conn == nil || len(p.awaiting) == 0 {
		p.mu.Unlock()
		return
	}
	if wait := time.Until(p.awaiting[0].deadline); wait > 0 {
		p.late.Reset(wait)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.abandon(conn, fmt.Errorf("upstream: read from %s: %w", conn.RemoteAddr(), os.ErrDeadlineExceeded))
}

// abandon gives conn up, as fail does, on a reply that is late: every
// reply awaited fails with err, and the next send dials again. But Redis
// (paused, busy) still has the commands written on conn, and runs them
// when it can, so conn is not closed at once: a goroutine drains it, for
// drainFor, and each reply that comes goes to p.stray (Config.Stray) and
// to the clock; then it is closed.
func (p *Pipe) abandon(conn net.Conn, err error) {
	p.mu.Lock()
	if p.conn != conn || len(p.drains) >= maxDraining || p.stray == nil {
		p.mu.Unlock()
		p.fail(conn, err)
		return
	}
	polled, rd := p.polled, p.rd
	if p.drains == nil {
		p.drains = map[*replies]struct{}{}
	}
	p.drains[rd] = struct{}{}
	p.conn, p.rd, p.polled = nil, nil, nil
	awaiting := p.awaiting
	p.awaiting = nil
	rd.drained, rd.draining = awaiting, true
	p.mu.Unlock()
	_ = conn.SetReadDeadline(time.Now().Add(drainFor))
	if polled != nil {
		// The loop no longer reads it; a goroutine does, as when the loop
		// ends (polledConn.Ended).
		polled.Remove()
		go p.read(rd)
	}
	for _, o := range awaiting {
		o.done(nil, err)
	}
}

// endDrain closes a connection given up (abandon) once it is drained,
// or its time to drain is over.
func (p *Pipe) endDrain(r *replies) {
	p.mu.Lock()
	r.draining, r.drained = false, nil
	delete(p.drains, r)
	p.mu.Unlock()
	r.conn.Close()
}

// observe feeds the clock from the reply to a stamped command.
func (p *Pipe) observe(a awaited, reply any) {
	if !a.stamped || a.sent.IsZero() {
		return
	}
	if t, ok := p.stamp.Time(reply); ok {
		p.clock.Observe(a.sent, time.Now(), t)
	}
}

// dial connects, writes what was sent meanwhile and starts the reader; on
// failure it fails every reply awaited. A dial is bounded by the first
// sender's deadline: a sender waits no longer for a connection than for a
// reply.
func (p *Pipe) dial(deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	conn, err := p.opt.Dialer(ctx, p.opt.Network, p.opt.Addr)
	if err == nil {
		if err = p.hello(ctx, conn); err != nil {
			conn.Close()
		}
	}
	cancel()
	if err != nil {
		// The dialer's error names the address it dialed; a Sentinel
		// client's own Addr names none.
		err = fmt.Errorf("upstream: connect: %w", err)
	}
	p.wmu.Lock()
	p.mu.Lock()
	p.dialing = false
	if err == nil && p.closed {
		conn.Close()
		err = ErrClosed
	}
	if err != nil {
		awaiting := p.awaiting
		p.awaiting, p.queued = nil, p.queued[:0]
		p.mu.Unlock()
		p.wmu.Unlock()
		for _, o := range awaiting {
			o.done(nil, err)
		}
		return
	}
	p.conn, p.rd = conn, newReplies(conn)
	p.polled = nil
	if fd, ok := p.rd.fd(); ok && p.loop != nil {
		// A loop that has ended refuses: a goroutine reads instead.
		p.polled, _ = p.loop.Watch(fd, evloop.Readable, &polledConn{p: p, rd: p.rd})
	}
	if p.polled == nil {
		go p.read(p.rd)
	}
	cmds := p.queued
	p.queued = nil
	write, now := time.Time{}, time.Now()
	for k := range p.awaiting {
		if p.awaiting[k].stamped {
			p.awaiting[k].sent = now // a round trip for the clock from here
		}
	}
	if len(p.awaiting) > 0 {
		p.awaitLocked(p.awaiting[0].deadline)
		write = p.awaiting[len(p.awaiting)-1].deadline
	}
	p.mu.Unlock()
	err = p.write(conn, cmds, write)
	p.wmu.Unlock()
	if err != nil {
		p.fail(conn, err)
	}
}

// hello authenticates and selects the database, as go-redis would on a
// connection of its own.
func (p *Pipe) hello(ctx context.Context, conn net.Conn) error {
	user, pass := p.opt.Username, p.opt.Password
	switch {
	case p.opt.CredentialsProviderContext != nil:
		var err error
		if user, pass, err = p.opt.CredentialsProviderContext(ctx); err != nil {
			return err
		}
	case p.opt.CredentialsProvider != nil:
		user, pass = p.opt.CredentialsProvider()
	}
	var cmds [][]string
	switch {
	case pass != "" && user != "":
		cmds = append(cmds, []string{"AUTH", user, pass})
	case pass != "":
		cmds = append(cmds, []string{"AUTH", pass})
	}
	if p.opt.DB != 0 {
		cmds = append(cmds, []string{"SELECT", strconv.Itoa(p.opt.DB)})
	}
	if len(cmds) == 0 {
		return nil
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
		defer conn.SetDeadline(time.Time{})
	}
	var buf []byte
	for _, c := range cmds {
		buf = resp.AppendCommand(buf, c[0], c[1:]...)
	}
	if _, err := conn.Write(buf); err != nil {
		return err
	}
	r := newReplies(conn)
	for _, c := range cmds {
		reply, err := r.next()
		if err != nil {
			return err
		}
		if rerr, ok := reply.(resp.ReplyError); ok {
			return fmt.Errorf("%s: %w", c[0], rerr)
		}
	}
	if r.off < len(r.buf) {
		return errors.New("more replies than commands")
	}
	return nil
}

// read reads replies until the connection fails, handing each to the
// sender that awaits it.
func (p *Pipe) read(r *replies) {
	for {
		// A readiness the loop was dispatching as the connection was
		// given up may still be reading r (abandon, polledConn.Ready).
		r.use.Lock()
		reply, err := r.next()
		r.use.Unlock()
		if err != nil {
			p.endDrain(r)
			p.fail(r.conn, fmt.Errorf("upstream: read from %s: %w", r.conn.RemoteAddr(), err))
			return
		}
		if !p.deliver(r, reply) {
			return
		}
	}
}

// deliver hands a reply read on r to the sender that awaits it, or, on a
// connection given up and drained, to p.stray. A reply nothing awaits
// fails the connection; deliver then reports false, as it does once a
// drained connection has given every reply awaited on it.
func (p *Pipe) deliver(r *replies, reply any) bool {
	conn := r.conn
	p.mu.Lock()
	if p.rd != r && r.draining && len(r.drained) > 0 {
		o := r.drained[0]
		r.drained = r.drained[1:]
		more := len(r.drained) > 0
		p.mu.Unlock()
		p.observe(o, reply)
		p.stray(reply)
		if !more {
			p.endDrain(r)
		}
		return more
	}
	if p.rd != r || len(p.awaiting) == 0 {
		p.mu.Unlock()
		p.fail(conn, fmt.Errorf("upstream: %s sent a reply nothing asked for", conn.RemoteAddr()))
		return false
	}
	o := p.awaiting[0]
	p.awaiting = p.awaiting[:copy(p.awaiting, p.awaiting[1:])]
	p.mu.Unlock()
	p.observe(o, reply)
	o.done(reply, nil)
	return true
}

// UseLoop has an event loop read the replies of the connections dialed
// from now on. A connection whose descriptor cannot be watched (TLS)
// still has a reader goroutine, and so does the one open now, if any.
func (p *Pipe) UseLoop(l *evloop.Loop) {
	p.mu.Lock()
	p.loop = l
	twin := p.twin
	p.mu.Unlock()
	if twin != nil {
		twin.UseLoop(l)
	}
}

// polledConn is a connection of the pipe's as the event loop that reads
// it sees it: the handler of its descriptor.
type polledConn struct {
	p  *Pipe
	rd *replies
}

// current tells whether the pipe still reads this connection on the loop:
// a readiness may come for one since closed.
func (pc *polledConn) current() bool {
	pc.p.mu.Lock()
	defer pc.p.mu.Unlock()
	return pc.p.rd == pc.rd && pc.p.polled != nil
}

// Ready reads the replies that have come and hands each to its sender,
// on the event loop's goroutine.
func (pc *polledConn) Ready(evloop.Events) {
	p, r := pc.p, pc.rd
	if !pc.current() || !r.use.TryLock() {
		return // a connection given up, drained by a goroutine now
	}
	defer r.use.Unlock()
	if err := r.fill(); err != nil {
		p.fail(r.conn, fmt.Errorf("upstream: read from %s: %w", r.conn.RemoteAddr(), err))
		return
	}
	for {
		reply, ok, err := r.take()
		if err != nil {
			p.fail(r.conn, fmt.Errorf("upstream: read from %s: %w", r.conn.RemoteAddr(), err))
			return
		}
		if !ok || !p.deliver(r, reply) {
			return
		}
	}
}

// Owing tells the event loop that replies are awaited on the
// connection, which the loop may wait for first (evloop.Owing).
func (pc *polledConn) Owing() bool {
	p := pc.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rd == pc.rd && len(p.awaiting) > 0
}

// Ended hands the connection to a reader goroutine: the event loop that
// read it has ended.
func (pc *polledConn) Ended() {
	p := pc.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loop = nil
	if p.rd == pc.rd && p.polled != nil {
		p.polled = nil
		go p.read(p.rd)
	}
}

// fail closes conn, if it is still the pipe's, and fails every reply
// awaited on it with err.
func (p *Pipe) fail(conn net.Conn, err error) {
	p.mu.Lock()
	if p.conn != conn {
		p.mu.Unlock()
		return
	}
	polled := p.polled
	p.conn, p.rd, p.polled = nil, nil, nil
	awaiting := p.awaiting
	p.awaiting = nil
	p.mu.Unlock()
	if polled != nil {
		polled.Remove() // before the descriptor's number can be reused
	}
	conn.Close()
	for _, o := range awaiting {
		o.done(nil, err)
	}
}

// Drop closes the connection, so that the next send dials again: Redis
// said it cannot serve there (a Sentinel master that became a replica).
// Replies still awaited on it fail with cause.
func (p *Pipe) Drop(cause error) {
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	if conn != nil {
		p.fail(conn, cause)
	}
}

// Close closes the connection and fails every reply awaited; later
// sends fail with ErrClosed.
func (p *Pipe) Close() {
	p.mu.Lock()
	p.closed = true
	conn := p.conn
	for rd := range p.drains {
		rd.conn.Close() // its reader ends, and endDrain forgets it
	}
	twin := p.twin
	p.mu.Unlock()
	if conn != nil {
		p.fail(conn, ErrClosed)
	}
	if twin != nil {
		twin.Close()
	}
}
