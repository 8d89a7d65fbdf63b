package enginetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// leaseModel is the concurrency limiter as simply as it can be said: each
// key's lease ids and their ends; a lease counts while now is before its
// end.
type leaseModel map[string]map[string]time.Time

func (m leaseModel) live(key string, now time.Time) map[string]time.Time {
	ids := m[key]
	if ids == nil {
		ids = map[string]time.Time{}
		m[key] = ids
	}
	for id, end := range ids {
		if !now.Before(end) {
			delete(ids, id)
		}
	}
	return ids
}

func (m leaseModel) acquire(r engine.LeaseRequest, now time.Time) engine.LeaseDecision {
	ids := m.live(r.Key, now)
	d := engine.LeaseDecision{Limit: r.Limit, ID: r.ID}
	_, held := ids[r.ID]
	switch {
	case held || int64(len(ids)) < r.Limit:
		d.Allowed, d.Renewed = true, held
		ids[r.ID] = now.Add(r.TTL)
	default:
		var oldest time.Time
		for _, end := range ids {
			if oldest.IsZero() || end.Before(oldest) {
				oldest = end
			}
		}
		d.RetryAfter = oldest.Sub(now)
	}
	d.Remaining = max(r.Limit-int64(len(ids)), 0)
	return d
}

func (m leaseModel) release(key, id string, now time.Time) bool {
	ids := m.live(key, now)
	_, held := ids[id]
	delete(ids, id)
	return held
}

// LeaseProperty runs random sequences of acquires, renewals, releases and
// clock steps on a few keys, with limits that change between calls, against
// the Leaser that open returns (its clock pinned to clock), and checks every
// reply against a model of the semantics. keyPrefix keeps runs apart on a
// shared backend.
func LeaseProperty(t *testing.T, seed uint64, steps int, keyPrefix string, open func(clock *Clock) engine.Leaser) {
	t.Helper()
	clock := NewClock(Epoch)
	l := open(clock)
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	model := leaseModel{}
	ctx := context.Background()
	keys := []string{keyPrefix + "a", keyPrefix + "b", keyPrefix + "c"}
	ids := []string{"i1", "i2", "i3", "i4", "i5", "i6"}
	for step := range steps {
		key, id := keys[rng.IntN(len(keys))], ids[rng.IntN(len(ids))]
		now := clock.Now()
		where := fmt.Sprintf("seed %d step %d", seed, step)
		switch op := rng.IntN(10); {
		case op < 5:
			r := engine.LeaseRequest{Key: key, ID: id, Limit: int64(1 + rng.IntN(4)),
				TTL: time.Duration(1+rng.IntN(5000)) * time.Millisecond}
			if rng.IntN(20) == 0 {
				r.TTL += time.Duration(rng.IntN(1000)) * time.Microsecond
			}
			got, err := l.Acquire(ctx, r)
			if err != nil {
				t.Fatalf("%s: Acquire(%+v): %v", where, r, err)
			}
			want := model.acquire(r, now)
			if got != want {
				t.Fatalf("%s: Acquire(%s %s limit %d ttl %v):\n got %+v\nwant %+v", where, key, id, r.Limit, r.TTL, got, want)
			}
		case op < 8:
			got, err := l.Release(ctx, key, id)
			if err != nil {
				t.Fatalf("%s: Release: %v", where, err)
			}
			if want := model.release(key, id, now); got != want {
				t.Fatalf("%s: Release(%s, %s) = %v, want %v", where, key, id, got, want)
			}
		default:
			clock.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
		}
	}
}
