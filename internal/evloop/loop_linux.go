//go:build linux

package evloop

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Loop is an event loop. New makes one, Run runs it on the caller's
// goroutine until Close.
type Loop struct {
	ep   int // the epoll instance
	wake int // an eventfd: Wake writes it while the loop sleeps

	// woken: a turn was asked for since the loop last looked; asleep: the
	// loop is in (or about to enter) a blocking epoll_wait. Wake sets the
	// first and reads the second, the loop the other way round, so that
	// the eventfd is written only for a loop that would otherwise sleep.
	woken  atomic.Bool
	asleep atomic.Bool
	stop   atomic.Bool
	// owers are the watchers whose handler implements Owing, copied on
	// change so that the hold reads them without the lock.
	owers atomic.Pointer[[]*Watcher]

	// Three locks, so that the loop's goroutine, looking up a watcher or
	// taking what was posted, never waits behind another goroutine's
	// write to the eventfd (a landing from another loop).
	mu      sync.Mutex
	posted  []func()  // guarded by mu
	wakeAt  time.Time // guarded by mu: the earliest WakeAt not yet past; zero: none
	running bool      // guarded by mu: Run has started
	ended   bool      // guarded by mu: the loop has ended (or never ran and was closed)
	endOnce sync.Once // ends a loop that never ran, however many Closes
	// wmu guards the watchers; the loop's lookups share it.
	wmu      sync.RWMutex
	watchers map[int]*Watcher // guarded by wmu: by descriptor
	gen      uint32           // guarded by wmu: numbers registrations, so a stale event is told from a new one on a reused descriptor
	unwatch  bool             // guarded by wmu: the loop has ended; Watch refuses
	// fdMu guards the descriptors' lifetime: signal shares it, end closes
	// them holding it.
	fdMu   sync.RWMutex
	closed bool // guarded by fdMu

	done chan struct{} // closed when Run returns

	// The loop goroutine's own.
	events  []unix.EpollEvent
	turns   []func()
	taking  []func()
	holding bool
	owedIn  []Owing // OwedIn's: work of this loop's user that another goroutine will land by Wake or Post
	missed  int
	holdOff time.Time
	holdFDs []unix.PollFd
	holdWs  []*Watcher
}

// Watcher is a descriptor registered with a loop.
type Watcher struct {
	l     *Loop
	fd    int
	gen   uint32
	h     Handler
	owing Owing  // h, if it implements Owing
	want  Events // guarded by l.wmu
	gone  bool   // guarded by l.wmu: removed, or the loop ended
}

// New makes a loop; Run runs it.
func New() (*Loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("evloop: epoll_create: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("evloop: eventfd: %w", err)
	}
	// The eventfd's event carries generation 0, which no watcher has.
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, fmt.Errorf("evloop: watch the eventfd: %w", err)
	}
	l := &Loop{ep: ep, wake: wake, watchers: make(map[int]*Watcher), events: make([]unix.EpollEvent, 256),
		done: make(chan struct{})}
	l.owers.Store(new([]*Watcher))
	return l, nil
}

// Run runs the loop on the caller's goroutine until Close, and returns
// nil then, or the error that ended it (epoll failing). Before it returns
// it runs what was posted and calls Ended for every descriptor still
// watched. Run after Close returns nil at once: a program that fails to
// start closes its loops, maybe before their goroutines called Run.
func (l *Loop) Run() (err error) {
	l.mu.Lock()
	if l.running {
		l.mu.Unlock()
		return errors.New("evloop: Run called twice")
	}
	if l.stop.Load() {
		l.mu.Unlock()
		return nil // closed: Close ends the loop itself
	}
	l.running = true
	l.mu.Unlock()
	defer close(l.done)
	defer l.end()
	for !l.stop.Load() {
		if !l.holdReply() {
			n, err := l.wait()
			if err != nil {
				if err == unix.EINTR {
					continue
				}
				return fmt.Errorf("evloop: epoll_wait: %w", err)
			}
			for _, ev := range l.events[:n] {
				l.dispatch(ev)
			}
		}
		l.runPosted()
		for _, f := range l.turns {
			f()
		}
	}
	return nil
}

