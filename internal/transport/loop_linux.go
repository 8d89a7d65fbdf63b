//go:build linux

package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/service"
)

// Loop is a server's share of an event loop (evloop): the connections
// it serves there, read when they have sent something; at the end of each
// of the loop's turns, the decisions of all of them are handed to the
// service as one batch, and every reply is written.
//
// Go's own network poller gives each connection a goroutine, which costs a
// wake-up, a read that finds nothing and, on a busy machine, thread
// switches for every request; and decisions of different connections meet
// only in the batcher, through more wake-ups. Here a request costs one
// read and one write, and a round's decisions are one batch already.
//
// The loop never waits on Redis. A round's batch is handed over and the
// loop goes on: reading, answering what needs no round trip (PING,
// errors, deny-cache hits, the in-memory store), and queueing each
// connection's next decisions behind its batch in flight. When a batch
// lands, the goroutine that completed it puts its segments on the landed
// queue and wakes the loop, which writes the replies in order at the end
// of its turn. The store may read its replies on the same event loop (app
// wires it so; the server does not know): its batches then land on the
// loop's own goroutine, and the wake-up costs nothing. A command that
// waits on Redis without being a decision (RL.RESET) runs on a goroutine
// of its own and lands the same way.
type Loop struct {
	svc  *service.Service
	log  *slog.Logger
	el   *evloop.Loop
	load atomic.Int64

	mu      sync.Mutex
	landed  []landing // guarded by mu: segments whose results are in
	stopped bool      // guarded by mu: adopts no more connections

	drainAt atomic.Int64 // UnixNano at which to close every connection; 0: none
	cuts    atomic.Int64 // rounds handed over in parts, for Cuts
	owed    atomic.Int64 // parts handed over and not landed yet

	// The loop goroutine's own.
	conns   map[*loopConn]struct{}
	touched []*loopConn      // connections with something to do this turn
	batches []*service.Batch // a round's batches, reused
	taking  []landing        // the landed queue, swapped out
	parting []landing        // a round's segments while decide cuts it
	sizes   []int            // a round's batch sizes, for cutRound
	ends    []int            // where decide cuts a round
	rounds  sync.Pool        // *round
}

// loopConn is a connection a loop serves: the handler of its descriptor.
type loopConn struct {
	l       *Loop
	fd      int
	w       *evloop.Watcher // nil until the loop welcomes it
	watched evloop.Events   // what w waits for
	c       Conn
	blocked bool // replies wait for room in the socket
	eof     bool // the client has sent all it will: close once answered
	touched bool // in the loop's touched list
	// adopted is set, under l.mu, once fd is the connection's: Wake
	// posts the loop a look at it only then.
	adopted bool
	killed  atomic.Bool // Kill was called: the loop closes it
}

// landing is a segment landed, and the connection it lands on.
type landing struct {
	lc *loopConn
	g  Segment
}

// round is one hand-over to the service: the segments that land together.
type round struct {
	l      *Loop
	segs   []landing
	landed func()
}

// Start takes a share of each event loop for a server whose decisions svc
// makes: their turns from now on. A panic while a round is handed over
// is logged to log.
func Start(svc *service.Service, log *slog.Logger, els []*evloop.Loop) ([]*Loop, error) {
	var loops []*Loop
	for i, el := range els {
		l := &Loop{svc: svc, log: log, el: el, conns: make(map[*loopConn]struct{})}
		l.rounds.New = func() any {
			r := &round{l: l}
			r.landed = r.land
			return r
		}
		if !el.OnTurn(l.turn) || !el.OwedIn(l) {
			for _, l := range loops {
				l.Stop()
			}
			return nil, fmt.Errorf("transport: event loop %d: %w", i, evloop.ErrClosed)
		}
		loops = append(loops, l)
	}
	return loops, nil
}

// Pick is the event loop for a new connection nc: the one serving the
// fewest, counted in now, or nil where loops cannot serve it (none, or
// nc has no descriptor). A connection picked for is adopted (Adopt) or
// counted out (Unpick).
func Pick(loops []*Loop, nc net.Conn) *Loop {
	if len(loops) == 0 {
		return nil
	}
	if _, ok := nc.(syscall.Conn); !ok {
		return nil
	}
	best := loops[0]
	for _, l := range loops[1:] {
		if l.load.Load() < best.load.Load() {
			best = l
		}
	}
	best.load.Add(1)
	return best
}

// Unpick counts out a connection picked for and not adopted.
func (l *Loop) Unpick() { l.load.Add(-1) }

