//go:build linux

package respserver

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-rl/sluice/service"
)

// loop is an event loop: one goroutine that waits on epoll for every
// connection it serves, reads each that has sent something, decides
// everything they sent as one batch, and writes every reply.
//
// Go's own network poller gives each connection a goroutine, which costs a
// wake-up, a read that finds nothing and, on a busy machine, thread
// switches for every request; and decisions of different connections meet
// only in the batcher, through more wake-ups. Here a request costs one
// read and one write, and a round's decisions are one batch already. While
// the batch is at Redis the loop waits, and what clients send meanwhile
// waits in their sockets for the next round: the time a batch spends in
// flight gathers the next one.
type loop struct {
	s    *Server
	ep   int // the epoll instance
	wake int // an eventfd that wakes the loop: new connections, drain, stop
	load atomic.Int64

	mu       sync.Mutex
	incoming []*loopConn // guarded by mu: adopted, not yet seen by the loop
	stopped  bool        // guarded by mu: adopts no more connections
	ended    bool        // guarded by mu: the loop has closed its descriptors

	drainAt atomic.Int64 // UnixNano at which to close every connection; 0: none
	stopNow atomic.Bool

	// The loop goroutine's own.
	conns   map[int]*loopConn
	round   []*loopConn // connections read this round
	events  []unix.EpollEvent
	batches []*service.Batch // the round's connections' batches
}

// loopConn is a connection a loop serves.
type loopConn struct {
	fd      int
	c       *client
	blocked bool // replies wait for room in the socket; reading waits for them
}

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
	return &loop{s: s, ep: ep, wake: wake, conns: make(map[int]*loopConn),
		events: make([]unix.EpollEvent, 256)}, nil
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
	l.incoming = append(l.incoming, &loopConn{fd: fd, c: c})
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

// drainUntil has the loop close every connection at t; until then they
// are served as before.
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
			l.closeAll()
		}
		n, err := unix.EpollWait(l.ep, l.events, timeout)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			l.s.log.Error("event loop failed; closing its connections", "err", err)
			return
		}
		for _, ev := range l.events[:n] {
			fd := int(ev.Fd)
			if fd == l.wake {
				l.welcome()
				continue
			}
			lc := l.conns[fd]
			if lc == nil {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 {
				l.flush(lc)
			}
			if !lc.blocked && lc.fd >= 0 && ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) != 0 {
				l.read(lc)
			}
		}
		l.settle()
	}
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
	in := l.incoming
	l.incoming = nil
	l.mu.Unlock()
	for _, lc := range in {
		if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, lc.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(lc.fd)}); err != nil {
			unix.Close(lc.fd)
			l.s.closed(lc.c, err)
			l.load.Add(-1)
			continue
		}
		l.conns[lc.fd] = lc
		if wait, draining := l.drainLeft(); draining && wait <= 0 {
			l.close(lc, nil)
		}
	}
}

// read reads what a connection has sent and runs the commands it
// completes; their decisions wait for the round's settle.
func (l *loop) read(lc *loopConn) {
	n, err := unix.Read(lc.fd, lc.c.spare())
	if n > 0 {
		lc.c.takeRead(n)
		l.round = append(l.round, lc) // once: epoll names a descriptor once a wait
		return
	}
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	// The end of the stream, or an error. Anything read before it was
	// answered in an earlier round.
	l.close(lc, err)
}

// takeRead runs what a read of n bytes completed, short of settling.
func (c *client) takeRead(n int) {
	defer c.recoverPanic()
	c.take(n)
}

// settle decides the round's queued requests as one batch, then writes
// every connection's replies.
func (l *loop) settle() {
	if len(l.round) == 0 {
		return
	}
	l.decide()
	for i, lc := range l.round {
		l.round[i] = nil
		lc.c.compact()
		l.write(lc)
	}
	l.round = l.round[:0]
}

// decide hands the round's queued requests to the service as one batch
// and answers each connection's owed replies.
func (l *loop) decide() {
	defer l.recoverRound()
	bs := l.batches[:0]
	for _, lc := range l.round {
		if lc.c.batch.Len() > 0 {
			bs = append(bs, lc.c.batch)
		}
	}
	l.batches = bs
	if len(bs) > 0 {
		l.s.cfg.Service.Decide(bs, l.answerRound)
	} else {
		l.answerRound()
	}
	clear(l.batches)
}

// answerRound writes every owed reply of the round's connections.
func (l *loop) answerRound() {
	for _, lc := range l.round {
		lc.c.answer()
	}
}

// recoverRound turns a panic while deciding a round into an internal
// error for each of its connections, which are then closed.
func (l *loop) recoverRound() {
	if r := recover(); r != nil {
		l.s.panicked(r)
		for _, lc := range l.round {
			lc.c.internalError()
		}
	}
}

// write sends a connection's replies. What the socket cannot take now
// waits for EPOLLOUT, and the connection is not read until it is sent.
func (l *loop) write(lc *loopConn) {
	c := lc.c
	for len(c.out) > 0 && lc.fd >= 0 {
		n, err := unix.Write(lc.fd, c.out)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			l.block(lc, true)
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
	if c.quit && len(c.out) == 0 {
		l.close(lc, nil)
	}
}

// flush sends replies that waited for room in the socket.
func (l *loop) flush(lc *loopConn) {
	if !lc.blocked {
		return
	}
	l.block(lc, false)
	l.write(lc)
}

// block switches a connection between waiting to read and waiting to
// write.
func (l *loop) block(lc *loopConn, blocked bool) {
	if lc.blocked == blocked {
		return
	}
	lc.blocked = blocked
	events := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
	if blocked {
		events = unix.EPOLLOUT
	}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, lc.fd, &unix.EpollEvent{Events: events, Fd: int32(lc.fd)}); err != nil {
		l.close(lc, err)
	}
}

// close closes a connection and counts it out.
func (l *loop) close(lc *loopConn, err error) {
	if lc.fd < 0 {
		return
	}
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, lc.fd, nil)
	unix.Close(lc.fd)
	delete(l.conns, lc.fd)
	lc.fd = -1
	l.load.Add(-1)
	l.s.closed(lc.c, err)
}

func (l *loop) closeAll() {
	for _, lc := range l.conns {
		l.close(lc, nil)
	}
}

// end closes everything the loop holds, once it stops.
func (l *loop) end() {
	l.mu.Lock()
	l.stopped = true
	in := l.incoming
	l.incoming = nil
	l.mu.Unlock()
	for _, lc := range in {
		unix.Close(lc.fd)
		l.s.closed(lc.c, nil)
	}
	l.closeAll()
	l.mu.Lock()
	l.ended = true
	unix.Close(l.ep)
	unix.Close(l.wake)
	l.mu.Unlock()
}
