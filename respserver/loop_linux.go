//go:build linux

package respserver

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidwall/redcon"
	"golang.org/x/sys/unix"

	"github.com/sluice-rl/sluice/service"
)

// loop is an event loop: one goroutine that waits on epoll for every
// connection it serves, reads each that has sent something, hands the
// decisions of all of them to the service as one batch, and writes every
// reply.
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
// lands, the goroutine that completed it puts its segments on the loop's
// landed queue and wakes the loop, which writes the replies in order. The
// first loop reads the upstream store's replies itself (Config.Upstream),
// so that its batches land on it without a wake-up. A
// command that waits on Redis without being a decision (RL.RESET) runs on
// a goroutine of its own and lands the same way.
type loop struct {
	s    *Server
	ep   int // the epoll instance
	wake int // an eventfd that wakes the loop: new connections, landings, drain, stop
	load atomic.Int64

	mu       sync.Mutex
	incoming []*loopConn // guarded by mu: adopted, not yet seen by the loop
	landed   []*segment  // guarded by mu: segments whose results are in
	evicts   []*client   // guarded by mu: connections the input budget closes
	asks     []*loopConn // guarded by mu: connections other goroutines asked about: CLIENT KILL, MONITOR lines (asks_linux.go)
	deciding bool        // guarded by mu: the loop is inside Service.Decide or pumping the upstream; it takes landings itself after
	stopped  bool        // guarded by mu: adopts no more connections
	ended    bool        // guarded by mu: the loop has closed its descriptors

	drainAt atomic.Int64 // UnixNano at which to close every connection; 0: none
	stopNow atomic.Bool
	cuts    atomic.Int64 // rounds handed over in parts

	upstream Upstream // the store this loop reads the replies of; nil: none
	// smallRound: the last round went whole, too small to be cut in
	// parts; missed: holds in a row that no reply ended; holdOff: no hold
	// before it (see holdUpstream).
	smallRound bool
	missed     int
	holdOff    time.Time
	holdFDs    [1]unix.PollFd

	// The loop goroutine's own.
	conns   map[int]*loopConn
	touched []*loopConn // connections with something to do this turn
	events  []unix.EpollEvent
	batches []*service.Batch // a round's batches, reused
	taking  []*segment       // the landed queue, swapped out
	parting []*segment       // a round's segments while decide cuts it
	sizes   []int            // a round's batch sizes, for cutRound
	ends    []int            // where decide cuts a round
	rounds  sync.Pool        // *round
}

// loopConn is a connection a loop serves.
type loopConn struct {
	fd      int
	c       *client
	watched uint32 // the epoll events registered for it; 0: none (removed from epoll)
	blocked bool   // replies wait for room in the socket
	eof     bool   // the client has sent all it will: close once answered
	touched bool   // in the loop's touched list
}

// round is one hand-over to the service: the segments that land together.
type round struct {
	l      *loop
	segs   []*segment
	landed func()
}

// upstreamEvent is the epoll data of the upstream store's connection: no
// descriptor's number.
const upstreamEvent = -2

// maxQueued bounds the replies a connection may owe behind its batch in
// flight before the loop stops reading it until that batch lands.
const maxQueued = 4096

// startLoops starts n event loops; none for n < 1.
func startLoops(s *Server, n int) ([]*loop, error) {
	var loops []*loop
	for range n {
		l, err := newLoop(s)
		if err != nil {
			for _, l := range loops {
				l.stop()
			}
			return nil, fmt.Errorf("respserver: event loop: %w", err)
		}
		loops = append(loops, l)
		if len(loops) == 1 && s.cfg.Upstream != nil {
			l.upstream = s.cfg.Upstream
			l.upstream.PollWith(l.watchUpstream)
		}
		go l.run()
	}
	return loops, nil
}

