package engine

import (
	"context"
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// MemoryConfig configures a MemoryStore. The zero value is usable.
type MemoryConfig struct {
	// MaxKeys bounds how many (algorithm, key) states are kept; past it a
	// state that expired, or else the least recently used of a random
	// sample, is evicted. Zero means 100,000 (about 30 MB).
	MaxKeys int
	// Now is the clock. Nil means time.Now; tests pin it.
	Now func() time.Time
}

const (
	// memoryShards spreads keys over independently locked shards, so that
	// concurrent decisions on different keys rarely wait for each other.
	memoryShards = 64
	// evictionSample is how many states an eviction compares. Redis's
	// approximated LRU finds 5 close to exact; 8 is closer still.
	evictionSample = 8
)

// MemoryStore keeps state in this process: Sluice's embedded store, and its
// fallback when Redis cannot answer. It decides exactly as the Redis scripts
// do. State that no longer matters reads as absent and its slot is reused;
// past MaxKeys, eviction takes an expired state or the least recently used
// of a random sample, as Redis's own approximated LRU does.
//
// Each shard keeps its states in one slice, indexed by a map from the key's
// 64-bit hash to a slot: no pointer per state for the collector to chase,
// no list to reorder on every access, one map probe per decision.
type MemoryStore struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [memoryShards]memoryShard
}

type memoryShard struct {
	mu      sync.Mutex
	cap     int
	index   map[uint64]int32   // key hash → slot; guarded by mu
	collide map[stateKey]int32 // the rare key whose hash another key holds in index; guarded by mu
	slots   []memoryEntry      // guarded by mu
	free    []int32            // unused slots; guarded by mu
	tick    uint64             // counts accesses, for recency; guarded by mu
	rng     uint64             // xorshift state for eviction samples; guarded by mu
}

type stateKey struct {
	alg Algorithm
	key string
}

// memoryEntry is one state and its key. A key of up to shortKey bytes is
// kept in the entry itself, on the cache line that the lookup reads
// anyway: with many keys, following a pointer to the key's bytes was one
// more cache miss per decision (about a quarter of the store's time). The
// entry is 128 bytes, two cache lines: the key, then the state.
type memoryEntry struct {
	alg   Algorithm
	n     uint8 // the key's length if it is short
	short [shortKey]byte
	long  string // the key if it is longer than shortKey
	hash  uint64
	state
	expires int64  // µs since the epoch; at or after it the state reads as zero
	used    uint64 // the shard's tick at the last access; 0 marks a free slot
}

// shortKey is the longest key kept in its entry.
const shortKey = 38

// is reports whether e holds sk's state.
func (e *memoryEntry) is(sk stateKey) bool {
	if e.alg != sk.alg {
		return false
	}
	if len(sk.key) <= shortKey {
		return int(e.n) == len(sk.key) && string(e.short[:e.n]) == sk.key
	}
	return e.long == sk.key
}

// setKey stores sk in e, copying the key: a Request's key may alias a
// buffer its caller reuses.
func (e *memoryEntry) setKey(sk stateKey) {
	e.alg = sk.alg
	if len(sk.key) <= shortKey {
		e.n = uint8(copy(e.short[:], sk.key))
		return
	}
	e.long = strings.Clone(sk.key)
}

// stateKey returns the key e holds; for a short key it allocates.
func (e *memoryEntry) stateKey() stateKey {
	if e.long != "" {
		return stateKey{e.alg, e.long}
	}
	return stateKey{e.alg, string(e.short[:e.n])}
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore(cfg MemoryConfig) (*MemoryStore, error) {
	if cfg.MaxKeys < 0 {
		return nil, &ParamError{Param: "max keys", Value: itoa(int64(cfg.MaxKeys)), Reason: "must not be negative"}
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = 100_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &MemoryStore{now: cfg.Now, seed: maphash.MakeSeed()}
	for i := range m.shards {
		s := &m.shards[i]
		s.cap = max(cfg.MaxKeys/memoryShards, 1)
		s.index = make(map[uint64]int32)
		s.collide = make(map[stateKey]int32)
		s.rng = uint64(i)*0x9E3779B97F4A7C15 + 1
	}
	return m, nil
}

// Decide implements Store. It never returns a batch error: memory is always
// reachable.
func (m *MemoryStore) Decide(_ context.Context, reqs []Request, res []Result) error {
	now := m.now().UnixMicro()
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			res[i] = Result{Err: err}
			continue
		}
		res[i] = Result{Decision: m.decide(now, &reqs[i])}
	}
	return nil
}