// Cuts counts the rounds handed over in parts.
func (l *Loop) Cuts() int64 { return l.cuts.Load() }

// NewConn is the transport of a connection this loop will serve, once
// Adopt gives it its descriptor.
func (l *Loop) NewConn(c Conn) Transport { return &loopConn{l: l, fd: -1, c: c} }

// A connection on a loop never waits on Redis: what would wait runs on a
// goroutine of its own and lands through the loop; the loop drains and
// closes all it serves at once (DrainUntil, Stop).
func (lc *loopConn) Blocking() bool  { return false }
func (lc *loopConn) Land(g Segment)  { lc.l.land(landing{lc, g}) }
func (lc *loopConn) Drain(time.Time) {}
func (lc *loopConn) CloseNow()       {}

// Adopt takes nc over for t, NewConn's: the loop keeps a duplicate of its
// descriptor, and nc is closed, which takes the original out of Go's
// poller. adopted, if not nil, is given the descriptor before the loop
// may serve the connection, so that what the connection says of itself
// (CLIENT INFO's fd=) is right from its first command.
func (l *Loop) Adopt(nc net.Conn, t Transport, adopted func(fd int)) error {
	lc, ok := t.(*loopConn)
	if !ok || lc.l != l {
		return errors.New("transport: not this loop's connection")
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return errors.New("transport: no file descriptor")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return errors.New("transport: event loop stopped")
	}
	fd, dupErr := -1, error(nil)
	if err := raw.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return err
	}
	if dupErr != nil {
		return dupErr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return err
	}
	lc.fd, lc.adopted = fd, true
	if adopted != nil {
		adopted(fd)
	}
	if !l.el.Post(func() { l.welcome(lc) }) {
		unix.Close(fd)
		lc.fd, lc.adopted = -1, false
		return evloop.ErrClosed
	}
	_ = nc.Close()
	return nil
}

// land puts segments whose results are in on the landed queue, from
// whichever goroutine completed them, and wakes the loop: at no cost when
// the loop's own goroutine completed them (the store's replies read on
// it, the in-memory store deciding inside handOver).
func (l *Loop) land(segs ...landing) {
	l.mu.Lock()
	l.landed = append(l.landed, segs...)
	l.mu.Unlock()
	l.el.Wake()
}

// Owing tells the event loop's hold that a part handed over has not
// landed: where another loop reads the store's replies (--io-loops 2),
// this loop then holds for the wake-up that lands it (evloop.OwedIn), as
// the loop reading them holds for the reply itself.
func (l *Loop) Owing() bool { return l.owed.Load() > 0 }

// land is a round's completion: its segments land together.
func (r *round) land() {
	l := r.l
	l.owed.Add(-1)
	l.land(r.segs...)
	clear(r.segs)
	r.segs = r.segs[:0]
	l.rounds.Put(r)
}

// DrainUntil has the loop close every connection at t, or once its
// answers are out if some are still in flight then; until t they are
// served as before.
func (l *Loop) DrainUntil(t time.Time) {
	l.drainAt.Store(t.UnixNano())
	l.el.WakeAt(t)
}

// Stop has the loop close every connection it serves, and adopt no more.
// The event loop itself goes on (app closes it); once it has ended, each
// connection was closed by its Ended.
func (l *Loop) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.el.Post(func() {
		for lc := range l.conns {
			l.close(lc, nil)
		}
	})
}

// drainLeft is how long connections are still served while draining.
func (l *Loop) drainLeft() (time.Duration, bool) {
	at := l.drainAt.Load()
	if at == 0 {
		return 0, false
	}
	return time.Until(time.Unix(0, at)), true
}

// welcome starts watching a connection adopted.
func (l *Loop) welcome(lc *loopConn) {
	w, err := l.el.Watch(lc.fd, evloop.Readable, lc)
	l.conns[lc] = struct{}{}
	if err != nil {
		l.close(lc, err)
		return
	}
	lc.w, lc.watched = w, evloop.Readable
	if wait, draining := l.drainLeft(); (draining && wait <= 0) || lc.killed.Load() {
		l.close(lc, nil)
	}
}

// Ready reads what the client sent, or writes what waited for room.
func (lc *loopConn) Ready(ev evloop.Events) {
	l := lc.l
	if lc.fd < 0 {
		return
	}
	if ev&evloop.Writable != 0 && lc.blocked {
		lc.blocked = false
		l.touch(lc)
	}
	if ev&evloop.Readable != 0 && l.reading(lc) {
		l.read(lc)
	}
}

