package engine_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
)

func TestMemoryLeaseProperty(t *testing.T) {
	for seed := range uint64(20) {
		enginetest.LeaseProperty(t, seed, 2000, "", func(clock *enginetest.Clock) engine.Leaser {
			m, err := engine.NewMemoryStore(engine.MemoryConfig{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			return m
		})
	}
}

func TestLeaseValidation(t *testing.T) {
	m, _ := engine.NewMemoryStore(engine.MemoryConfig{})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		r    engine.LeaseRequest
		want string
	}{
		{"limit zero", engine.LeaseRequest{Key: "k", Limit: 0, TTL: time.Second, ID: "a"}, "invalid limit 0: must be between 1 and 100000"},
		{"ttl too short", engine.LeaseRequest{Key: "k", Limit: 1, TTL: time.Microsecond, ID: "a"}, "invalid lease_ttl 1µs: must be between 1ms and 3650d"},
		{"no id", engine.LeaseRequest{Key: "k", Limit: 1, TTL: time.Second}, `invalid lease_id "": must not be empty`},
		{"no key", engine.LeaseRequest{Limit: 1, TTL: time.Second, ID: "a"}, `invalid key "": must not be empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Acquire(ctx, tc.r)
			if err == nil || err.Error() != tc.want || !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("got %v, want %s", err, tc.want)
			}
		})
	}
	if _, err := m.Release(ctx, "k", ""); err == nil {
		t.Error("Release with an empty id: no error")
	}
}

// The memory store keeps at most as many leases as keys: past that, a set
// of another key is evicted, never the one being acquired.
func TestMemoryLeasesBounded(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	m, _ := engine.NewMemoryStore(engine.MemoryConfig{MaxKeys: 64, Now: clock.Now})
	ctx := context.Background()
	for i := range 1000 {
		d, err := m.Acquire(ctx, engine.LeaseRequest{Key: "k" + strconv.Itoa(i%300), Limit: 5, TTL: time.Hour, ID: strconv.Itoa(i)})
		if err != nil || !d.Allowed {
			t.Fatalf("acquire %d: %+v %v", i, d, err)
		}
		if n := m.Leases(); n > 64 {
			t.Fatalf("after %d acquires the store holds %d leases, more than 64", i+1, n)
		}
	}
	// Expired leases go first.
	clock.Advance(2 * time.Hour)
	d, _ := m.Acquire(ctx, engine.LeaseRequest{Key: "fresh", Limit: 1, TTL: time.Hour, ID: "x"})
	if !d.Allowed {
		t.Fatalf("refused after every lease expired: %+v", d)
	}
}

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
	shared, _ := engine.NewMemoryStore(engine.MemoryConfig{Now: clock.Now})
	local, _ := engine.NewMemoryStore(engine.MemoryConfig{Now: clock.Now})
	flaky := &leaseFlaky{inner: shared}
	g, err := engine.NewGuard(engine.GuardConfig{Store: &flakyStore{inner: shared}, Local: local, Leaser: flaky,
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
	if held, err := g.Release(ctx, "k", "l1"); held || err == nil || !errors.Is(err, engine.ErrNotReleased) {
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
