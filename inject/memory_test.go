package inject

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
)

// TestMemoryPerKey is the measurement the injector's sizing rests on:
// the in-memory store's heap per key, keys of keyBytes bytes, for every
// algorithm whose state has a fixed size, stays within bytesPerKey. The
// sliding window counter is measured at precision 10 (its ring of
// sub-window counts grows with the precision).
//
//	go test -run TestMemoryPerKey -v ./inject     # prints the figures
func TestMemoryPerKey(t *testing.T) {
	const n = 50_000
	limits := []engine.Limit{
		{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Minute},
		{Algorithm: engine.SlidingWindow, Rate: 100, Period: time.Minute, Precision: 10},
		{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 50},
		{Algorithm: engine.LeakyBucket, Rate: 10, Period: time.Second, Burst: 20},
		{Algorithm: engine.GCRA, Rate: 100, Period: time.Minute, Burst: 20},
	}
	for _, l := range limits {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			per := heapPerKey(t, l, n, keyBytes)
			t.Logf("%s, keys of %d bytes: %d bytes a key", l.Algorithm, keyBytes, per)
			if per > bytesPerKey {
				t.Errorf("%d bytes a key: the sizing assumes at most %d (bytesPerKey)", per, bytesPerKey)
			}
			if per < 64 {
				t.Errorf("%d bytes a key: the measurement measured nothing", per)
			}
		})
	}
}

// heapPerKey fills a store with n keys of size bytes under l and returns
// the live heap it holds per key kept.
func heapPerKey(t *testing.T, l engine.Limit, n, size int) int64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := memstore.New(memstore.Config{MaxKeys: n})
	if err != nil {
		t.Fatal(err)
	}
	reqs, res := make([]engine.Request, 1), make([]engine.Result, 1)
	pad := strings.Repeat("k", size-12)
	for i := range n {
		reqs[0] = engine.Request{Key: fmt.Sprintf("%s%012d", pad, i), Limit: l, Cost: 1}
		if err := engine.Wait(m, reqs, res, time.Time{}); err != nil || res[0].Err != nil {
			t.Fatal(err, res[0].Err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := m.Len()
	runtime.KeepAlive(m)
	if kept < n*9/10 {
		t.Fatalf("the store kept %d of %d keys", kept, n)
	}
	return (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(kept)
}

// The arithmetic of deploy/README.md's "Memory sizing", row by row.
func TestSizeFor(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  Sizing
	}{
		{"128Mi", Sizing{GoMemLimit: 108 << 20, MaxKeys: 77_824, MaxInputMemory: 25 << 20}},
		{"64Mi", Sizing{GoMemLimit: 54 << 20, MaxKeys: 22_528, MaxInputMemory: 7 << 20}},
		{"256Mi", Sizing{GoMemLimit: 217 << 20, MaxKeys: 189_440, MaxInputMemory: 61 << 20}},
		{"1Gi", Sizing{GoMemLimit: 870 << 20, MaxKeys: 858_112, MaxInputMemory: 279 << 20}},
	} {
		s := Settings{MemoryLimit: tc.limit}
		got, ok, err := s.sizing()
		if err != nil || !ok || got != tc.want {
			t.Errorf("%s: %+v, %v, %v; want %+v", tc.limit, got, ok, err, tc.want)
		}
		// Everything it sizes fits under GOMEMLIMIT, with the idle process.
		if sum := baseMemory + int64(got.MaxKeys)*bytesPerKey + int64(float64(got.MaxInputMemory)*inputOverhead); sum > got.GoMemLimit {
			t.Errorf("%s: %d bytes sized over GOMEMLIMIT %d", tc.limit, sum, got.GoMemLimit)
		}
	}
}

// A value given is kept; the binary's default is sized.
func TestSizingKeepsAGivenValue(t *testing.T) {
	s := DefaultSettings()
	s.Sidecar.MaxKeys = 5000
	args := strings.Join(s.Args(), " ")
	if !strings.Contains(args, "--max-keys=5000") || !strings.Contains(args, "--max-input-memory=25mb") {
		t.Fatalf("args %s", args)
	}
	s.MemoryLimit = ""
	if args := strings.Join(s.Args(), " "); strings.Contains(args, "--max-input-memory") {
		t.Fatalf("no memory limit, yet sized: %s", args)
	}
}
