package memstore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

func TestMemoryLeaseProperty(t *testing.T) {
	for seed := range uint64(20) {
		enginetest.LeaseProperty(t, seed, 2000, "", func(clock *enginetest.Clock) engine.Leaser {
			m, err := memstore.New(memstore.Config{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			return m
		})
	}
}

func TestLeaseValidation(t *testing.T) {
	m, _ := memstore.New(memstore.Config{})
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
	m, _ := memstore.New(memstore.Config{MaxKeys: 64, Now: clock.Now})
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
