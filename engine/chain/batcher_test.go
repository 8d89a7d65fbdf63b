package chain_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

// gateStore is a hand-written fake: it records each batch it is given and,
// while gated, holds every batch until the test releases it.
type gateStore struct {
	inner engine.Store
	mu    sync.Mutex
	sizes []int // guarded by mu
	gate  chan struct{}
	open  sync.Once
	err   error
}

// heldGate gives g a gate that holds every batch until release.
func (g *gateStore) heldGate() *gateStore {
	g.gate = make(chan struct{})
	return g
}

// release lets every held batch, and every later one, through. A test
// defers it too, so that one failing with batches held ends with its
// message: the batcher's Close, a Cleanup, waits for them.
func (g *gateStore) release() { g.open.Do(func() { close(g.gate) }) }

func (g *gateStore) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(reqs))
	g.mu.Unlock()
	pass := func() {
		if g.err != nil {
			done(g.err)
			return
		}
		g.inner.Submit(reqs, res, deadline, done)
	}
	if g.gate == nil {
		pass()
		return
	}
	go func() { // held, as a round trip at Redis is: Submit returns
		<-g.gate
		pass()
	}()
}

func (g *gateStore) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	return g.inner.Reset(ctx, key, limits...)
}

func (g *gateStore) batchSizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}

// heldBatches waits until every goroutine of the test's bubble is blocked
// (the held batches at the gate, their callers waiting for results) and
// says how many batches reached the store: no polling, and a batch that
// never comes fails at once instead of after a timeout.
func (g *gateStore) heldBatches() []int {
	synctest.Wait()
	return g.batchSizes()
}

// newBatcher gives its batcher a deadline no test of gathering and
// handing over reaches: under the race detector on a loaded machine, 40
// callers queued behind a memory store can wait out the default 100ms,
// and ErrQueuedTooLong is not what these tests are about (the deadline's
// own tests set theirs).
func newBatcher(t *testing.T, store engine.Store, maxBatch, inFlight int) *chain.Batcher {
	t.Helper()
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: store, MaxBatch: maxBatch, MaxInFlight: inFlight, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

var perHour = engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Hour}

func TestBatcherGathersWhileABatchIsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := enginetest.NewClock(enginetest.Epoch)
		g := (&gateStore{inner: openMemory(t, clock.Now)}).heldGate()
		defer g.release()
		b := newBatcher(t, g, 0, 1)

		var wg sync.WaitGroup
		decide := func(key string) {
			defer wg.Done()
			res := make([]engine.Result, 1)
			if err := engine.Wait(b, []engine.Request{{Key: key, Limit: perHour, Cost: 1}}, res, time.Time{}); err != nil || !res[0].Decision.Allowed {
				t.Errorf("Submit(%s) = %v, %+v", key, err, res[0])
			}
		}
		wg.Add(1)
		go decide("first")
		if got := g.heldBatches(); len(got) != 1 {
			t.Fatalf("batches at the store %v; want the first one, held", got)
		}
		for range 10 {
			wg.Add(1)
			go decide("later")
		}
		// The ten queue up behind the held batch; then release everything.
		synctest.Wait()
		if q := b.Queued(); q != 10 {
			t.Fatalf("%d calls queued behind the held batch; want 10", q)
		}
		g.release()
		wg.Wait()
		if got := g.batchSizes(); len(got) != 2 || got[0] != 1 || got[1] != 10 {
			t.Fatalf("batch sizes %v; want [1 10]: the ten gathered while the first was in flight", got)
		}
		if s := b.Stats(); s.Batches != 2 || s.Decisions != 11 {
			t.Fatalf("stats %+v; want 2 batches of 11 decisions", s)
		}
	})
}