// Close ends the loop and waits until Run has returned; a loop that never
// ran just releases its descriptors. It must not be called on the loop's
// goroutine.
func (l *Loop) Close() error {
	// stop is set under mu, where Run looks before it begins: either Run
	// began, and ends the loop, or it never will, and Close ends it.
	l.mu.Lock()
	l.stop.Store(true)
	running := l.running
	l.mu.Unlock()
	if running {
		l.signal()
		<-l.done
		return nil
	}
	l.endOnce.Do(l.end)
	return nil
}

// Wake has the loop run a turn (its posted and turn functions) soon: at
// once if it sleeps, else before it next sleeps. It is cheap while the
// loop is awake.
func (l *Loop) Wake() {
	if l.woken.Swap(true) {
		return // asked already; whoever asked did what was needed
	}
	if l.asleep.Load() {
		l.signal()
	}
}

// signal writes the eventfd, unless the loop has ended: its number may
// name another file by then.
func (l *Loop) signal() {
	l.fdMu.RLock()
	defer l.fdMu.RUnlock()
	if l.closed {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
}

// WakeAt has the loop run a turn at t at the latest (a drain's end, say);
// the turn functions look at the clock themselves.
func (l *Loop) WakeAt(t time.Time) {
	l.mu.Lock()
	if l.wakeAt.IsZero() || t.Before(l.wakeAt) {
		l.wakeAt = t
	}
	l.mu.Unlock()
	l.Wake()
}

// Post has f run on the loop's goroutine, before its next turn functions,
// and reports whether it will: not once the loop has ended. Functions
// posted before the loop ends all run.
func (l *Loop) Post(f func()) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.posted = append(l.posted, f)
	l.mu.Unlock()
	l.Wake()
	return true
}

// OnTurn has f called on the loop's goroutine at the end of every turn:
// after the ready descriptors' handlers and the posted functions, before
// the loop waits again. It reports false once the loop has ended.
func (l *Loop) OnTurn(f func()) bool {
	return l.Post(func() { l.turns = append(l.turns, f) })
}

// Hold says whether the loop, before it next reads its descriptors, waits
// first up to holdFor for a reply on a descriptor that owes one (see
// Owing and holdFor): the loop's user turns it on when what it just sent
// is small enough that reading more now would only make another small
// round. It is called on the loop's goroutine.
func (l *Loop) Hold(on bool) { l.holding = on }

// OwedIn has the hold wait for a wake-up too while o reports true: o
// says that work this loop's user handed over will come back through Wake
// or Post from another goroutine (a batch whose replies another loop
// reads), as a descriptor's Owing says its reply will come on it. The
// hold's gain (holdFor) is then kept on a loop that does not read the
// reply itself. It reports false once the loop has ended.
func (l *Loop) OwedIn(o Owing) bool {
	return l.Post(func() { l.owedIn = append(l.owedIn, o) })
}

// Watch registers fd for the events in want (none: registered but not
// polled), with h to call when it is ready. A descriptor is watched at
// most once; it is not closed by the loop.
func (l *Loop) Watch(fd int, want Events, h Handler) (*Watcher, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.unwatch || l.stop.Load() {
		return nil, ErrClosed
	}
	if l.watchers[fd] != nil {
		return nil, fmt.Errorf("evloop: descriptor %d is watched already", fd)
	}
	l.gen++
	if l.gen == 0 {
		l.gen = 1
	}
	w := &Watcher{l: l, fd: fd, gen: l.gen, h: h}
	if err := w.ctlLocked(want); err != nil {
		return nil, err
	}
	l.watchers[fd] = w
	if o, ok := h.(Owing); ok {
		w.owing = o
		l.setOwersLocked(append(append([]*Watcher(nil), *l.owers.Load()...), w))
	}
	return w, nil
}

// Set changes what w waits for.
func (w *Watcher) Set(want Events) error {
	w.l.wmu.Lock()
	defer w.l.wmu.Unlock()
	if w.gone {
		return ErrClosed
	}
	return w.ctlLocked(want)
}

