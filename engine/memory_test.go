package engine_test

import (
	"context"
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
	clock := enginetest.NewClock(enginetest.Epoch)
	s, err := engine.NewMemoryStore(engine.MemoryConfig{MaxKeys: 64 * 4, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}
	res := make([]engine.Result, 1)
	for i := range 10_000 {
		req := []engine.Request{{Key: "k" + string(rune('a'+i%26)) + time.Duration(i).String(), Limit: l, Cost: 1}}
		if err := s.Decide(context.Background(), req, res); err != nil || res[0].Err != nil {
			t.Fatalf("Decide: %v %v", err, res[0].Err)
		}
	}
	if n := s.Len(); n > 64*4 {
		t.Fatalf("Len = %d after 10,000 keys; want at most the cap %d", n, 64*4)
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