func newLoop(s *Server) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, err
	}
	l := &loop{s: s, ep: ep, wake: wake, conns: make(map[int]*loopConn),
		events: make([]unix.EpollEvent, 256)}
	l.rounds.New = func() any {
		r := &round{l: l}
		r.landed = r.land
		return r
	}
	return l, nil
}

// pollable tells whether a loop can serve nc: it needs its descriptor.
func pollable(nc net.Conn) bool {
	_, ok := nc.(syscall.Conn)
	return ok
}

// adopt takes nc over: the loop keeps a duplicate of its descriptor and
// nc is closed, which takes the original out of Go's poller.
func (l *loop) adopt(nc net.Conn, c *client) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return errors.New("no file descriptor")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return errors.New("event loop stopped")
	}
	fd, dupErr := -1, error(nil)
	if err := raw.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return err
	}
	if dupErr != nil {
		return dupErr
	}
	_ = nc.Close()
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return err
	}
	lc := &loopConn{fd: fd, c: c}
	c.lc = lc // c.loop is l already (register)
	c.fd.Store(int32(fd))
	l.incoming = append(l.incoming, lc)
	l.signalLocked()
	return nil
}

// signal wakes the loop, unless it has ended.
func (l *loop) signal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.signalLocked()
}

// signalLocked is signal with l.mu held: once the loop ends, its eventfd
// is closed, and the number may already name another file.
func (l *loop) signalLocked() {
	if l.ended {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
}

// land puts segments whose results are in on the landed queue, from
// whichever goroutine completed them, and wakes the loop unless it is the
// one deciding (it takes the queue itself when Decide returns).
func (l *loop) land(segs ...*segment) {
	l.mu.Lock()
	l.landed = append(l.landed, segs...)
	if !l.deciding {
		l.signalLocked()
	}
	l.mu.Unlock()
}

// land is a round's completion: its segments land together.
func (r *round) land() {
	l := r.l
	l.land(r.segs...)
	clear(r.segs)
	r.segs = r.segs[:0]
	l.rounds.Put(r)
}

// evictLater has the loop close c for the input budget.
func (l *loop) evictLater(c *client) {
	l.mu.Lock()
	l.evicts = append(l.evicts, c)
	l.signalLocked()
	l.mu.Unlock()
}

// drainUntil has the loop close every connection at t, or once its
// answers are out if some are still in flight then; until t they are
// served as before.
func (l *loop) drainUntil(t time.Time) {
	l.drainAt.Store(t.UnixNano())
	l.signal()
}

// stop has the loop close every connection it serves and end.
func (l *loop) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.stopNow.Store(true)
	l.signal()
}

func (l *loop) run() {
	defer l.end()
	for !l.stopNow.Load() {
		timeout := -1
		if wait, draining := l.drainLeft(); wait > 0 {
			timeout = int((wait + time.Millisecond - 1) / time.Millisecond)
		} else if draining {
			l.closeIdle()
		}
		n, err := l.wait(timeout)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			l.s.log.Error("event loop failed; closing its connections", "err", err)
			return
		}
		for _, ev := range l.events[:n] {
			fd := int(ev.Fd)
			switch fd {
			case l.wake:
				l.welcome()
				continue
			case upstreamEvent:
				l.pumpUpstream()
				continue
			}
			lc := l.conns[fd]
			if lc == nil {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 && lc.blocked {
				lc.blocked = false
				l.touch(lc)
			}
			if l.reading(lc) && ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) != 0 {
				l.read(lc)
			}
		}
		l.turn()
	}
}

