package chain_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
)

// flakyStore fails every call while down, counting the calls it gets.
type flakyStore struct {
	inner engine.Store
	mu    sync.Mutex
	down  bool // guarded by mu
	calls int  // guarded by mu
}

var errDown = errors.New("upstream: dial tcp 127.0.0.1:6379: connection refused")

func (f *flakyStore) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	f.mu.Lock()
	f.calls++
	down := f.down
	f.mu.Unlock()
	if down {
		done(errDown)
		return
	}
	f.inner.Submit(reqs, res, deadline, done)
}

func (f *flakyStore) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	return f.inner.Reset(ctx, key, limits...)
}

func (f *flakyStore) set(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

func (f *flakyStore) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

type breakerEvent struct {
	open  bool
	cause error
}

func newGuard(t *testing.T, clock *enginetest.Clock) (*chain.Guard, *flakyStore, *[]breakerEvent) {
	t.Helper()
	f := &flakyStore{inner: openMemory(t, clock.Now)}
	var (
		mu     sync.Mutex
		events []breakerEvent // guarded by mu; read once the test's goroutines are done
	)
	g, err := chain.NewGuard(chain.GuardConfig{
		Store: f, Local: openMemory(t, clock.Now), Threshold: 2, ProbeEvery: time.Second, Now: clock.Now,
		OnBreaker: func(open bool, cause error) {
			mu.Lock()
			events = append(events, breakerEvent{open, cause})
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, f, &events
}

func TestGuardFailureModes(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g, f, _ := newGuard(t, clock)
	f.set(true)
	limit := engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Hour}
	reqs := []engine.Request{
		{Key: "a", Limit: limit, Cost: 1, OnFailure: engine.FailOpen},
		{Key: "b", Limit: limit, Cost: 1, OnFailure: engine.FailClosed},
		{Key: "c", Limit: limit, Cost: 2, OnFailure: engine.FailLocal},
		{Key: "c", Limit: limit, Cost: 1}, // the default: local, since Local is set
		{Key: "", Limit: limit, Cost: 1, OnFailure: engine.FailOpen},
	}
	res := make([]engine.Result, len(reqs))
	if err := engine.Wait(g, reqs, res, time.Time{}); err != nil {
		t.Fatalf("Submit = %v; a guard answers even when the store is down", err)
	}
	want := []struct {
		path    engine.Path
		allowed bool
	}{
		{engine.PathFailOpen, true},
		{engine.PathFailClosed, false},
		{engine.PathLocal, true},
		{engine.PathLocal, false}, // the local store enforces the limit of 2
	}
	for i, w := range want {
		if res[i].Err != nil || res[i].Path != w.path || res[i].Decision.Allowed != w.allowed {
			t.Errorf("request %d: %+v; want path %v, allowed %v", i, res[i], w.path, w.allowed)
		}
	}
	if !errors.Is(res[4].Err, engine.ErrInvalid) {
		t.Errorf("invalid request during an outage: %+v; want its validation error", res[4])
	}
	if res[1].Decision.RetryAfter != time.Second {
		t.Errorf("fail-closed retry-after %v; want the probe interval", res[1].Decision.RetryAfter)
	}
}

func TestGuardBreakerOpensProbesAndCloses(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g, f, events := newGuard(t, clock)
	req := []engine.Request{{Key: "k", Limit: perHour, Cost: 1}}
	res := make([]engine.Result, 1)
	decide := func() engine.Result {
		t.Helper()
		if err := engine.Wait(g, req, res, time.Time{}); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}

	f.set(true)
	decide()
	decide() // the second failure in a row opens the breaker
	if !g.Stats().BreakerOpen || len(*events) != 1 || !(*events)[0].open || !errors.Is((*events)[0].cause, errDown) {
		t.Fatalf("after 2 failures: stats %+v, events %+v; want the breaker open", g.Stats(), *events)
	}
	calls := f.count()
	for range 10 {
		if r := decide(); r.Path != engine.PathLocal {
			t.Fatalf("breaker open: path %v; want the local fallback", r.Path)
		}
	}
	if f.count() != calls {
		t.Fatalf("%d calls reached the store while the breaker was open", f.count()-calls)
	}

	clock.Advance(time.Second) // time to probe; the store is still down
	decide()
	decide()
	if f.count() != calls+1 {
		t.Fatalf("%d probes; want exactly 1 per interval", f.count()-calls)
	}

	f.set(false)
	clock.Advance(time.Second)
	if r := decide(); r.Path != engine.PathStore || !r.Decision.Allowed {
		t.Fatalf("probe after recovery: %+v; want the store to decide", r)
	}
	if g.Stats().BreakerOpen || len(*events) != 2 || (*events)[1].open {
		t.Fatalf("after recovery: stats %+v, events %+v; want the breaker closed", g.Stats(), *events)
	}
	if r := decide(); r.Path != engine.PathStore {
		t.Fatalf("after recovery: path %v; want store", r.Path)
	}
}

func TestGuardConcurrentOutage(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g, f, _ := newGuard(t, clock)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]engine.Result, 1)
			for j := range 200 {
				if i == 0 && j%50 == 0 {
					f.set(j%100 == 0)
					clock.Advance(300 * time.Millisecond)
				}
				req := []engine.Request{{Key: "shared", Limit: perHour, Cost: 0}}
				if err := engine.Wait(g, req, res, time.Time{}); err != nil || res[0].Err != nil {
					t.Errorf("Submit: %v %v", err, res[0].Err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestGuardConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, now func() time.Time) engine.Store {
		g, err := chain.NewGuard(chain.GuardConfig{Store: openMemory(t, now)})
		if err != nil {
			t.Fatal(err)
		}
		return g
	})
}

// With the breaker open, Reset does not wait on the failing store: it
// forgets the key's remembered refusal and local count, and says the
// shared state was not reset.
func TestGuardResetWhileOpen(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	f := &flakyStore{inner: openMemory(t, clock.Now)}
	deny, err := chain.NewDenyCache(chain.DenyCacheConfig{Store: f, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	local := openMemory(t, clock.Now)
	g, err := chain.NewGuard(chain.GuardConfig{Store: deny, Local: local, Threshold: 1, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	one := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}
	decideKey := func(key string) engine.Result {
		res := make([]engine.Result, 1)
		if err := engine.Wait(g, []engine.Request{{Key: key, Limit: one, Cost: 1}}, res, time.Time{}); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	decide := func() engine.Result { return decideKey("k") }
	decide()
	if r := decide(); r.Decision.Allowed {
		t.Fatal("second request allowed at 1 an hour")
	}
	if deny.Stats().Entries != 1 {
		t.Fatal("the refusal was not remembered")
	}
	f.set(true)
	decideKey("other") // fails: the breaker opens, the local store decides
	if !g.Stats().BreakerOpen {
		t.Fatal("breaker still closed")
	}
	before := f.count()
	err = g.Reset(context.Background(), "k")
	if !errors.Is(err, chain.ErrNotReset) {
		t.Fatalf("Reset while open = %v; want ErrNotReset", err)
	}
	if f.count() != before {
		t.Error("Reset asked the failing store")
	}
	if n := deny.Stats().Entries; n != 0 {
		t.Errorf("%d refusals still remembered after Reset", n)
	}
	if r := decide(); !r.Decision.Allowed || r.Path != engine.PathLocal {
		t.Errorf("after Reset, the local fallback answered %+v; want the key fresh", r)
	}
}

// A failed health check opens the breaker at once; a passing one closes it.
func TestGuardHealth(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g, _, events := newGuard(t, clock)
	g.Health(errDown)
	if !g.Stats().BreakerOpen {
		t.Fatal("a failed check left the breaker closed")
	}
	g.Health(nil)
	if st := g.Stats(); st.BreakerOpen || !st.LastOutcome.Equal(clock.Now()) {
		t.Fatalf("after a passing check: %+v", st)
	}
	if len(*events) != 2 || !(*events)[0].open || (*events)[1].open {
		t.Errorf("breaker events %+v; want open, then closed", *events)
	}
}

// unreplicatedStore decides, then fails the batch as the Redis store does
// when the replicas did not acknowledge a durable batch's charges.
type unreplicatedStore struct{ inner engine.Store }

func (u unreplicatedStore) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	u.inner.Submit(reqs, res, deadline, func(error) { done(fmt.Errorf("upstream: WAIT 1: %w", engine.ErrNotDurable)) })
}

func (u unreplicatedStore) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	return u.inner.Reset(ctx, key, limits...)
}

// A durable batch whose replicas did not acknowledge gets its failure
// modes' answers and is counted, but never opens the breaker: the store
// answered, and the requests that are not durable must keep reaching it.
func TestGuardNotDurable(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g, err := chain.NewGuard(chain.GuardConfig{Store: unreplicatedStore{openMemory(t, clock.Now)},
		Local: openMemory(t, clock.Now), Threshold: 1, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	limit := engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Hour}
	for round := range 3 {
		reqs := []engine.Request{
			{Key: "a", Limit: limit, Cost: 1, OnFailure: engine.FailClosed, Durable: engine.DurableReplica},
			{Key: "b", Limit: limit, Cost: 1, OnFailure: engine.FailOpen, Durable: engine.DurableReplica},
		}
		res := make([]engine.Result, len(reqs))
		if err := engine.Wait(g, reqs, res, time.Time{}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if res[0].Path != engine.PathFailClosed || res[0].Decision.Allowed {
			t.Errorf("round %d: deny: %+v, want refused by fail_closed", round, res[0])
		}
		if res[1].Path != engine.PathFailOpen || !res[1].Decision.Allowed {
			t.Errorf("round %d: allow: %+v, want allowed by fail_open", round, res[1])
		}
	}
	st := g.Stats()
	if st.BreakerOpen {
		t.Error("the breaker opened on unacknowledged replicas")
	}
	if st.Unreplicated != 6 || st.Fallbacks != 6 {
		t.Errorf("Unreplicated %d, Fallbacks %d, want 6 and 6", st.Unreplicated, st.Fallbacks)
	}
}
