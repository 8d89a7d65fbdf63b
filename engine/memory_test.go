package engine_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
)

func openMemory(t *testing.T, now func() time.Time) engine.Store {
	s, err := engine.NewMemoryStore(engine.MemoryConfig{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMemoryConformance(t *testing.T) {
	enginetest.Run(t, openMemory)
}

func TestMemoryEvictsLeastRecentlyUsed(t *testing.T) {
	const maxKeys = 64 * 64 // 64 a shard: an eviction's sample of 8 almost never holds only the hot key
	clock := enginetest.NewClock(enginetest.Epoch)
	s, err := engine.NewMemoryStore(engine.MemoryConfig{MaxKeys: maxKeys, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}
	res := make([]engine.Result, 1)
	decide := func(key string) engine.Decision {
		t.Helper()
		if err := s.Decide(context.Background(), []engine.Request{{Key: key, Limit: l, Cost: 1}}, res); err != nil || res[0].Err != nil {
			t.Fatalf("Decide: %v %v", err, res[0].Err)
		}
		return res[0].Decision
	}
	decide("hot") // takes the hot key's only unit for an hour
	for i := range 10 * maxKeys {
		decide("cold:" + strconv.Itoa(i))
		if i%64 == 0 && decide("hot").Allowed { // used all along, so never the least recent
			t.Fatalf("after %d cold keys the hot key's state was evicted", i)
		}
	}
	if n := s.Len(); n > maxKeys {
		t.Fatalf("Len = %d after %d keys; want at most the cap %d", n, 10*maxKeys, maxKeys)
	}
	if decide("cold:0").Allowed == false {
		t.Fatal("the first cold key, least recently used, is still held")
	}
}

func TestMemoryExpiredStateReadsAsFresh(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	s := openMemory(t, clock.Now)
	for _, alg := range engine.Algorithms {
		l := engine.Limit{Algorithm: alg, Rate: 2, Period: time.Second}
		if alg == engine.TokenBucket || alg == engine.LeakyBucket {
			l.Burst = 2
		}
		if alg == engine.GCRA {
			l.Burst = 1
		}
		req := []engine.Request{{Key: "expiry", Limit: l, Cost: 2}}
		res := make([]engine.Result, 1)
		_ = s.Decide(context.Background(), req, res)
		if !res[0].Decision.Allowed {
			t.Fatalf("%v: first request refused: %+v", alg, res[0])
		}
		clock.Advance(3 * time.Second)
		_ = s.Decide(context.Background(), req, res)
		if !res[0].Decision.Allowed || res[0].Decision.Remaining != 0 {
			t.Fatalf("%v: after expiry: %+v; want allowed with nothing left", alg, res[0])
		}
		clock.Advance(3 * time.Second)
	}
}

// The memory store against itself under a different shard layout would
// prove nothing; the differential fuzz that matters pits it against Redis
// (package upstream). This one checks that random scenarios never panic
// and that a store agrees with a fresh replay of the same scenario.
func FuzzMemoryReplay(f *testing.F) {
	for _, seed := range []string{"", "a", "gcra", "window edge", "\x00\xff\x10"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, seed []byte) {
		clock := enginetest.NewClock(enginetest.Epoch)
		a := openMemory(t, clock.Now)
		b := openMemory(t, clock.Now)
		enginetest.Differential(t, a, b, clock, "replay", seed)
	})
}
