package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
)

// submitted asks a store through Submit and waits for done: the event
// loop's way, made a Store again so that the tables written for Decide run
// through it.
type submitted struct{ engine.Submitter }

func (s submitted) Decide(_ context.Context, reqs []engine.Request, res []engine.Result) error {
	landed := make(chan error, 1)
	s.Submit(reqs, res, func(err error) { landed <- err })
	return <-landed
}

// chain is the upstream chain as app builds it, on a memory store in
// Redis's place: guard, deny cache, batcher.
func chain(t *testing.T, store engine.Store, now func() time.Time) *engine.Guard {
	t.Helper()
	b := newBatcher(t, store, 0, 0)
	d, err := engine.NewDenyCache(engine.DenyCacheConfig{Store: b, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	g, err := engine.NewGuard(engine.GuardConfig{Store: d, Local: openMemory(t, now), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The conformance tables give the same decisions through Submit as
// through Decide, across the whole chain.
func TestChainConformanceThroughSubmit(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, now func() time.Time) engine.Store {
		return submitted{chain(t, openMemory(t, now), now)}
	})
}

// With the store down, a submitted batch is answered by each request's
// failure mode, and the breaker opens as it does for Decide.
func TestGuardSubmitFailureModes(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	f := &flakyStore{inner: openMemory(t, clock.Now)}
	f.set(true)
	b := newBatcher(t, f, 0, 0)
	g, err := engine.NewGuard(engine.GuardConfig{Store: b, Local: openMemory(t, clock.Now), Threshold: 2, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	limit := engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Hour}
	reqs := []engine.Request{
		{Key: "a", Limit: limit, Cost: 1, OnFailure: engine.FailOpen},
		{Key: "b", Limit: limit, Cost: 1, OnFailure: engine.FailClosed},
		{Key: "c", Limit: limit, Cost: 2},
	}
	want := []engine.Path{engine.PathFailOpen, engine.PathFailClosed, engine.PathLocal}
	for round := range 3 {
		res := make([]engine.Result, len(reqs))
		if err := (submitted{g}).Decide(context.Background(), reqs, res); err != nil {
			t.Fatalf("round %d: %v; a guard answers even when the store is down", round, err)
		}
		for i, p := range want {
			if res[i].Path != p {
				t.Errorf("round %d, request %d: %+v; want path %v", round, i, res[i], p)
			}
		}
	}
	if calls := f.count(); calls != 2 {
		t.Errorf("the failing store was asked %d times; want 2, then the breaker opens", calls)
	}
	if !g.Stats().BreakerOpen {
		t.Error("breaker closed after two failed round trips")
	}
}