// Ended closes the connection: its event loop has ended.
func (lc *loopConn) Ended() { lc.l.close(lc, nil) }

// touch puts a connection on this turn's list.
func (l *Loop) touch(lc *loopConn) {
	if !lc.touched {
		lc.touched = true
		l.touched = append(l.touched, lc)
	}
}

// reading tells whether the loop reads a connection now: not while its
// replies wait for room, nor while its state takes no more input.
func (l *Loop) reading(lc *loopConn) bool {
	return lc.fd >= 0 && !lc.blocked && !lc.eof && !lc.c.Done() && lc.c.Reading()
}

// read reads what a connection has sent and runs the commands it
// completes; their decisions wait for the turn's hand-over.
func (l *Loop) read(lc *loopConn) {
	n, err := evloop.Read(lc.fd, lc.c.Room())
	if n > 0 {
		l.touch(lc)
		lc.c.Filled(n)
		return
	}
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if err == nil || lc.c.Idle() {
		// The end of the stream: what came before it is answered first.
		lc.eof = true
		l.touch(lc)
		if err == nil {
			return
		}
	}
	l.close(lc, err)
}

// turn finishes a turn of the loop: it takes what landed, hands the
// touched connections' decisions to the service as one batch, takes what
// that answered at once, and writes every reply.
func (l *Loop) turn() {
	if wait, draining := l.drainLeft(); draining && wait <= 0 {
		l.closeIdle()
	}
	l.takeLanded()
	for l.handOver() {
		l.takeLanded()
	}
	_, draining := l.drainLeft()
	for i, lc := range l.touched {
		l.touched[i] = nil
		lc.touched = false
		if lc.fd < 0 {
			continue
		}
		c := lc.c
		l.write(lc)
		c.Flushed()
		switch {
		case lc.fd < 0:
		case c.Idle() && len(c.Out()) == 0 && (c.Done() || lc.eof || draining && l.drainAt.Load() <= time.Now().UnixNano()):
			l.close(lc, nil)
		default:
			l.watch(lc)
		}
	}
	l.touched = l.touched[:0]
}

// takeLanded delivers the segments that landed, in each connection's
// order, and runs the commands that waited for them.
func (l *Loop) takeLanded() {
	l.mu.Lock()
	l.taking, l.landed = l.landed, l.taking[:0]
	l.mu.Unlock()
	for i, t := range l.taking {
		l.taking[i] = landing{}
		if t.lc.fd >= 0 {
			l.touch(t.lc)
		}
		t.lc.c.Landed(t.g, t.lc.fd < 0) // a connection gone drops it
	}
}

// handOver lifts each touched connection's queued decisions and hands them
// to the service as one batch. It reports whether it handed anything.
func (l *Loop) handOver() bool {
	defer l.recoverRound()
	r := l.rounds.Get().(*round)
	bs := l.batches[:0]
	for _, lc := range l.touched {
		if lc.fd < 0 {
			continue
		}
		if g := lc.c.Lift(); g != nil {
			r.segs = append(r.segs, landing{lc, g})
			bs = append(bs, g.Batch())
		}
	}
	l.batches = bs
	if len(bs) == 0 {
		l.rounds.Put(r)
		return false
	}
	l.decide(r, bs)
	clear(l.batches)
	return true
}

// decide hands a round's batches, whose segments r holds, to the service.
// A large round goes in as many parts as the store sends round trips at
// once (the service's InFlight), of about equal size,
// whole connections each, which the store sends as round trips in flight
// together: Redis then decides one part while the loop writes the
// replies of another and reads what their clients send next, where a
// round handed over whole keeps the loop, Redis and the clients in
// lockstep (docs/speed.md has the measurements).
func (l *Loop) decide(r *round, bs []*service.Batch) {
	l.sizes = l.sizes[:0]
	for _, b := range bs {
		l.sizes = append(l.sizes, b.Len())
	}
	l.ends = cutRound(l.sizes, l.svc.InFlight(), l.ends[:0])
	// A round handed over whole is worth the event loop's hold: its reply
	// ends it (evloop's holdFor says why). Parts in flight are not: Redis
	// decides one while the loop answers another.
	l.el.Hold(len(l.ends) == 1)
	l.owed.Add(int64(len(l.ends)))
	if len(l.ends) == 1 {
		l.svc.Decide(bs, r.landed)
		return
	}
	l.cuts.Add(1)
	l.parting = append(l.parting[:0], r.segs...)
	r.segs = r.segs[:0]
	from := 0
	for _, end := range l.ends {
		part := r
		if from > 0 {
			part = l.rounds.Get().(*round)
		}
		part.segs = append(part.segs, l.parting[from:end]...)
		// part may land, and go back to the pool, before Decide returns.
		l.svc.Decide(bs[from:end], part.landed)
		from = end
	}
	clear(l.parting)
}

