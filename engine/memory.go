package engine

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// MemoryConfig configures a MemoryStore. The zero value is usable.
type MemoryConfig struct {
	// MaxKeys bounds how many (algorithm, key) states are kept; past it the
	// least recently used is evicted. Zero means 1,000,000.
	MaxKeys int
	// Now is the clock. Nil means time.Now; tests pin it.
	Now func() time.Time
}

// memoryShards spreads keys over independently locked LRUs, so that
// concurrent decisions on different keys rarely wait for each other.
const memoryShards = 64

// MemoryStore keeps state in this process: Sluice's embedded store, and its
// fallback when Redis cannot answer. It decides exactly as the Redis scripts
// do. State that no longer matters reads as absent and is replaced in place;
// the size cap evicts the least recently used.
type MemoryStore struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [memoryShards]memoryShard
}

type memoryShard struct {
	mu  sync.Mutex
	lru *simplelru.LRU[stateKey, *memoryEntry] // guarded by mu
}

type stateKey struct {
	alg Algorithm
	key string
}

type memoryEntry struct {
	state
	expires int64 // µs since the epoch; at or after it the state reads as zero
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore(cfg MemoryConfig) (*MemoryStore, error) {
	if cfg.MaxKeys < 0 {
		return nil, &ParamError{Param: "max keys", Value: itoa(int64(cfg.MaxKeys)), Reason: "must not be negative"}
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = 1_000_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &MemoryStore{now: cfg.Now, seed: maphash.MakeSeed()}
	perShard := max(cfg.MaxKeys/memoryShards, 1)
	for i := range m.shards {
		lru, err := simplelru.NewLRU[stateKey, *memoryEntry](perShard, nil)
		if err != nil {
			return nil, err
		}
		m.shards[i].lru = lru
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

func (m *MemoryStore) shard(key string) *memoryShard {
	return &m.shards[maphash.String(m.seed, key)%memoryShards]
}

func (m *MemoryStore) decide(now int64, r *Request) Decision {
	sk := stateKey{r.Limit.Algorithm, r.Key}
	s := m.shard(r.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.lru.Get(sk)
	if ok && now >= e.expires {
		e.state = state{log: e.log[:0]}
	}
	if !ok {
		var st state
		d, out := decide(&st, now, r)
		if out.write {
			s.lru.Add(sk, &memoryEntry{state: st, expires: out.expires})
		}
		return d
	}
	d, out := decide(&e.state, now, r)
	if out.write {
		e.expires = out.expires
	}
	return d
}

// Reset implements Store.
func (m *MemoryStore) Reset(_ context.Context, key string) error {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range Algorithms {
		s.lru.Remove(stateKey{a, key})
	}
	return nil
}

// Len reports how many states the store holds, expired ones included until
// they are touched or evicted.
func (m *MemoryStore) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.lru.Len()
		s.mu.Unlock()
	}
	return n
}