// ctlLocked tells epoll what w waits for; a descriptor waiting for
// nothing leaves the epoll, so that one its user does not read cannot
// wake the loop again and again. l.wmu is held.
func (w *Watcher) ctlLocked(want Events) error {
	if want == w.want {
		return nil
	}
	var ev uint32
	if want&Readable != 0 {
		ev |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if want&Writable != 0 {
		ev |= unix.EPOLLOUT
	}
	var err error
	data := &unix.EpollEvent{Events: ev, Fd: int32(w.fd), Pad: int32(w.gen)}
	switch {
	case want == 0:
		err = unix.EpollCtl(w.l.ep, unix.EPOLL_CTL_DEL, w.fd, nil)
	case w.want == 0:
		err = unix.EpollCtl(w.l.ep, unix.EPOLL_CTL_ADD, w.fd, data)
	default:
		err = unix.EpollCtl(w.l.ep, unix.EPOLL_CTL_MOD, w.fd, data)
	}
	if err != nil {
		return fmt.Errorf("evloop: epoll_ctl descriptor %d: %w", w.fd, err)
	}
	w.want = want
	return nil
}

// Remove stops watching w's descriptor, which its owner may then close;
// its handler is not called again (but for a readiness the loop is
// dispatching at that very moment, on the loop's goroutine).
func (w *Watcher) Remove() {
	l := w.l
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if w.gone {
		return
	}
	_ = w.ctlLocked(0)
	w.gone = true
	delete(l.watchers, w.fd)
	if w.owing != nil {
		var owers []*Watcher
		for _, o := range *l.owers.Load() {
			if o != w {
				owers = append(owers, o)
			}
		}
		l.setOwersLocked(owers)
	}
}

func (l *Loop) setOwersLocked(owers []*Watcher) { l.owers.Store(&owers) }

// wait waits for events, and clears woken: what asked for this turn is
// seen by it. It looks without blocking first, and before it blocks lets
// the goroutines this turn woke run on this thread (a TLS upstream's
// reply reader, a command that waits on Redis on a goroutine of its own):
// a loop that blocks in epoll_wait at once leaves them to another thread,
// which costs a wake-up or two. Where the loop reads the upstream's
// replies itself the yield finds little to run, but the moment it takes
// gathers a little more for the next batch: without it, measured at -P 1,
// batches were smaller and Redis spent about a tenth more per decision,
// for no more throughput. The yield has a price: it wakes another thread,
// which often takes the loop's goroutine while this one sleeps (half the
// sidecar's context switches at -P 1, perf's sched_switch). Measured
// without it anyway (four interleaved pairs of go run ./bench on one
// Redis, TLS and Cluster, 2026-12-02), -P 16 was slower on all three
// (medians 1.76 against 1.89 times direct, 1.98 against 2.13, 0.99
// against 1.14) and -P 1 no faster beyond the noise: it stays.
func (l *Loop) wait() (int, error) {
	defer l.woken.Store(false)
	n, err := pollNow(l.ep, l.events)
	if n != 0 || err != nil || l.woken.Load() {
		return n, err
	}
	runtime.Gosched()
	timeout := l.timeout()
	if timeout == 0 {
		return pollNow(l.ep, l.events)
	}
	l.asleep.Store(true)
	if l.woken.Load() {
		l.asleep.Store(false)
		return pollNow(l.ep, l.events)
	}
	n, err = unix.EpollWait(l.ep, l.events, timeout)
	l.asleep.Store(false)
	if timeout > 0 {
		l.timeout() // clears a WakeAt this wait has reached
	}
	return n, err
}

// timeout is how long wait may block, in epoll's milliseconds: until the
// earliest WakeAt, or for ever (-1).
func (l *Loop) timeout() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wakeAt.IsZero() {
		return -1
	}
	left := time.Until(l.wakeAt)
	if left <= 0 {
		l.wakeAt = time.Time{}
		return 0
	}
	return int((left + time.Millisecond - 1) / time.Millisecond)
}