// wait waits for events. While a small round is at the upstream, it may
// first wait for its reply alone (holdUpstream). It looks without
// blocking, and before it
// blocks lets the goroutines this turn woke run on this thread (a TLS
// upstream's reply reader, an RL.RESET): a loop that blocks in epoll_wait
// at once leaves them to another thread, which costs a wake-up or two.
// Where the loop reads the upstream's replies itself the yield finds
// little to run, but the moment it takes gathers a little more for the
// next batch: without it, measured at -P 1, batches were smaller and Redis
// spent about a tenth more per decision, for no more throughput.
func (l *loop) wait(timeout int) (int, error) {
	if timeout != 0 && l.holdUpstream() {
		l.events[0] = unix.EpollEvent{Events: unix.EPOLLIN, Fd: upstreamEvent}
		return 1, nil
	}
	n, err := unix.EpollWait(l.ep, l.events, 0)
	if n != 0 || err != nil || timeout == 0 {
		return n, err
	}
	runtime.Gosched()
	return unix.EpollWait(l.ep, l.events, timeout)
}

// holdFor is how long the loop waits for the reply of a small round in
// flight before it reads its connections again; after maxMissed holds in
// a row that no reply ended, it does not hold for holdOffFor.
const (
	holdFor    = 300 * time.Microsecond
	maxMissed  = 8
	holdOffFor = 100 * time.Millisecond
)

// holdUpstream waits up to holdFor for the upstream's reply to the small
// round in flight, and reports whether it came; the loop's connections
// are not read meanwhile. Read at once, the requests that come during a
// round trip make one small batch after another, each a wake-up of the
// loop; held, they wait in their sockets until the reply is written and
// are then read together, while the loop sleeps. Side by side (6 pairs
// at -P 16, 8 at -P 1, over a million keys), it took Sluice's CPU at
// -P 16 from 2.05 to 1.75 µs a request, and redis-benchmark's p50 at
// -P 1 from 0.38 to 0.29 ms, throughput unchanged. A Redis that misses
// maxMissed holds in a row (far away, paused, slow) is not held for
// during holdOffFor: the loop then reads its connections as soon as they
// send, and what waits in them waits holdFor at most, now and then.
func (l *loop) holdUpstream() bool {
	if !l.smallRound || l.upstream == nil {
		return false
	}
	fd := l.upstream.Owing()
	if fd < 0 {
		return false
	}
	now := time.Now()
	if now.Before(l.holdOff) {
		return false
	}
	l.holdFDs[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	ts := unix.NsecToTimespec(int64(holdFor))
	n, err := unix.Ppoll(l.holdFDs[:], &ts, nil)
	if n > 0 {
		l.missed = 0
		return true
	}
	if err == nil {
		if l.missed++; l.missed >= maxMissed {
			l.missed = 0
			l.holdOff = now.Add(holdOffFor)
		}
	}
	return false
}

// watchUpstream adds the upstream store's connection to the loop's epoll;
// the store calls it, on any goroutine, when it connects. The connection
// leaves the epoll when the store closes it.
func (l *loop) watchUpstream(fd int) error {
	return unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: upstreamEvent})
}

// pumpUpstream reads the upstream store's replies that have come: their
// batches land on this goroutine, taken at the end of the turn.
func (l *loop) pumpUpstream() {
	l.setDeciding(true)
	l.upstream.Pump()
	l.setDeciding(false)
}

// setDeciding says whether the loop itself is running what may land
// segments (Service.Decide, the upstream's pump): while it is, a landing
// does not wake it, as it takes the landed queue itself after.
func (l *loop) setDeciding(on bool) {
	l.mu.Lock()
	l.deciding = on
	l.mu.Unlock()
}

// drainLeft is how long connections are still served while draining.
func (l *loop) drainLeft() (time.Duration, bool) {
	at := l.drainAt.Load()
	if at == 0 {
		return 0, false
	}
	return time.Until(time.Unix(0, at)), true
}

