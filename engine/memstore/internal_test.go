package memstore

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/engine"
)

// Two keys whose 64-bit hashes collide must keep separate states. Real
// collisions are too rare to meet in a test, so force one.
func TestMemoryShardHashCollision(t *testing.T) {
	m, err := New(Config{MaxKeys: 64 * 8})
	if err != nil {
		t.Fatal(err)
	}
	s := &m.shards[0]
	a, b := stateKey{engine.GCRA, "alpha"}, stateKey{engine.GCRA, "beta"}
	const h = 42 << 32
	s.insert(a, h, 0).B = 1
	s.insert(b, h, 0).B = 2
	state := func(k stateKey) (int64, bool) {
		if i := s.lookup(k, h); i >= 0 {
			return s.entry(i).B, true
		}
		return 0, false
	}
	want := func(k stateKey, b int64) {
		t.Helper()
		if got, ok := state(k); !ok || got != b {
			t.Fatalf("%s: state %d (found %v), want %d", k.key, got, ok, b)
		}
	}
	want(a, 1)
	want(b, 2)
	s.remove(s.lookup(a, h)) // the first of the probe sequence goes; beta must stay found
	want(b, 2)
	if _, ok := state(a); ok {
		t.Fatal("alpha found after removal")
	}
	s.insert(a, h, 0).B = 3
	want(a, 3)
	want(b, 2)
}

// The index must find every key through any sequence of inserts and
// removals, whatever the collisions: hashes here share few distinct upper
// halves, half of them near the table's end, so probe sequences run long,
// cross and wrap, and removals shift cells back across all of that.
func TestMemoryShardIndexAgainstMap(t *testing.T) {
	m, err := New(Config{MaxKeys: 64 * 200})
	if err != nil {
		t.Fatal(err)
	}
	s := &m.shards[0]
	rng := rand.New(rand.NewPCG(7, 8))
	type held struct {
		h uint64
		b int64
	}
	want := map[stateKey]held{}
	var keys []stateKey
	for step := range 20_000 {
		k := stateKey{engine.GCRA, "k" + strconv.Itoa(rng.IntN(300))}
		switch _, ok := want[k]; {
		case !ok && len(want) < s.cap:
			h := uint64(uint32(rng.IntN(40)-20))<<32 | uint64(rng.Uint32()) // homes at both ends
			s.insert(k, h, 0).B = int64(step)
			want[k] = held{h, int64(step)}
			keys = append(keys, k)
		case ok:
			s.remove(s.lookup(k, want[k].h))
			delete(want, k)
		}
		if step%97 == 0 {
			for _, k := range keys {
				w, ok := want[k]
				if !ok {
					continue
				}
				i := s.lookup(k, w.h)
				if i < 0 || s.entry(i).B != w.b {
					t.Fatalf("step %d: %s lost (slot %d)", step, k.key, i)
				}
			}
			if x := s.index.Load(); x.used != len(want) || int(s.slots)-len(s.free) != len(want) {
				t.Fatalf("step %d: index holds %d cells, shard %d states; want %d", step, x.used, int(s.slots)-len(s.free), len(want))
			}
		}
	}
}

// The key a store keeps must not alias the caller's buffer.
func TestMemoryCopiesKeys(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	buf := []byte("tenant-1")
	r := engine.Request{Key: string(buf), Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}, Cost: 1}
	r.Key = unsafeString(buf)
	m.decide(time.Now().UnixMicro(), []engine.Request{r}, make([]engine.Result, 1), m.hash(engine.FixedWindow, r.Key))
	copy(buf, "XXXXXXXX") // the caller reuses its buffer
	h := m.hash(engine.FixedWindow, "tenant-1")
	if i := m.shard(h).lookup(stateKey{engine.FixedWindow, "tenant-1"}, h); i < 0 {
		t.Fatal("state lost after the caller reused its buffer: the key was not copied")
	}
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// TestEntrySize: an entry is two cache lines, and warm reads one word of
// each, hash and key[1] (see memoryEntry); a field added or moved must
// not spill it onto a third line or take key[1] off the second.
func TestEntrySize(t *testing.T) {
	var e memoryEntry
	if n := unsafe.Sizeof(e); n != 128 {
		t.Errorf("memoryEntry is %d bytes; want 128", n)
	}
	if n := unsafe.Offsetof(e.hash); n != 0 {
		t.Errorf("hash is at byte %d; want 0, on the first cache line", n)
	}
	if n := unsafe.Offsetof(e.key) + unsafe.Sizeof(e.key[0]); n != 64 {
		t.Errorf("key[1] is at byte %d; want 64, the second cache line", n)
	}
}

