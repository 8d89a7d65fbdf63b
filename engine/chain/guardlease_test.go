package chain_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

// leaseFlaky is a Leaser that fails while down.
type leaseFlaky struct {
	inner engine.Leaser
	mu    sync.Mutex
	down  bool // guarded by mu
}

func (f *leaseFlaky) isDown() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.down }

func (f *leaseFlaky) Acquire(ctx context.Context, r engine.LeaseRequest) (engine.LeaseDecision, error) {
	if f.isDown() {
		return engine.LeaseDecision{}, errDown
	}
	return f.inner.Acquire(ctx, r)
}

func (f *leaseFlaky) Release(ctx context.Context, key, id string) (bool, error) {
	if f.isDown() {
		return false, errDown
	}
	return f.inner.Release(ctx, key, id)
}

// With the shared store down, each failure mode answers; a lease taken
// from the local store is released there, and once the shared store is
// back, a lease it grants replaces the local one.
func TestGuardLeases(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	shared, _ := memstore.New(memstore.Config{Now: clock.Now})
	local, _ := memstore.New(memstore.Config{Now: clock.Now})
	flaky := &leaseFlaky{inner: shared}
	g, err := chain.NewGuard(chain.GuardConfig{Store: &flakyStore{inner: shared}, Local: local, Leaser: flaky,
		Threshold: 1000, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := func(id string, mode engine.FailureMode) engine.LeaseRequest {
		return engine.LeaseRequest{Key: "k", Limit: 1, TTL: time.Minute, ID: id, OnFailure: mode}
	}
	d, err := g.Acquire(ctx, req("a", 0))
	if err != nil || !d.Allowed || d.Path != engine.PathStore {
		t.Fatalf("up: %+v %v", d, err)
	}
	if held, err := g.Release(ctx, "k", "a"); !held || err != nil {
		t.Fatalf("release while up: %v %v", held, err)
	}

	flaky.mu.Lock()
	flaky.down = true
	flaky.mu.Unlock()
	if d, _ := g.Acquire(ctx, req("o", engine.FailOpen)); !d.Allowed || d.Path != engine.PathFailOpen {
		t.Errorf("fail open: %+v", d)
	}
	if d, _ := g.Acquire(ctx, req("c", engine.FailClosed)); d.Allowed || d.Path != engine.PathFailClosed {
		t.Errorf("fail closed: %+v", d)
	}
	if d, _ := g.Acquire(ctx, req("l1", engine.FailLocal)); !d.Allowed || d.Path != engine.PathLocal {
		t.Errorf("local: %+v", d)
	}
	if d, _ := g.Acquire(ctx, req("l2", engine.FailLocal)); d.Allowed || d.Path != engine.PathLocal {
		t.Errorf("local, limit reached: %+v", d)
	}
	// Released where it came from, with the shared store still down.
	if held, err := g.Release(ctx, "k", "l1"); !held || err != nil {
		t.Errorf("release of a local lease: %v %v", held, err)
	}
	if held, err := g.Release(ctx, "k", "l1"); held || err == nil || !errors.Is(err, chain.ErrNotReleased) {
		t.Errorf("second release while down: %v %v, want ErrNotReleased", held, err)
	}
	if d, _ := g.Acquire(ctx, req("l3", engine.FailLocal)); !d.Allowed {
		t.Errorf("local slot not freed: %+v", d)
	}

	// Back: the shared store grants l3, and the local lease goes.
	flaky.mu.Lock()
	flaky.down = false
	flaky.mu.Unlock()
	if d, _ := g.Acquire(ctx, req("l3", 0)); !d.Allowed || d.Path != engine.PathStore {
		t.Errorf("up again: %+v", d)
	}
	if n := local.Leases(); n != 0 {
		t.Errorf("the local store still holds %d leases", n)
	}
	if held, _ := g.Release(ctx, "k", "l3"); !held {
		t.Error("l3 not released from the shared store")
	}
	if d, _ := shared.Acquire(ctx, req("z", 0)); !d.Allowed {
		t.Errorf("shared slot still held: %+v", d)
	}
}
