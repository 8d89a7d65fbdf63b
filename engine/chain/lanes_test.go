package chain_test

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
)

// byFirstByte routes a request to one of stores by its key's first byte,
// as a Cluster routes a key to the master of its slot: every request of
// a key to one store.
func byFirstByte(stores ...engine.Store) engine.Shards {
	return func(r *engine.Request) (engine.Store, error) {
		if r.Key == "" {
			return stores[0], nil
		}
		return stores[int(r.Key[0])%len(stores)], nil
	}
}

func newShardedBatcher(t *testing.T, shard engine.Shards, inFlight int) *chain.Batcher {
	t.Helper()
	// Store is not used with Shard set: each shard is its own store.
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: stalledStore{}, Shard: shard, MaxInFlight: inFlight, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// A shard's held round trip holds only its own callers: another shard's
// batches go and come back meanwhile, and a caller with requests on both
// is answered, in full, once the held one lands.
func TestBatcherLanesDoNotWaitForEachOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := enginetest.NewClock(enginetest.Epoch)
		slow := (&gateStore{inner: openMemory(t, clock.Now)}).heldGate()
		defer slow.release()
		fast := &gateStore{inner: openMemory(t, clock.Now)}
		// Keys starting 'a' (97, odd) go to slow, 'b' (98) to fast.
		b := newShardedBatcher(t, byFirstByte(fast, slow), 1)

		var wg sync.WaitGroup
		both := make([]engine.Result, 3)
		wg.Go(func() {
			reqs := []engine.Request{{Key: "a1", Limit: perHour, Cost: 1}, {Key: "b1", Limit: perHour, Cost: 2}, {Key: "a1", Limit: perHour, Cost: 3}}
			if err := engine.Wait(b, reqs, both, time.Time{}); err != nil {
				t.Errorf("the split call: %v", err)
			}
		})
		synctest.Wait()
		if got := slow.batchSizes(); len(got) != 1 || got[0] != 2 {
			t.Fatalf("the slow shard's batches %v; want one of its 2 requests, held", got)
		}
		for i := range 5 {
			res := make([]engine.Result, 1)
			if err := engine.Wait(b, []engine.Request{{Key: "b2", Limit: perHour, Cost: 1}}, res, time.Time{}); err != nil || res[0].Decision.Remaining != int64(999-i) {
				t.Fatalf("call %d on the fast shard while the slow one is held: %v, %+v", i, err, res[0])
			}
		}
		if got := fast.batchSizes(); len(got) != 6 {
			t.Fatalf("the fast shard's batches %v; want 6: its own part of the split call, then five alone", got)
		}
		slow.release()
		wg.Wait()
		for i, want := range []int64{999, 998, 996} {
			if r := both[i]; r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != want {
				t.Fatalf("split call, request %d: %+v; want allowed, %d left", i, r, want)
			}
		}
	})
}

// A shard that cannot be told fails the whole call, and nothing is sent.
func TestBatcherLanesRoutingError(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	g := &gateStore{inner: openMemory(t, clock.Now)}
	bad := errors.New("no slot map")
	b := newShardedBatcher(t, func(r *engine.Request) (engine.Store, error) {
		if r.Key == "lost" {
			return nil, bad
		}
		return g, nil
	}, 1)
	res := make([]engine.Result, 2)
	err := engine.Wait(b, []engine.Request{{Key: "found", Limit: perHour, Cost: 1}, {Key: "lost", Limit: perHour, Cost: 1}}, res, time.Time{})
	if !errors.Is(err, bad) {
		t.Fatalf("Submit = %v; want the routing error", err)
	}
	if got := g.batchSizes(); len(got) != 0 {
		t.Fatalf("batches sent %v; want none", got)
	}
}

// Sharded, the batcher decides as one store does: each key's requests go
// to one shard, in order.
func TestBatcherLanesConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, now func() time.Time) engine.Store {
		return newShardedBatcher(t, byFirstByte(openMemory(t, now), openMemory(t, now), openMemory(t, now)), 2)
	})
}
