package upstream_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/upstream"
)

// deadlineLimit is a limit no test here reaches: only a failure mode
// refuses, and Redis's count is the number of charges.
var deadlineLimit = engine.Limit{Algorithm: engine.FixedWindow, Rate: 1_000_000, Period: time.Hour}

// newChain is the sidecar's chain over s: the batcher, the guard with
// failure mode mode and a memory store for "local", each round trip due
// within timeout. Its breaker never
// opens, so that every request of a pause goes to Redis and is answered
// by its failure mode at its deadline.
func newChain(t *testing.T, s *upstream.Store, mode engine.FailureMode, timeout time.Duration) *chain.Chain {
	t.Helper()
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := chain.New(chain.Config{Store: s, Local: mem, Default: mode, Timeout: timeout, Threshold: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// decideOne decides one request on key through c.
func decideOne(c engine.Store, key string, peek bool) engine.Result {
	res := make([]engine.Result, 1)
	err := engine.Wait(c, []engine.Request{{Key: key, Limit: deadlineLimit, Cost: 1, Peek: peek}}, res, time.Time{})
	if err != nil {
		return engine.Result{Err: err}
	}
	return res[0]
}

// charged is how many charges Redis holds for key: read with a peek on
// the store itself, within a generous deadline.
func charged(t *testing.T, s *upstream.Store, key string) int64 {
	t.Helper()
	res := make([]engine.Result, 1)
	if err := engine.Wait(s, []engine.Request{{Key: key, Limit: deadlineLimit, Cost: 1, Peek: true}}, res, time.Now().Add(5*time.Second)); err != nil || res[0].Err != nil {
		t.Fatalf("peek %s: %v %v", key, err, res[0].Err)
	}
	// A peek replies what a take would: Remaining after one more.
	return deadlineLimit.Rate - res[0].Decision.Remaining - 1
}

// With Redis paused (SIGSTOP) while no call runs, every request of the
// pause is answered by its failure mode at its deadline, and once Redis
// resumes (SIGCONT) and runs the calls written to it meanwhile, none of
// them charges: each started after its deadline, and said so (late).
// In each failure mode, on one Redis and on a Cluster whose every master
// pauses (each master's call carries its own master's clock); the counts
// are read from Redis afterwards.
func TestPausedRedisChargesNothingAfterTheDeadline(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		for _, mode := range []engine.FailureMode{engine.FailOpen, engine.FailClosed, engine.FailLocal} {
			t.Run(mode.String(), func(t *testing.T) { pauseAndCount(t, top, mode, nil) })
		}
	})
}

// pauseAndCount pauses top's servers while callers decide through a
// chain in failure mode mode, then checks that nothing was charged.
// setup, if set, prepares the store (an event loop, UseLoop).
func pauseAndCount(t *testing.T, top topology, mode engine.FailureMode, setup func(*upstream.Store)) {
	s := newStore(t, upstream.Config{Client: top.client})
	if setup != nil {
		setup(s)
	}
	c := newChain(t, s, mode, 100*time.Millisecond)
	const callers, each = 6, 3
	keys := make([]string, callers)
	for g := range keys {
		keys[g] = fmt.Sprintf("paused:%s:%s:%d", top.name, mode, g)
		// Warm: the script loaded, the clock estimated, one charge.
		if r := decideOne(c, keys[g], false); r.Err != nil || !r.Decision.Allowed {
			t.Fatalf("before the pause: %+v", r)
		}
	}
	signal := func(sig syscall.Signal) {
		for _, srv := range top.servers {
			if err := srv.Signal(sig); err != nil {
				t.Error(err)
			}
		}
	}
	signal(syscall.SIGSTOP)
	paused := true
	defer func() {
		if paused {
			signal(syscall.SIGCONT)
		}
	}()
	// Callers in parallel, so that calls queue on one connection
	// behind each other, as under load.
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r := decideOne(c, keys[g], false)
				if r.Err != nil || r.Decision.Allowed != (mode != engine.FailClosed) {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of %d requests during the pause were not answered by the failure mode %s", n, callers*each, mode)
	}
	// A call that Redis starts within the clock's margin after its
	// deadline may still charge (see internal/redispipe/clock.go): the last
	// answer must be further back than that when Redis resumes.
	time.Sleep(50 * time.Millisecond)
	signal(syscall.SIGCONT)
	paused = false
	// The drained connections read Redis's replies: wait until
	// their count has held for a while.
	counted := func() uint64 { return s.LateCalls() + s.OverdueCalls() }
	for limit, last, held := time.Now().Add(10*time.Second), counted(), 0; time.Now().Before(limit) && (last == 0 || held < 20); held++ {
		time.Sleep(10 * time.Millisecond)
		if n := counted(); n != last {
			last, held = n, 0
		}
	}
	if s.LateCalls() == 0 {
		t.Errorf("no call counted late after the pause")
	}
	for _, k := range keys {
		if n := charged(t, s, k); n != 1 {
			t.Errorf("%s: Redis holds %d charges; want 1, the one before the pause", k, n)
		}
	}
	if n := s.OverdueCalls(); n != 0 {
		t.Errorf("%d calls ran after their callers were answered; want 0", n)
	}
	t.Logf("%s: %d calls late, %d overdue", mode, s.LateCalls(), s.OverdueCalls())
}

// The guard the other way: a healthy Redis at full load (many callers at
// once for a few seconds, batches queued behind each other on the
// connection) skips no call as late, and charges every decision.
func TestHealthyRedisSkipsNothing(t *testing.T) {
	_, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client})
	// A deadline a loaded machine cannot overrun: on this machine, under
	// -race, Redis sometimes starts a call more than 100ms after its
	// caller queued, and then rightly skips it.
	c := newChain(t, s, engine.FailClosed, 2*time.Second)
	const callers = 64
	var decided, failed atomic.Int64
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("healthy:%d", g%16)
			for time.Now().Before(stop) {
				if r := decideOne(c, key, false); r.Err != nil || !r.Decision.Allowed {
					failed.Add(1)
					continue
				}
				decided.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := s.LateCalls(); n != 0 {
		t.Errorf("%d calls skipped as late by a healthy Redis; want 0", n)
	}
	var total int64
	for g := range 16 {
		total += charged(t, s, fmt.Sprintf("healthy:%d", g))
	}
	t.Logf("%d decisions by Redis, %d by the failure mode (deadline missed on this machine), %d charges", decided.Load(), failed.Load(), total)
	// A decision the failure mode made had its call skipped or, started
	// in time, charged: Redis holds every decision it made, and at most
	// the failure mode's on top.
	if total < decided.Load() || total > decided.Load()+failed.Load() {
		t.Errorf("Redis holds %d charges for %d decisions it made (and %d by the failure mode)", total, decided.Load(), failed.Load())
	}
}