// Keys of every length around shortKey, kept in the entry or beside it,
// must each find their own state, under each algorithm apart.
func TestMemoryKeyLengths(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	once := func(alg engine.Algorithm, key string) bool {
		r := engine.Request{Key: key, Limit: engine.Limit{Algorithm: alg, Rate: 1, Period: time.Hour}, Cost: 1}
		res := make([]engine.Result, 1)
		m.decide(now, []engine.Request{r}, res, m.hash(alg, key))
		return res[0].Decision.Allowed
	}
	long := strings.Repeat("k", 2*shortKey)
	for n := 1; n <= 2*shortKey; n++ {
		for _, alg := range []engine.Algorithm{engine.FixedWindow, engine.GCRA} {
			key, twin := long[:n], long[:n-1]+"x" // same length, last byte apart
			if !once(alg, key) {
				t.Fatalf("%s, %d-byte key: first request refused", alg, n)
			}
			if once(alg, key) {
				t.Fatalf("%s, %d-byte key: second request admitted: its state was not found", alg, n)
			}
			if !once(alg, twin) {
				t.Fatalf("%s, %d-byte key: a key differing in its last byte shared its state", alg, n)
			}
		}
	}
}

// A run of multi-limit requests evicts as the same requests one at a time
// do: with one state a shard, a limit's insert may evict another limit's
// entry of the same run, which the run's next request must then find
// gone. Two stores with one seed place every state alike, and a full
// shard of one slot has one victim, so their replies must agree.
func TestMemoryMultiRunEvicts(t *testing.T) {
	now := time.Unix(1_767_225_600, 0)
	clock := func() time.Time { return now }
	one, err := New(Config{MaxKeys: memoryShards, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := New(Config{MaxKeys: memoryShards, Now: clock})
	whole.seed = one.seed
	policy := []engine.NamedLimit{
		{Name: "a", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Period: time.Second, Burst: 5}},
		{Name: "b", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 8, Period: time.Minute}},
		{Name: "c", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 3, Period: time.Second, Burst: 4}},
	}
	rng := rand.New(rand.NewPCG(5, 8))
	evictions := 0
	for round := range 300 {
		reqs := make([]engine.Request, 1+rng.IntN(12))
		for i := range reqs {
			// Long runs on few keys, many keys in all: the shards fill.
			key := "k" + strconv.Itoa(round%40)
			if rng.IntN(4) == 0 {
				key = "k" + strconv.Itoa(rng.IntN(200))
			}
			reqs[i] = engine.Request{Key: key, Limits: policy, Cost: int64(rng.IntN(3)), Peek: rng.IntN(8) == 0,
				Detail: make([]engine.Decision, len(policy))}
		}
		before := one.Len()
		got := make([]engine.Result, len(reqs))
		if err := engine.Wait(whole, reqs, got, time.Time{}); err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			alone := r
			alone.Detail = make([]engine.Decision, len(policy))
			want := make([]engine.Result, 1)
			if err := engine.Wait(one, []engine.Request{alone}, want, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if want[0] != got[i] || !slices.Equal(alone.Detail, r.Detail) {
				t.Fatalf("round %d, request %d (%s cost %d peek %v): alone %+v %+v; in the batch %+v %+v",
					round, i, r.Key, r.Cost, r.Peek, want[0], alone.Detail, got[i], r.Detail)
			}
		}
		if one.Len() <= before {
			evictions++
		}
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
	}
	if evictions < 50 {
		t.Fatalf("only %d rounds evicted; the test no longer fills the shards", evictions)
	}
}