// locate returns key's shard and the hash of (alg, key) within it, from
// one pass of the hash over the key.
func (m *MemoryStore) locate(alg Algorithm, key string) (*memoryShard, uint64) {
	h := maphash.String(m.seed, key)
	return &m.shards[h%memoryShards], h + uint64(alg)*0x9E3779B97F4A7C15
}

func (m *MemoryStore) decide(now int64, r *Request) Decision {
	sk := stateKey{r.Limit.Algorithm, r.Key}
	s, h := m.locate(sk.alg, sk.key)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.lookup(sk, h)
	if i < 0 {
		var st state
		d, out := decide(&st, now, r)
		if out.write {
			e := s.insert(sk, h, now)
			e.state, e.expires = st, out.expires
		}
		return d
	}
	e := &s.slots[i]
	s.tick++
	e.used = s.tick
	if now >= e.expires {
		e.state = state{log: e.log[:0]}
	}
	d, out := decide(&e.state, now, r)
	if out.write {
		e.expires = out.expires
	}
	return d
}

// lookup returns sk's slot, or -1.
func (s *memoryShard) lookup(sk stateKey, h uint64) int32 {
	if i, ok := s.index[h]; ok && s.slots[i].is(sk) {
		return i
	}
	if len(s.collide) > 0 {
		if i, ok := s.collide[sk]; ok {
			return i
		}
	}
	return -1
}

// insert gives sk a slot, evicting if the shard is full.
func (s *memoryShard) insert(sk stateKey, h uint64, now int64) *memoryEntry {
	if len(s.free) == 0 && len(s.slots) >= s.cap {
		s.remove(s.victim(now))
	}
	var i int32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
	} else {
		s.slots = append(s.slots, memoryEntry{})
		i = int32(len(s.slots) - 1)
	}
	s.tick++
	e := &s.slots[i]
	*e = memoryEntry{hash: h, state: state{log: e.log[:0]}, used: s.tick}
	e.setKey(sk)
	if _, taken := s.index[h]; taken {
		s.collide[e.stateKey()] = i
	} else {
		s.index[h] = i
	}
	return e
}

// victim picks the slot to evict from a full shard: the first expired state
// of a random sample, or else the sample's least recently used.
func (s *memoryShard) victim(now int64) int32 {
	best := int32(-1)
	for range evictionSample {
		s.rng ^= s.rng << 13
		s.rng ^= s.rng >> 7
		s.rng ^= s.rng << 17
		i := int32(s.rng % uint64(len(s.slots)))
		e := &s.slots[i]
		if e.used == 0 {
			continue
		}
		if now >= e.expires {
			return i
		}
		if best < 0 || e.used < s.slots[best].used {
			best = i
		}
	}
	if best < 0 { // a sample of free slots only: cannot happen when full
		for i := range s.slots {
			if s.slots[i].used != 0 {
				return int32(i)
			}
		}
	}
	return best
}

func (s *memoryShard) remove(i int32) {
	e := &s.slots[i]
	if j, ok := s.index[e.hash]; ok && j == i {
		delete(s.index, e.hash)
	} else {
		delete(s.collide, e.stateKey())
	}
	log := e.log[:0]
	if cap(log) > 64 {
		log = nil // a long log goes back to the collector rather than wait in a free slot
	}
	*e = memoryEntry{state: state{log: log}}
	s.free = append(s.free, i)
}

// Reset implements Store.
func (m *MemoryStore) Reset(_ context.Context, key string) error {
	for _, a := range Algorithms {
		s, h := m.locate(a, key)
		s.mu.Lock()
		if i := s.lookup(stateKey{a, key}, h); i >= 0 {
			s.remove(i)
		}
		s.mu.Unlock()
	}
	return nil
}

// Len reports how many states the store holds, expired ones included until
// their slot is reused or evicted.
func (m *MemoryStore) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.slots) - len(s.free)
		s.mu.Unlock()
	}
	return n
}
