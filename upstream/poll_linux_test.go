package upstream_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// startLoop runs an event loop that reads s's replies (UseLoop) until the
// test ends, or until it calls end.
func startLoop(t *testing.T, s *upstream.Store) (l *evloop.Loop, end func()) {
	t.Helper()
	l, err := evloop.New()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- l.Run() }()
	s.UseLoop(l)
	ended := false
	end = func() {
		if !ended {
			ended = true
			l.Close()
			if err := <-ran; err != nil {
				t.Errorf("event loop: %v", err)
			}
		}
	}
	t.Cleanup(end)
	return l, end
}

// readsOnLoop tells whether s's replies are read on l: a batch sent while
// l is busy (running a posted function) must not complete until l is free.
func readsOnLoop(t *testing.T, s *upstream.Store, l *evloop.Loop) bool {
	t.Helper()
	busy, free := make(chan struct{}), make(chan struct{})
	if !l.Post(func() { close(busy); <-free }) {
		t.Fatal("the loop has ended")
	}
	<-busy
	req := engine.Request{Key: "on-loop", Limit: limitOf(engine.FixedWindow, 1000, time.Hour), Cost: 1}
	res := make([]engine.Result, 1)
	landed := make(chan error, 1)
	s.Submit([]engine.Request{req}, res, time.Now().Add(5*time.Second), func(err error) { landed <- err })
	onLoop := true
	select {
	case <-landed:
		onLoop = false
	case <-time.After(100 * time.Millisecond):
	}
	close(free)
	if onLoop {
		select {
		case err := <-landed:
			if err != nil || res[0].Err != nil {
				t.Fatalf("the batch read on the loop: %v %+v", err, res[0])
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the batch sent while the loop was busy never completed once it was free")
		}
	}
	return onLoop
}

// A loop that reads the replies decides as the store's own reader does,
// with many batches in flight from many callers.
func TestLoopDecides(t *testing.T) {
	_, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client, Prefix: "polled:"})
	defer s.Close()
	l, _ := startLoop(t, s)
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: s, MaxBatch: 8, MaxInFlight: 4, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	enginetest.ManyCallers(t, b, limitOf(engine.GCRA, 1000, time.Hour), 10, 20, func(int) int { return 2 })
	if !readsOnLoop(t, s, l) {
		t.Fatal("the store's replies are not read on the loop it was given")
	}
}

// A paused Redis fails a batch read on the loop by its deadline (no read
// waits, so a timer must see it late), and the connection dialed after
// is read on the loop again.
func TestLoopPausedRedis(t *testing.T) {
	srv, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client})
	defer s.Close()
	l, _ := startLoop(t, s)
	req := engine.Request{Key: "paused", Limit: limitOf(engine.FixedWindow, 100, time.Hour), Cost: 1}
	if _, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			_ = srv.Signal(syscall.SIGCONT)
		}
	}()
	// The batch must fail while Redis is still paused (it resumes only
	// after): a store with no timer for it would leave it until send's
	// limit, a hang guard far past the 200ms, and fail the test there.
	// How soon after 200ms it fails is the machine's load, not asserted.
	_, err := send(t, s, time.Now().Add(200*time.Millisecond), 5*time.Second, req)
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	paused = false
	if err == nil {
		t.Fatal("a paused Redis decided")
	}
	res, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req)
	if err != nil || res[0].Err != nil {
		t.Fatalf("after Redis resumed: %v %+v", err, res[0])
	}
	if !readsOnLoop(t, s, l) {
		t.Fatal("the connection dialed again is not read on the loop")
	}
}

// When the loop ends, the connection it read gets a reader goroutine.
func TestLoopEndHandsReadingBack(t *testing.T) {
	_, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client, Prefix: "unpoll:"})
	defer s.Close()
	_, end := startLoop(t, s)
	limit := limitOf(engine.TokenBucket, 100, time.Hour)
	req := engine.Request{Key: "k", Limit: limit, Cost: 1}
	if _, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req); err != nil {
		t.Fatal(err)
	}
	end()
	res, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req)
	if err != nil || res[0].Err != nil || res[0].Decision.Remaining != 98 {
		t.Fatalf("after the loop ended: %v %+v; want remaining 98", err, res)
	}
}

// With the replies read by an event loop, as in the sidecar, a connection
// given up on a paused Redis is drained all the same: its late calls are
// counted, and none of them charges.
func TestPausedRedisOnLoopChargesNothing(t *testing.T) {
	srv, client := standalone(t)
	top := topology{"standalone", client, []*redistest.Server{srv}}
	pauseAndCount(t, top, engine.FailClosed, func(s *upstream.Store) { startLoop(t, s) })
}
