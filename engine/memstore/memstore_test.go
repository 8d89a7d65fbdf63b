package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

func openMemory(t *testing.T, now func() time.Time) engine.Store {
	s, err := memstore.New(memstore.Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMemoryConformance(t *testing.T) {
	enginetest.Run(t, openMemory)
	enginetest.RunCases(t, openMemory, enginetest.GrantCases)
}

func TestMemoryEvictsLeastRecentlyUsed(t *testing.T) {
	const maxKeys = 64 * 64 // 64 a shard: an eviction's sample of 8 almost never holds only the hot key
	clock := enginetest.NewClock(enginetest.Epoch)
	s, err := memstore.New(memstore.Config{MaxKeys: maxKeys, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}
	res := make([]engine.Result, 1)
	decide := func(key string) engine.Decision {
		t.Helper()
		if err := engine.Wait(s, []engine.Request{{Key: key, Limit: l, Cost: 1}}, res, time.Time{}); err != nil || res[0].Err != nil {
			t.Fatalf("Submit: %v %v", err, res[0].Err)
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

// TestMemoryExpiredStateReadsAsFresh: once a state expires, the key is
// fresh, as a Redis key past its TTL is gone, whatever limit asks next.
// The next request comes with a slower limit (1h rather than 1s): a stale
// state that were read again would refill or roll over at that rate and
// still hold the first request's cost, where a fresh key admits the whole
// capacity at once.
func TestMemoryExpiredStateReadsAsFresh(t *testing.T) {
	clock := enginetest.NewClock(enginetest.Epoch)
	s := openMemory(t, clock.Now)
	clock.Advance(500 * time.Millisecond) // mid-window, so an aligned hour starts before the state's second
	for _, alg := range engine.Algorithms {
		limit := func(period time.Duration) engine.Limit {
			l := engine.Limit{Algorithm: alg, Rate: 2, Period: period}
			switch alg {
			case engine.TokenBucket, engine.LeakyBucket:
				l.Burst = 2
			case engine.GCRA:
				l.Burst = 1
			}
			return l
		}
		res := make([]engine.Result, 1)
		decide := func(l engine.Limit) engine.Decision {
			req := []engine.Request{{Key: "expiry-" + alg.String(), Limit: l, Cost: 2}}
			if err := engine.Wait(s, req, res, time.Time{}); err != nil || res[0].Err != nil {
				t.Fatalf("%v: %v %v", alg, err, res[0].Err)
			}
			return res[0].Decision
		}
		if d := decide(limit(time.Second)); !d.Allowed {
			t.Fatalf("%v: first request refused: %+v", alg, d)
		}
		clock.Advance(3 * time.Second) // past every algorithm's expiry at 2 per second
		if d := decide(limit(time.Hour)); !d.Allowed || d.Remaining != 0 {
			t.Errorf("%v: after expiry, under a slower limit: %+v; want the full capacity admitted, as a fresh key", alg, d)
		}
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

// Submit reads the index and the states without the locks before it
// decides (see Store); under -race, batches from several goroutines
// that insert, evict and reset the same keys must show no race, and each
// key must still admit exactly its limit: no state may be lost to a
// concurrent insert.
func TestMemoryConcurrentBatches(t *testing.T) {
	s, err := memstore.New(memstore.Config{MaxKeys: 64 * 16})
	if err != nil {
		t.Fatal(err)
	}
	churn := engine.Limit{Algorithm: engine.GCRA, Rate: 1000, Period: time.Second, Burst: 10}
	counted := engine.Limit{Algorithm: engine.FixedWindow, Rate: 50, Period: time.Hour}
	const workers, keys = 4, 2000
	admitted := make([]int, workers)
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			reqs := make([]engine.Request, 16)
			res := make([]engine.Result, 16)
			for round := range 300 {
				for j := range reqs {
					reqs[j] = engine.Request{Key: "churn:" + strconv.Itoa((round*16+j*7+w*131)%keys), Limit: churn, Cost: 1}
				}
				reqs[0] = engine.Request{Key: "counted", Limit: counted, Cost: 1}
				_ = engine.Wait(s, reqs, res, time.Time{})
				if res[0].Decision.Allowed {
					admitted[w]++
				}
				if round%50 == 0 {
					_ = s.Reset(context.Background(), "churn:"+strconv.Itoa(round))
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	total := 0
	for _, n := range admitted {
		total += n
	}
	// "counted" is used every round by every worker, so eviction (least
	// recently used of a sample) never takes it.
	if total != 50 {
		t.Fatalf("the fixed window of 50 admitted %d across goroutines", total)
	}
	if n := s.Len(); n > 64*16 {
		t.Fatalf("Len = %d; want at most the cap %d", n, 64*16)
	}
}

// TestMemoryHotRuns: a batch's run of requests on one key, decided under
// one lock, replies and leaves the state exactly as the same requests one
// by one.
func TestMemoryHotRuns(t *testing.T) {
	enginetest.HotRuns(t, openMemory, func(t *testing.T, a, b engine.Store, alg engine.Algorithm, keyA, keyB string, now time.Time) {
		t.Helper()
		sa := a.(*memstore.Store).StateOf(alg, keyA, now.UnixMicro())
		sb := b.(*memstore.Store).StateOf(alg, keyB, now.UnixMicro())
		if sa != sb {
			t.Fatalf("%s: one by one the state is %q; in batches %q", keyA, sa, sb)
		}
	})
}

// TestMemoryHotMultiRuns: a batch's requests on one key under a policy of
// several limits reply exactly as the same requests one by one.
func TestMemoryHotMultiRuns(t *testing.T) {
	enginetest.HotMultiRuns(t, openMemory, nil)
}

// TestMultiProperty: the memory store decides multi-limit requests as the
// model does, and a refusal takes nothing from any limit.
func TestMultiProperty(t *testing.T) {
	for seed := range uint64(60) {
		enginetest.MultiProperty(t, openMemory, seed, 120)
	}
}

// TestMemoryCountsEvictions: a state evicted while it still mattered is
// counted (its key's count is forgotten: the victim, refused, is
// admitted again once other keys fill the store); one evicted after it
// expired is not, for nothing was lost.
func TestMemoryCountsEvictions(t *testing.T) {
	const maxKeys = 64 * 4
	clock := enginetest.NewClock(enginetest.Epoch)
	s, err := memstore.New(memstore.Config{MaxKeys: maxKeys, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}
	fill := func(prefix string, n int) {
		for i := range n {
			if err := engine.Wait(s, []engine.Request{{Key: prefix + strconv.Itoa(i), Limit: l, Cost: 1}}, make([]engine.Result, 1), time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each key either takes a free slot or evicts a live state: none
	// has expired yet, so the store holds what it was not made to forget.
	fill("a:", 3*maxKeys)
	if n, held := s.Evictions(), s.Len(); n == 0 || int(n)+held != 3*maxKeys {
		t.Fatalf("%d evictions and %d held after %d live keys; want them to add up", n, held, 3*maxKeys)
	}
	before := s.Evictions()
	clock.Advance(2 * time.Hour) // every state has expired
	fill("c:", 1)                // into a full shard of expired states
	if n := s.Evictions(); n != before {
		t.Fatalf("%d evictions after keys over expired states; want still %d", n, before)
	}
}