// welcome registers the connections adopted since the last wake-up.
func (l *loop) welcome() {
	var buf [8]byte
	_, _ = unix.Read(l.wake, buf[:])
	l.mu.Lock()
	in, evicts, asks := l.incoming, l.evicts, l.asks
	l.incoming, l.evicts, l.asks = nil, nil, nil
	l.mu.Unlock()
	for _, c := range evicts {
		if lc := c.lc; lc != nil && lc.fd >= 0 {
			c.out = redcon.AppendError(c.out, errInputBudget)
			l.write(lc)
			l.close(lc, nil)
		}
	}
	for _, lc := range in {
		l.conns[lc.fd] = lc
		if l.watch(lc); lc.fd < 0 {
			continue
		}
		if wait, draining := l.drainLeft(); (draining && wait <= 0) || lc.c.killed.Load() {
			l.close(lc, nil)
		}
	}
	l.answer(asks)
}

// touch puts a connection on this turn's list.
func (l *loop) touch(lc *loopConn) {
	if !lc.touched {
		lc.touched = true
		l.touched = append(l.touched, lc)
	}
}

// reading tells whether the loop reads a connection now: not while its
// replies wait for room, nor while a command of its waits for what is in
// flight, nor while it owes too many replies behind its batch in flight.
func (l *loop) reading(lc *loopConn) bool {
	c := lc.c
	return lc.fd >= 0 && !lc.blocked && !lc.eof && !c.quit && !c.held &&
		(c.flying == nil || len(c.cur.pend) < maxQueued)
}

// read reads what a connection has sent and runs the commands it
// completes; their decisions wait for the turn's hand-over.
func (l *loop) read(lc *loopConn) {
	n, err := unix.Read(lc.fd, lc.c.room())
	if n > 0 {
		l.touch(lc)
		lc.c.takeRead(n)
		return
	}
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if err == nil || lc.c.idle() {
		// The end of the stream: what came before it is answered first.
		lc.eof = true
		l.touch(lc)
		if err == nil {
			return
		}
	}
	l.close(lc, err)
}

// takeRead runs what a read of n bytes completed, short of handing it over.
func (c *client) takeRead(n int) {
	defer c.recoverPanic()
	c.take(n)
}

// turn finishes a turn of the loop: it takes what landed, hands the
// touched connections' decisions to the service as one batch, takes what
// that answered at once, and writes every reply.
func (l *loop) turn() {
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
		c.compact()
		switch {
		case lc.fd < 0:
		case c.idle() && len(c.out) == 0 && (c.quit || lc.eof || draining && l.drainAt.Load() <= time.Now().UnixNano()):
			l.close(lc, nil)
		default:
			l.watch(lc)
		}
	}
	l.touched = l.touched[:0]
}

// takeLanded delivers the segments that landed, in each connection's
// order, and runs the commands that waited for them.
func (l *loop) takeLanded() {
	l.mu.Lock()
	l.taking, l.landed = l.landed, l.taking[:0]
	l.mu.Unlock()
	for i, g := range l.taking {
		l.taking[i] = nil
		c := g.c
		if c.lc == nil || c.lc.fd < 0 {
			g.clear() // the connection is gone: nothing to answer
			if c.flying == g {
				c.flying = nil
			}
			continue
		}
		l.touch(c.lc)
		l.deliver(c, g)
	}
}

// deliver writes a landed segment's replies and runs what waited for it.
func (l *loop) deliver(c *client, g *segment) {
	defer c.recoverPanic()
	c.deliver(g)
	if c.held && c.flying == nil {
		c.proceed()
	}
}

// handOver lifts each touched connection's queued decisions and hands them
// to the service as one batch. It reports whether it handed anything.
func (l *loop) handOver() bool {
	defer l.recoverRound()
	r := l.rounds.Get().(*round)
	bs := l.batches[:0]
	for _, lc := range l.touched {
		c := lc.c
		if lc.fd < 0 {
			continue
		}
		for {
			if g := c.lift(); g != nil {
				r.segs = append(r.segs, g)
				bs = append(bs, g.batch)
				break
			}
			// Only errors were owed, and are out: what waited can run.
			if !c.held || c.flying != nil {
				break
			}
			c.proceed()
		}
	}
	l.batches = bs
	if len(bs) == 0 {
		l.rounds.Put(r)
		return false
	}
	l.setDeciding(true)
	l.decide(r, bs)
	l.setDeciding(false)
	clear(l.batches)
	return true
}