// dispatch calls the handler of the descriptor an event is for.
func (l *Loop) dispatch(ev unix.EpollEvent) {
	if ev.Pad == 0 {
		var buf [8]byte
		_, _ = Read(l.wake, buf[:])
		return
	}
	l.wmu.RLock()
	w := l.watchers[int(ev.Fd)]
	l.wmu.RUnlock()
	if w == nil || w.gen != uint32(ev.Pad) {
		return // removed since epoll_wait, or a new registration of the number
	}
	var got Events
	if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) != 0 {
		got |= Readable
	}
	if ev.Events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		got |= Writable
	}
	w.h.Ready(got)
}

// holdReply is the hold (see Hold and holdFor): it waits up to holdFor
// for a descriptor that owes a reply, and reports whether one came, its
// handler then called; the loop's other descriptors are not read
// meanwhile.
func (l *Loop) holdReply() bool {
	if !l.holding {
		return false
	}
	l.holdFDs, l.holdWs = l.holdFDs[:0], l.holdWs[:0]
	for _, w := range *l.owers.Load() {
		if w.owing.Owing() {
			l.holdFDs = append(l.holdFDs, unix.PollFd{Fd: int32(w.fd), Events: unix.POLLIN})
			l.holdWs = append(l.holdWs, w)
		}
	}
	wake := false
	for _, o := range l.owedIn {
		if o.Owing() {
			wake = true
			break
		}
	}
	if len(l.holdFDs) == 0 && !wake {
		return false
	}
	now := time.Now()
	if now.Before(l.holdOff) {
		return false
	}
	if wake {
		// As wait does before it sleeps: Wake writes the eventfd only
		// for a loop that says it is asleep, and what asked before
		// that is seen here.
		l.asleep.Store(true)
		if l.woken.Load() {
			l.asleep.Store(false)
			return false
		}
		l.holdFDs = append(l.holdFDs, unix.PollFd{Fd: int32(l.wake), Events: unix.POLLIN})
		l.holdWs = append(l.holdWs, nil)
	}
	ts := unix.NsecToTimespec(int64(holdFor))
	n, err := unix.Ppoll(l.holdFDs, &ts, nil)
	l.asleep.Store(false)
	if n <= 0 {
		if err == nil {
			if l.missed++; l.missed >= maxMissed {
				l.missed = 0
				l.holdOff = now.Add(holdOffFor)
			}
		}
		return false
	}
	l.missed = 0
	l.woken.Store(false) // the turn that follows sees what asked for one
	for i, p := range l.holdFDs {
		switch w := l.holdWs[i]; {
		case p.Revents == 0:
		case w == nil:
			var buf [8]byte
			_, _ = Read(l.wake, buf[:])
		case l.live(w):
			w.h.Ready(Readable)
		}
	}
	clear(l.holdWs)
	return true
}

// live tells whether w is still watched.
func (l *Loop) live(w *Watcher) bool {
	l.wmu.RLock()
	defer l.wmu.RUnlock()
	return !w.gone
}

// runPosted runs what other goroutines posted.
func (l *Loop) runPosted() {
	l.mu.Lock()
	l.taking, l.posted = l.posted, l.taking[:0]
	l.mu.Unlock()
	for i, f := range l.taking {
		l.taking[i] = nil
		f()
	}
}

// end runs what is still posted, tells every handler still watched that
// the loop has ended, and closes the loop's descriptors.
func (l *Loop) end() {
	for {
		l.mu.Lock()
		if len(l.posted) == 0 {
			l.ended = true
			l.mu.Unlock()
			break
		}
		l.mu.Unlock()
		l.runPosted()
	}
	l.wmu.Lock()
	l.unwatch = true
	ws := make([]*Watcher, 0, len(l.watchers))
	for _, w := range l.watchers {
		w.gone = true
		ws = append(ws, w)
	}
	clear(l.watchers)
	l.owers.Store(new([]*Watcher))
	l.wmu.Unlock()
	l.fdMu.Lock()
	l.closed = true
	unix.Close(l.ep)
	unix.Close(l.wake)
	l.fdMu.Unlock()
	for _, w := range ws {
		w.h.Ended()
	}
}