// splitFrom is the fewest decisions a round must hold to be cut into
// parts: below it a batch's own cost at Redis (the EVALSHA, its
// arguments) is no longer small beside its decisions'.
const splitFrom = 128

// cutRound cuts a round of batches of the given sizes into at most parts
// parts of about equal size, whole batches each, and appends where each
// part ends to ends: one end, len(sizes), when the round stays whole.
func cutRound(sizes []int, parts int, ends []int) []int {
	total := 0
	for _, n := range sizes {
		total += n
	}
	if parts < 2 || len(sizes) < 2 || total < splitFrom {
		return append(ends, len(sizes))
	}
	each := (total + parts - 1) / parts
	n := 0
	for i, size := range sizes {
		if n += size; n >= each || i == len(sizes)-1 {
			ends = append(ends, i+1)
			n = 0
		}
	}
	return ends
}

// recoverRound turns a panic while handing a round over into an internal
// error for each of its connections, which are then closed.
func (l *Loop) recoverRound() {
	if r := recover(); r != nil {
		l.log.Error("panic handing a round over", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		for _, lc := range l.touched {
			lc.c.Failed()
		}
	}
}

// write sends a connection's replies. What the socket cannot take now
// waits for EPOLLOUT.
func (l *Loop) write(lc *loopConn) {
	c := lc.c
	for out := c.Out(); len(out) > 0 && lc.fd >= 0; out = c.Out() {
		n, err := evloop.Write(lc.fd, out)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			lc.blocked = true
			return
		}
		if err != nil {
			l.close(lc, err)
			return
		}
		c.Sent(n)
	}
}

// watch tells the event loop what to wait for on a connection: room to
// write, something to read, or nothing (so that a connection the loop
// does not read cannot wake it again and again).
func (l *Loop) watch(lc *loopConn) {
	var want evloop.Events
	switch {
	case lc.blocked:
		want = evloop.Writable
	case l.reading(lc):
		want = evloop.Readable
	}
	if want == lc.watched || lc.w == nil {
		return
	}
	if err := lc.w.Set(want); err != nil {
		l.close(lc, err)
		return
	}
	lc.watched = want
}

// close closes a connection and counts it out. A segment of it still in
// flight lands later and is dropped.
func (l *Loop) close(lc *loopConn, err error) {
	if lc.fd < 0 {
		return
	}
	if lc.w != nil {
		lc.w.Remove()
	}
	unix.Close(lc.fd)
	delete(l.conns, lc)
	lc.fd = -1
	l.load.Add(-1)
	lc.c.Closed(err)
}

// closeIdle closes, once draining is over, every connection that owes
// nothing; the others close as soon as their answers are out (turn).
func (l *Loop) closeIdle() {
	for lc := range l.conns {
		if lc.c.Idle() {
			l.close(lc, nil)
		}
	}
}

// What other goroutines ask of a connection an event loop serves. The
// loop alone reads, writes and closes its connections, so CLIENT KILL
// from another connection, the input budget's eviction or a MONITOR line
// fed by one sets the connection's state and wakes it: posts the loop a
// look at it.

// Wake has the loop look at the connection. One not adopted yet is not
// looked at: the loop checks killed when it welcomes it, and it monitors
// nothing and holds no input yet.
func (lc *loopConn) Wake() {
	l := lc.l
	l.mu.Lock()
	adopted := lc.adopted
	l.mu.Unlock()
	if adopted {
		l.el.Post(func() { l.answer(lc) })
	}
}

// Kill has the loop close the connection; one not adopted yet is closed
// as the loop welcomes it.
func (lc *loopConn) Kill() {
	lc.killed.Store(true)
	lc.Wake()
}

// answer does what the connection's state asks when woken: closes it
// evicted, once the input budget's error is written, or killed, or
// writes a monitor's lines this turn.
func (l *Loop) answer(lc *loopConn) {
	if lc.fd < 0 {
		return
	}
	if lc.killed.Load() {
		l.close(lc, nil)
		return
	}
	switch lc.c.Woken() {
	case Evict:
		l.write(lc)
		l.close(lc, nil)
	case Kill:
		l.close(lc, nil)
	default:
		l.touch(lc)
	}
}