// Submit never waits: with a batch held at the store, further Submits
// return at once and gather into the next batch, and each done runs once
// its results are in.
func TestBatcherSubmitDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := enginetest.NewClock(enginetest.Epoch)
		g := (&gateStore{inner: openMemory(t, clock.Now)}).heldGate()
		defer g.release()
		b := newBatcher(t, g, 0, 1)
		results := make(chan engine.Result, 11)
		submit := func(key string) {
			res := make([]engine.Result, 1)
			b.Submit([]engine.Request{{Key: key, Limit: perHour, Cost: 1}}, res, time.Time{}, func(err error) {
				if err != nil {
					t.Error(err)
				}
				results <- res[0]
			})
		}
		submit("first")
		if got := g.heldBatches(); len(got) != 1 {
			t.Fatalf("batches at the store %v; want the first one, held", got)
		}
		for range 10 {
			submit("later") // returns although the round trip is held
		}
		if q := b.Queued(); q != 10 {
			t.Fatalf("%d calls queued behind the held batch; want 10", q)
		}
		synctest.Wait() // anything not held has landed by now
		select {
		case r := <-results:
			t.Fatalf("a result came in while the store held the batch: %+v", r)
		default:
		}
		g.release()
		for i := range 11 {
			if r := <-results; !r.Decision.Allowed {
				t.Errorf("result %d refused: %+v", i, r)
			}
		}
		if got := g.batchSizes(); len(got) != 2 || got[0] != 1 || got[1] != 10 {
			t.Fatalf("batch sizes %v; want [1 10]", got)
		}
	})
}

func TestBatcherSubmitAfterClose(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: openMemory(t, clock.Now)})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	var got error
	b.Submit([]engine.Request{{Key: "k", Limit: perHour, Cost: 1}}, make([]engine.Result, 1), time.Time{}, func(err error) { got = err })
	if !errors.Is(got, chain.ErrClosed) {
		t.Fatalf("Submit after Close: done(%v); want ErrClosed", got)
	}
}

func TestBatcherKeepsEachCallersOrder(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	b := newBatcher(t, openMemory(t, clock.Now), 64, 4)
	limit := engine.Limit{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Hour}
	enginetest.ManyCallers(t, b, limit, 20, 1, func(int) int { return 100 })
}

func TestBatcherSendsAnOversizedPipelineWhole(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g := &gateStore{inner: openMemory(t, clock.Now)}
	b := newBatcher(t, g, 8, 1)
	reqs := make([]engine.Request, 20)
	for i := range reqs {
		reqs[i] = engine.Request{Key: "big", Limit: perHour, Cost: 1}
	}
	if err := engine.Wait(b, reqs, make([]engine.Result, 20), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := g.batchSizes(); len(got) != 1 || got[0] != 20 {
		t.Fatalf("batch sizes %v; want one batch of 20", got)
	}
}

func TestBatcherReportsTheBatchError(t *testing.T) {
	boom := errors.New("upstream: connection refused")
	g := &gateStore{err: boom}
	b := newBatcher(t, g, 0, 2)
	err := engine.Wait(b, []engine.Request{{Key: "k", Limit: perHour, Cost: 1}}, make([]engine.Result, 1), time.Time{})
	if !errors.Is(err, boom) {
		t.Fatalf("Submit = %v; want %v", err, boom)
	}
}

// OnBatch is told of each round trip by the batcher's own clock, with its
// size and its error.
func TestBatcherReportsEachBatch(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	type report struct {
		start time.Time
		size  int
		err   error
	}
	var got []report
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: openMemory(t, clock.Now), Now: clock.Now,
		OnBatch: func(start time.Time, size int, err error) { got = append(got, report{start, size, err}) }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	reqs := []engine.Request{{Key: "a", Limit: perHour, Cost: 1}, {Key: "b", Limit: perHour, Cost: 1}}
	if err := engine.Wait(b, reqs, make([]engine.Result, 2), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].start.Equal(clock.Now()) || got[0].size != 2 || got[0].err != nil {
		t.Fatalf("OnBatch told %+v; want one batch of 2 at %v", got, clock.Now())
	}
}

func TestBatcherAfterClose(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: openMemory(t, clock.Now)})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.Close() // idempotent
	err = engine.Wait(b, []engine.Request{{Key: "k", Limit: perHour, Cost: 1}}, make([]engine.Result, 1), time.Time{})
	if !errors.Is(err, chain.ErrClosed) {
		t.Fatalf("Submit after Close = %v; want ErrClosed", err)
	}
}

func TestBatcherConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, now func() time.Time) engine.Store {
		return newBatcher(t, openMemory(t, now), 0, 0)
	})
}

