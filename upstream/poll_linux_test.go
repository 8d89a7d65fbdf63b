package upstream_test

import (
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/upstream"
)

// pollLoop is an event loop in miniature, as respserver's first loop is
// to the store: it watches the descriptors the store hands it and pumps
// the store when one is readable. Nothing else reads a polled connection,
// so a reply it did not pump would never land.
type pollLoop struct {
	watched atomic.Int32 // connections the store handed over
	stop    atomic.Bool
	done    chan struct{}
}

func startPollLoop(t *testing.T, s *upstream.Store) *pollLoop {
	t.Helper()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	l := &pollLoop{done: make(chan struct{})}
	s.PollWith(func(fd int) error {
		l.watched.Add(1)
		return unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -2})
	})
	go func() {
		defer close(l.done)
		events := make([]unix.EpollEvent, 8)
		for !l.stop.Load() {
			if n, _ := unix.EpollWait(ep, events, 10); n > 0 {
				s.Pump()
			}
		}
		s.Unpoll() // before ep closes, as the loop does
		unix.Close(ep)
	}()
	t.Cleanup(l.end)
	return l
}

// end stops the loop and waits for it to hand reading back.
func (l *pollLoop) end() {
	l.stop.Store(true)
	<-l.done
}

// A loop that reads the replies decides as the store's own reader does,
// with many batches in flight from many callers.
func TestPolledDecides(t *testing.T) {
	_, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client, Prefix: "polled:"})
	defer s.Close()
	l := startPollLoop(t, s)
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: s, MaxBatch: 8, MaxInFlight: 4, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	enginetest.ManyCallers(t, b, limitOf(engine.GCRA, 1000, time.Hour), 10, 20, func(int) int { return 2 })
	if got := l.watched.Load(); got != 1 {
		t.Fatalf("the loop was handed %d connections; want 1", got)
	}
}

// A paused Redis fails a polled batch by its deadline (no read waits, so
// a timer must see it late), and the connection dialed after is handed to
// the loop again.
func TestPolledPausedRedis(t *testing.T) {
	srv, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client})
	defer s.Close()
	l := startPollLoop(t, s)
	req := engine.Request{Key: "paused", Limit: limitOf(engine.FixedWindow, 100, time.Hour), Cost: 1}
	if _, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := send(t, s, start.Add(200*time.Millisecond), 5*time.Second, req)
	took := time.Since(start)
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("a paused Redis decided")
	}
	if took > 2*time.Second {
		t.Fatalf("the late batch failed after %v; want about its 200ms deadline", took)
	}
	res, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req)
	if err != nil || res[0].Err != nil {
		t.Fatalf("after Redis resumed: %v %+v", err, res[0])
	}
	if got := l.watched.Load(); got != 2 {
		t.Fatalf("the loop was handed %d connections; want 2 (the first, and the one dialed again)", got)
	}
}

// When the loop ends, the connection it read gets a reader goroutine.
func TestUnpollHandsReadingBack(t *testing.T) {
	_, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client, Prefix: "unpoll:"})
	defer s.Close()
	l := startPollLoop(t, s)
	limit := limitOf(engine.TokenBucket, 100, time.Hour)
	req := engine.Request{Key: "k", Limit: limit, Cost: 1}
	if _, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req); err != nil {
		t.Fatal(err)
	}
	l.end()
	res, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req)
	if err != nil || res[0].Err != nil || res[0].Decision.Remaining != 98 {
		t.Fatalf("after the loop ended: %v %+v; want remaining 98", err, res)
	}
}
