package evloop

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// pipeEnd is a handler over the read end of an os.Pipe: it reports what
// it was called for on channels.
type pipeEnd struct {
	ready chan Events
	ended chan struct{}
	owes  atomic.Bool
}

func newPipeEnd() *pipeEnd {
	return &pipeEnd{ready: make(chan Events, 64), ended: make(chan struct{}, 1)}
}

// Ready never waits for room: a loop blocked in it could not end, and a
// failing test would hang in its cleanup instead of failing. A readiness
// not read is told again at the next turn (level-triggered).
func (p *pipeEnd) Ready(ev Events) {
	select {
	case p.ready <- ev:
	default:
	}
}

func (p *pipeEnd) Ended()      { p.ended <- struct{}{} }
func (p *pipeEnd) Owing() bool { return p.owes.Load() }

func osPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// running starts a loop on a goroutine of its own and closes it when the
// test ends; Run's error is checked then.
func running(t *testing.T) *Loop {
	t.Helper()
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- l.Run() }()
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return l
}

func within[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not within 5s", what)
		panic("unreachable")
	}
}

func quiet[T any](t *testing.T, c <-chan T, what string) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("%s: got %v", what, v)
	case <-time.After(50 * time.Millisecond):
	}
}

// A watched descriptor's handler runs when it is readable, not while it
// waits for nothing, and not once removed; Ended tells a handler still
// watched that the loop ended.
func TestWatch(t *testing.T) {
	l := running(t)
	r, w := osPipe(t)
	h := newPipeEnd()
	wr, err := l.Watch(int(r.Fd()), Readable, h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Watch(int(r.Fd()), Readable, h); err == nil {
		t.Error("a descriptor was watched twice")
	}
	quiet(t, h.ready, "nothing written")
	w.Write([]byte("x"))
	if ev := within(t, h.ready, "written"); ev&Readable == 0 {
		t.Fatalf("ready for %v; want Readable", ev)
	}
	// Level-triggered: unread, it is ready again; waiting for nothing,
	// it is not.
	if err := wr.Set(0); err != nil {
		t.Fatal(err)
	}
	settle(t, l, h.ready)
	quiet(t, h.ready, "watched for nothing")
	if err := wr.Set(Readable); err != nil {
		t.Fatal(err)
	}
	within(t, h.ready, "watched again, unread")
	wr.Remove()
	settle(t, l, h.ready)
	quiet(t, h.ready, "removed")

	r2, _ := osPipe(t)
	h2 := newPipeEnd()
	if _, err := l.Watch(int(r2.Fd()), Readable, h2); err != nil {
		t.Fatal(err)
	}
	l.Close()
	within(t, h2.ended, "Ended of a descriptor watched when the loop ended")
	select {
	case <-h.ended:
		t.Error("Ended called for a descriptor removed before")
	default:
	}
	if _, err := l.Watch(int(r2.Fd()), Readable, h2); err != ErrClosed {
		t.Errorf("Watch after Close: %v; want ErrClosed", err)
	}
	if l.Post(func() {}) {
		t.Error("Post after Close reported it would run")
	}
}

// settle takes what c receives until the loop has finished what it had
// begun: a function posted now runs after the readiness the loop may be
// dispatching (Run dispatches, then runs what was posted), and every
// later wait of the loop sees what the test changed before. c is then
// empty, and what it gets after is new. No sleep guesses how long the
// loop takes.
func settle[T any](t *testing.T, l *Loop, c chan T) {
	t.Helper()
	ran := make(chan struct{})
	if !l.Post(func() { close(ran) }) {
		t.Fatal("the loop has ended")
	}
	limit := time.After(5 * time.Second)
	for {
		select {
		case <-c:
		case <-ran:
			for len(c) > 0 {
				<-c
			}
			return
		case <-limit:
			t.Fatal("the loop did not run a posted function within 5s")
		}
	}
}

// Post runs functions on the loop's goroutine in order, and a turn
// function runs after them; Wake from another goroutine runs a turn of a
// sleeping loop; WakeAt runs one at its time with nothing else to wake
// the loop.
func TestPostWakeAndTurns(t *testing.T) {
	l := running(t)
	// Each turn tells its number and its time, taken on the loop.
	type turn struct {
		n  int
		at time.Time
	}
	turns := make(chan turn, 1024)
	var posted []int
	n := 0
	l.OnTurn(func() {
		n++
		select {
		case turns <- turn{n, time.Now()}:
		default:
		}
	})
	// caughtUp takes every turn up to the one after a function posted
	// now: the loop is idle after it, with nothing asked.
	caughtUp := func() {
		t.Helper()
		mark := make(chan int, 1)
		if !l.Post(func() { mark <- n }) {
			t.Fatal("Post refused on a running loop")
		}
		before := within(t, mark, "a posted function")
		for within(t, turns, "the turn after a posted function").n <= before {
		}
		for len(turns) > 0 {
			<-turns
		}
	}
	done := make(chan []int, 1)
	for i := range 100 {
		if !l.Post(func() { posted = append(posted, i) }) {
			t.Fatal("Post refused on a running loop")
		}
	}
	l.Post(func() { done <- append([]int(nil), posted...) })
	got := within(t, done, "posted functions")
	for i, v := range got {
		if v != i {
			t.Fatalf("posted functions ran in the order %v", got)
		}
	}
	within(t, turns, "a turn after posting")
	caughtUp()
	l.Wake()
	within(t, turns, "a turn after Wake")
	caughtUp()
	due := time.Now().Add(30 * time.Millisecond)
	l.WakeAt(due)
	within(t, turns, "the Wake of WakeAt") // WakeAt wakes at once too
	// Turns until one at WakeAt's time, by the loop's own clock: how late
	// the test reads them does not matter.
	for within(t, turns, "a turn at WakeAt's time").at.Before(due) {
	}
	quiet(t, turns, "a turn after WakeAt's time with nothing to do")
}

// The hold waits for an owing descriptor's reply alone while Hold is on,
// ends when the reply is readable, and stops holding for holdOffFor after
// maxMissed holds in a row that no reply ended; it does not hold with
// Hold off or nothing owed.
func TestHold(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	r, w := osPipe(t)
	h := newPipeEnd()
	if _, err := l.Watch(int(r.Fd()), Readable, h); err != nil {
		t.Fatal(err)
	}
	if l.holdReply() {
		t.Fatal("held with Hold off")
	}
	l.Hold(true)
	if l.holdReply() {
		t.Fatal("held with nothing owed")
	}
	h.owes.Store(true)
	for i := range maxMissed {
		start := time.Now()
		if l.holdReply() {
			t.Fatalf("hold %d ended with nothing to read", i+1)
		}
		if took := time.Since(start); took < holdFor {
			t.Fatalf("hold %d gave up after %v; want %v", i+1, took, holdFor)
		}
	}
	if l.holdOff.IsZero() || l.missed != 0 {
		t.Fatalf("after %d missed holds: holdOff %v, missed %d; want holding off", maxMissed, l.holdOff, l.missed)
	}
	w.Write([]byte("+OK\r\n"))
	if l.holdReply() {
		t.Error("held while holding off")
	}
	l.holdOff = time.Time{}
	if !l.holdReply() {
		t.Fatal("a reply to read did not end the hold")
	}
	if ev := within(t, h.ready, "the handler after the hold"); ev != Readable {
		t.Errorf("the hold called Ready(%v); want Readable", ev)
	}
	l.Hold(false)
	if l.holdReply() {
		t.Error("held after Hold(false)")
	}
}

// A loop whose user is owed work back from another goroutine (OwedIn)
// holds for the wake-up that brings it, as for a descriptor's reply: the
// hold ends when the eventfd is written, drains it, and gives up after
// holdFor when nothing comes; a wake-up asked for already ends it at once.
func TestHoldForWorkOwedIn(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := newPipeEnd()
	l.owedIn = append(l.owedIn, h) // as OwedIn's posted function does
	l.Hold(true)
	if l.holdReply() {
		t.Fatal("held with nothing owed")
	}
	h.owes.Store(true)
	l.signal() // another loop landing the work
	start := time.Now()
	if !l.holdReply() {
		t.Fatal("the wake-up did not end the hold")
	}
	if took := time.Since(start); took >= holdFor {
		t.Errorf("the hold took %v with the wake-up written; want at once", took)
	}
	start = time.Now()
	if l.holdReply() {
		t.Fatal("held past a wake-up already taken: the eventfd was not drained")
	}
	if took := time.Since(start); took < holdFor {
		t.Errorf("the hold gave up after %v; want %v", took, holdFor)
	}
	l.Wake() // asked before the hold: the turn must run, not wait
	start = time.Now()
	if l.holdReply() || time.Since(start) >= holdFor {
		t.Error("held although a turn was asked for")
	}
}

// A wake-up asked for by many goroutines at once while the loop sleeps,
// wakes, or runs its turn is never lost.
func TestWakeIsNeverLost(t *testing.T) {
	l := running(t)
	var asked, seen atomic.Int64
	turned := make(chan struct{}, 1)
	l.OnTurn(func() {
		seen.Store(asked.Load())
		select {
		case turned <- struct{}{}:
		default:
		}
	})
	for range 2000 {
		want := asked.Add(1)
		l.Wake()
		for seen.Load() < want {
			select {
			case <-turned:
			case <-time.After(5 * time.Second):
				t.Fatalf("wake-up %d lost: the loop saw %d", want, seen.Load())
			}
		}
	}
}

// A loop closed before its goroutine called Run (a program that failed to
// start) has nothing to run: Run returns nil, which its caller would
// otherwise log as a failure; a second Run of a running loop is a mistake.
func TestRunAfterClose(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := l.Run(); err != nil {
		t.Errorf("Run after Close: %v; want nil", err)
	}
	l = running(t)
	done := make(chan struct{}) // Run has begun once a posted function ran
	l.Post(func() { close(done) })
	within(t, done, "a posted function")
	if err := l.Run(); err == nil {
		t.Error("Run of a running loop: nil; want an error")
	}
}

// Close racing a Run that has not begun (a sidecar failing to start) ends
// the loop once: a second end would close descriptor numbers that the
// next loop may have been given, and that loop's Run would then fail.
func TestCloseRacingRun(t *testing.T) {
	for i := range 300 {
		l, err := New()
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { ran <- l.Run() }()
		if i%2 == 0 {
			runtime.Gosched()
		}
		l.Close()
		if err := <-ran; err != nil {
			t.Fatalf("round %d: Run: %v", i, err)
		}
	}
}