// BenchmarkBatcherSubmit is the batcher's own share: done bound once, as
// the service binds it, so that nothing but the batcher is measured.
func BenchmarkBatcherSubmit(b *testing.B) {
	s, _ := memstore.New(memstore.Config{})
	bt, _ := chain.NewBatcher(chain.BatcherConfig{Store: s})
	defer bt.Close()
	reqs := make([]engine.Request, 16)
	for i := range reqs {
		reqs[i] = engine.Request{Key: "bench", Limit: perHour, Cost: 0}
	}
	res := make([]engine.Result, len(reqs))
	landed := make(chan error, 1)
	done := func(err error) { landed <- err }
	b.ReportAllocs()
	for b.Loop() {
		bt.Submit(reqs, res, time.Time{}, done)
		if err := <-landed; err != nil {
			b.Fatal(err)
		}
	}
}

// Many callers with pipelines larger than MaxBatch, through few round
// trips at a time: every call must be decided (none stranded in the queue
// when a round trip lands), each in order.
func TestBatcherNeverStrandsACall(t *testing.T) {
	for _, inFlight := range []int{1, 2, 3} {
		clock := enginetest.NewClock(enginetest.Epoch)
		b := newBatcher(t, openMemory(t, clock.Now), 5, inFlight)
		var wg sync.WaitGroup
		for g := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					n := 1 + g%7
					reqs := make([]engine.Request, n)
					for i := range reqs {
						reqs[i] = engine.Request{Key: "strand", Limit: perHour, Cost: 0}
					}
					if g%2 == 0 { // half wait, half submit: neither may strand the other
						if err := engine.Wait(b, reqs, make([]engine.Result, n), time.Time{}); err != nil {
							t.Error(err)
							return
						}
						continue
					}
					landed := make(chan error, 1)
					b.Submit(reqs, make([]engine.Result, n), time.Time{}, func(err error) { landed <- err })
					if err := <-landed; err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("in flight %d: callers still waiting after 30s, %d calls queued: a call was stranded", inFlight, b.Queued())
		}
		if q := b.Queued(); q != 0 {
			t.Fatalf("%d calls left queued", q)
		}
	}
}

// stalledStore answers nothing until its caller's deadline: a paused Redis.
type stalledStore struct{ engine.Store }

func (stalledStore) Submit(_ []engine.Request, _ []engine.Result, deadline time.Time, done func(error)) {
	time.AfterFunc(time.Until(deadline), func() { done(context.DeadlineExceeded) })
}

// A call queued behind a stalled round trip is answered within its own
// Timeout, counted from when it was queued, not a Timeout after the round
// trip ahead of it gave up. The bubble's clock moves only when every
// goroutine waits, so the times are exact.
func TestBatcherTimeoutCountsTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 400 * time.Millisecond
		b, err := chain.NewBatcher(chain.BatcherConfig{Store: stalledStore{}, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		req := []engine.Request{{Key: "k", Limit: perHour, Cost: 1}}
		first := make(chan error, 1)
		b.Submit(req, make([]engine.Result, 1), time.Time{}, func(err error) { first <- err })
		time.Sleep(timeout / 2) // the first round trip is stalled at the store
		queued := time.Now()
		second := make(chan error, 1)
		b.Submit(req, make([]engine.Result, 1), time.Time{}, func(err error) { second <- err })
		if err := <-first; err == nil {
			t.Fatal("the stalled round trip succeeded")
		}
		err = <-second
		// Without the queue counted it would wait 1.5 × timeout.
		if waited := time.Since(queued); err == nil || waited != timeout {
			t.Errorf("the queued call was answered %v after it was queued, with %v; want an error after %v", waited, err, timeout)
		}
	})
}

// A caller's own deadline, sooner than Timeout, is the round trip's.
func TestBatcherKeepsTheCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := chain.NewBatcher(chain.BatcherConfig{Store: stalledStore{}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		start := time.Now()
		err = engine.Wait(b, []engine.Request{{Key: "k", Limit: perHour, Cost: 1}}, make([]engine.Result, 1), start.Add(50*time.Millisecond))
		if waited := time.Since(start); err == nil || waited != 50*time.Millisecond {
			t.Errorf("answered after %v with %v; want an error after the caller's 50ms", waited, err)
		}
	})
}
