package chain_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// One million distinct keys through the in-memory store and through the
// deny cache: each keeps to its bound, in entries and in bytes. The byte
// budgets are the ones docs/running.md documents per entry (--max-keys,
// --deny-cache-size).
func TestMemoryStaysBoundedOverAMillionKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("a million keys")
	}
	if raceEnabled {
		t.Skip("the race detector inflates the heap by about a third: the bound is measured without it (scripts/test runs this test so)")
	}
	const (
		keys           = 1_000_000
		maxKeys        = 100_000
		bytesPerState  = 300 // documented: at most 300 bytes a state
		bytesPerRefuse = 400 // documented: at most 400 bytes a remembered refusal
	)
	clock := enginetest.NewClock(enginetest.Epoch)
	mem, err := memstore.New(memstore.Config{MaxKeys: maxKeys, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := chain.NewDenyCache(chain.DenyCacheConfig{Store: mem, MaxEntries: maxKeys, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	base := heapInUse()
	limit := engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}
	reqs := make([]engine.Request, 2)
	res := make([]engine.Result, 2)
	for i := range keys {
		k := "client:" + strconv.Itoa(i)
		// The second request is refused, so the cache remembers it too.
		reqs[0] = engine.Request{Key: k, Limit: limit, Cost: 1}
		reqs[1] = reqs[0]
		if err := engine.Wait(cache, reqs, res, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if !res[0].Decision.Allowed || res[1].Decision.Allowed {
			t.Fatalf("key %d: %+v", i, res)
		}
	}
	if n := mem.Len(); n > maxKeys {
		t.Errorf("in-memory store holds %d states; bound %d", n, maxKeys)
	}
	if n := cache.Stats().Entries; n > maxKeys {
		t.Errorf("deny cache holds %d refusals; bound %d", n, maxKeys)
	}
	grown := heapInUse() - base
	budget := uint64(maxKeys * (bytesPerState + bytesPerRefuse))
	t.Logf("heap grew %.1f MB for %d states and %d refusals (%.0f bytes per pair)",
		float64(grown)/1e6, mem.Len(), cache.Stats().Entries, float64(grown)/maxKeys)
	if grown > budget {
		t.Errorf("heap grew %d bytes; budget %d", grown, budget)
	}
	runtime.KeepAlive(mem)
	runtime.KeepAlive(cache)
}