// decide hands a round's batches, whose segments r holds, to the service.
// A large round goes in Config.RoundParts parts of about equal size,
// whole connections each, which the store sends as round trips in flight
// together: Redis then decides one part while the loop writes the
// replies of another and reads what their clients send next. Handed over
// whole, the round keeps the loop, Redis and the clients in lockstep,
// each idle while another works (at -P 16 it measured 1.5 times direct
// calls whole, and 1.8 in two parts).
func (l *loop) decide(r *round, bs []*service.Batch) {
	l.sizes = l.sizes[:0]
	for _, b := range bs {
		l.sizes = append(l.sizes, b.Len())
	}
	l.ends = cutRound(l.sizes, l.s.cfg.RoundParts, l.ends[:0])
	l.smallRound = len(l.ends) == 1
	if len(l.ends) == 1 {
		l.s.cfg.Service.Decide(bs, r.landed)
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
		l.s.cfg.Service.Decide(bs[from:end], part.landed)
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
func (l *loop) recoverRound() {
	if r := recover(); r != nil {
		l.s.panicked(r)
		for _, lc := range l.touched {
			lc.c.internalError()
		}
	}
}

// write sends a connection's replies. What the socket cannot take now
// waits for EPOLLOUT.
func (l *loop) write(lc *loopConn) {
	c := lc.c
	for len(c.out) > 0 && lc.fd >= 0 {
		n, err := unix.Write(lc.fd, c.out)
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
		if n < len(c.out) {
			c.out = c.out[:copy(c.out, c.out[n:])]
			continue
		}
		c.resetOut()
	}
}

// watch registers with epoll what the loop waits for on a connection: room
// to write, something to read, or nothing (it is removed from epoll, so
// that a connection the loop does not read cannot wake it again and
// again).
func (l *loop) watch(lc *loopConn) {
	var want uint32
	switch {
	case lc.blocked:
		want = unix.EPOLLOUT
	case l.reading(lc):
		want = unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if want == lc.watched {
		return
	}
	var err error
	switch {
	case want == 0:
		err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, lc.fd, nil)
	case lc.watched == 0:
		err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, lc.fd, &unix.EpollEvent{Events: want, Fd: int32(lc.fd)})
	default:
		err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, lc.fd, &unix.EpollEvent{Events: want, Fd: int32(lc.fd)})
	}
	if err != nil {
		l.close(lc, err)
		return
	}
	lc.watched = want
}

// close closes a connection and counts it out. A segment of it still in
// flight lands later and is dropped.
func (l *loop) close(lc *loopConn, err error) {
	if lc.fd < 0 {
		return
	}
	if lc.watched != 0 {
		_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, lc.fd, nil)
	}
	unix.Close(lc.fd)
	delete(l.conns, lc.fd)
	lc.fd = -1
	l.load.Add(-1)
	l.s.closed(lc.c, err)
}

// closeIdle closes, once draining is over, every connection that owes
// nothing; the others close as soon as their answers are out (turn).
func (l *loop) closeIdle() {
	for _, lc := range l.conns {
		if lc.c.idle() {
			l.close(lc, nil)
		}
	}
}

// end closes everything the loop holds, once it stops.
func (l *loop) end() {
	if l.upstream != nil {
		l.upstream.Unpoll() // before ep closes
	}
	l.mu.Lock()
	l.stopped = true
	in := l.incoming
	l.incoming = nil
	l.mu.Unlock()
	for _, lc := range in {
		unix.Close(lc.fd)
		l.s.closed(lc.c, nil)
	}
	for _, lc := range l.conns {
		l.close(lc, nil)
	}
	l.mu.Lock()
	l.ended = true
	unix.Close(l.ep)
	unix.Close(l.wake)
	l.mu.Unlock()
}
