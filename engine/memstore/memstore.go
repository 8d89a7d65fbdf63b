// Package memstore is the in-memory store: Sluice's embedded store when no
// Redis is configured, and the local fallback (FailLocal) while Redis
// cannot answer. It decides with engine.Step, the same step the Lua
// scripts run in Redis, so that both stores agree decision by decision
// (engine/enginetest runs one conformance suite against both). It keeps
// its memory bounded, and holds the concurrency limiter's leases too.
package memstore

import (
	"context"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/engine"
)

// Config configures a Store. The zero value is usable.
type Config struct {
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

// Store keeps state in this process: Sluice's embedded store, and its
// fallback when Redis cannot answer. It decides exactly as the Redis scripts
// do. State that no longer matters reads as absent and its slot is reused;
// past MaxKeys, eviction takes an expired state or the least recently used
// of a random sample, as Redis's own approximated LRU does.
//
// Each shard keeps its states in fixed chunks of slots, found through an
// open-addressing index from the key's 64-bit hash: no pointer per state
// for the collector to chase, no list to reorder on every access.
//
// With many keys, a decision's time goes mostly to cache misses: the index
// cell, then the state. Submit first reads, without the locks, the cells
// and states a batch will use (warm), so that the batch's misses overlap
// instead of following one another. Those reads are only a hint; the locked
// lookup that follows decides.
type Store struct {
	now     func() time.Time
	seed    maphash.Seed
	shards  [memoryShards]memoryShard
	leases  memLeases // the concurrency limiter's (lease.go)
	maxKeys int       // Config.MaxKeys, for INFO
}

type memoryShard struct {
	mu     sync.Mutex
	cap    int
	index  atomic.Pointer[slotIndex]   // replaced under mu as it fills
	chunks []atomic.Pointer[slotChunk] // enough for cap slots; each allocated under mu when first needed
	slots  int32                       // slots handed out, free ones included; guarded by mu
	free   []int32                     // unused slots; guarded by mu
	tick   uint64                      // counts accesses, for recency; guarded by mu
	rng    uint64                      // xorshift state for eviction samples; guarded by mu
	// evicted counts the live states evicted to make room (Evictions):
	// written under mu, read without it.
	evicted atomic.Uint64
}

// slotChunk is a shard's unit of growth: chunks are allocated as the shard
// fills and never move, so warm can read them without the lock.
type slotChunk [chunkSlots]memoryEntry

const chunkSlots = 64 // 8 KiB

type stateKey struct {
	alg engine.Algorithm
	key string
}

// memoryEntry is one state and its key: 128 bytes, two cache lines, both
// of which a decision reads. A key of up to shortKey bytes is kept in the
// entry itself: with many keys, following a pointer to the key's bytes was
// one more cache miss per decision.
//
// warm reads one word of each line without the lock, so each of those
// words is one written only when the slot changes hands, and atomically:
// hash on the first line, key[1] on the second.
type memoryEntry struct {
	hash uint64 // 0 in a free slot
	engine.State
	// key holds the algorithm, the key's length if it is short, and a
	// short key's bytes (see keyBytes); key[1] starts the second line.
	key     [keyWords]uint64
	expires int64  // µs since the epoch; at or after it the state reads as zero
	used    uint64 // the shard's tick at the last access; 0 marks a free slot
	long    string // the key if it is longer than shortKey
}

const (
	keyWords = 5
	// shortKey is the longest key kept in its entry.
	shortKey = 8*keyWords - 2
)

// keyBytes views key as bytes: the algorithm, the length, the key.
func keyBytes(key *[keyWords]uint64) *[8 * keyWords]byte {
	return (*[8 * keyWords]byte)(unsafe.Pointer(key))
}

// is reports whether e holds sk's state.
func (e *memoryEntry) is(sk stateKey) bool {
	b := keyBytes(&e.key)
	if b[0] != byte(sk.alg) {
		return false
	}
	if len(sk.key) <= shortKey {
		return int(b[1]) == len(sk.key) && string(b[2:2+b[1]]) == sk.key
	}
	return e.long == sk.key
}

// take gives e, a free slot, to sk: its key, copied (a Request's key may
// alias a buffer its caller reuses), a zero state, and h, stored last.
func (e *memoryEntry) take(sk stateKey, h uint64, tick uint64) {
	e.State = engine.State{Log: e.Log[:0]}
	e.expires, e.used, e.long = 0, tick, ""
	var key [keyWords]uint64
	b := keyBytes(&key)
	b[0] = byte(sk.alg)
	if len(sk.key) <= shortKey {
		b[1] = byte(copy(b[2:], sk.key))
	} else {
		e.long = strings.Clone(sk.key)
	}
	for i, w := range key {
		atomic.StoreUint64(&e.key[i], w)
	}
	atomic.StoreUint64(&e.hash, h)
}

// free empties e. Its key words stay: no index cell leads to a free slot.
func (e *memoryEntry) free() {
	log := e.Log[:0]
	if cap(log) > 64 {
		log = nil // a long log goes back to the collector rather than wait in a free slot
	}
	e.State = engine.State{Log: log}
	e.expires, e.used, e.long = 0, 0, ""
	atomic.StoreUint64(&e.hash, 0)
}

var _ engine.Store = (*Store)(nil)

// New returns an empty store.
func New(cfg Config) (*Store, error) {
	if cfg.MaxKeys < 0 {
		return nil, &engine.ParamError{Param: "max keys", Value: strconv.Itoa(cfg.MaxKeys), Reason: "must not be negative"}
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = 100_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Store{now: cfg.Now, seed: maphash.MakeSeed(), maxKeys: cfg.MaxKeys}
	for i := range m.shards {
		s := &m.shards[i]
		s.cap = max(cfg.MaxKeys/memoryShards, 1)
		s.chunks = make([]atomic.Pointer[slotChunk], (s.cap+chunkSlots-1)/chunkSlots)
		s.index.Store(newSlotIndex(16))
		s.rng = uint64(i)*0x9E3779B97F4A7C15 + 1
	}
	return m, nil
}

// warmBatch is how many requests Submit warms ahead of deciding them: more
// than a pipeline usually holds, few enough for their hashes to stay on
// the stack.
const warmBatch = 32

// Submit implements Store: it decides at once, and done runs before it
// returns, never with a batch error (memory is always reachable). The
// deadline is not needed: nothing waits.
func (m *Store) Submit(reqs []engine.Request, res []engine.Result, _ time.Time, done func(error)) {
	m.decideBatch(reqs, res)
	done(nil)
}

// decideBatch decides reqs into res.
func (m *Store) decideBatch(reqs []engine.Request, res []engine.Result) {
	now := m.now().UnixMicro()
	var hs [warmBatch]uint64
	for len(reqs) > 0 {
		n := min(len(reqs), warmBatch)
		for i := range n {
			hs[i] = m.hash(reqs[i].Limit.Algorithm, reqs[i].Key) // a multi-limit request's is never used
		}
		m.warm(hs[:n])
		for i := 0; i < n; {
			if err := reqs[i].Validate(); err != nil {
				res[i] = engine.Result{Err: err}
				i++
				continue
			}
			if reqs[i].Multi() {
				// A run: the valid requests right after this one on its
				// key under the same policy, decided under one set of locks.
				j := i + 1
				for j < n && reqs[j].Key == reqs[i].Key && reqs[j].Multi() &&
					engine.SameLimits(reqs[j].Limits, reqs[i].Limits) && reqs[j].Validate() == nil {
					j++
				}
				m.decideMulti(now, reqs[i:j], res[i:j])
				i = j
				continue
			}
			// A run: the valid requests right after this one on its key
			// (a tenant-wide limit under load), decided under one lock.
			j := i + 1
			for j < n && hs[j] == hs[i] && reqs[j].Key == reqs[i].Key && !reqs[j].Multi() &&
				reqs[j].Limit.Algorithm == reqs[i].Limit.Algorithm && reqs[j].Validate() == nil {
				j++
			}
			m.decide(now, reqs[i:j], res[i:j], hs[i])
			i = j
		}
		for i := range res[:n] {
			res[i].At = now
		}
		reqs, res = reqs[n:], res[n:]
	}
}

// hash returns the hash of (alg, key): its low bits pick the shard, its
// high bits the index cell.
func (m *Store) hash(alg engine.Algorithm, key string) uint64 {
	return maphash.String(m.seed, key) + uint64(alg)*0x9E3779B97F4A7C15
}

func (m *Store) shard(h uint64) *memoryShard { return &m.shards[h%memoryShards] }

// warm reads the index cell and the entry each hash will most likely use,
// without locking: loads that do not wait for each other, so their cache
// misses overlap. All the cells go first, then the entries they lead to,
// so that no entry's load holds up the next cell's. Go has no prefetch
// instruction; atomic loads are the reads the race detector accepts beside
// the locked writes.
func (m *Store) warm(hs []uint64) {
	var cells [warmBatch]uint64
	for k, h := range hs {
		x := m.shard(h).index.Load()
		cells[k] = atomic.LoadUint64(&x.cells[uint32(h>>32)&x.mask])
	}
	for k, h := range hs {
		c := cells[k]
		if c == 0 || c>>32 != h>>32 {
			continue
		}
		i := int32(uint32(c)) - 1
		if ch := m.shard(h).chunks[i/chunkSlots].Load(); ch != nil {
			e := &ch[i%chunkSlots]
			atomic.LoadUint64(&e.hash)
			atomic.LoadUint64(&e.key[1])
		}
	}
}

// decide decides a run of requests on one key, each against the state the
// ones before it left, with the shard locked once. now is the same for all
// of them, and a state written at now ends after now, so the expiry check
// once for the run is the one each request would have made.
func (m *Store) decide(now int64, run []engine.Request, res []engine.Result, h uint64) {
	sk := stateKey{run[0].Limit.Algorithm, run[0].Key}
	s := m.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	var e *memoryEntry
	if i := s.lookup(sk, h); i >= 0 {
		e = s.entry(i)
		s.tick++
		e.used = s.tick
		if now >= e.expires {
			e.State = engine.State{Log: e.Log[:0]}
		}
	}
	for k := range run {
		if e == nil {
			// No state yet: one is stored only when a request writes.
			var st engine.State
			d, out := engine.Step(&st, now, &run[k])
			if out.Write {
				e = s.insert(sk, h, now)
				e.State, e.expires = st, out.Expires
			}
			res[k] = engine.Result{Decision: d}
			continue
		}
		d, out := engine.Step(&e.State, now, &run[k])
		if out.Write {
			e.expires = out.Expires
		}
		res[k] = engine.Result{Decision: d}
	}
}

func (s *memoryShard) entry(i int32) *memoryEntry {
	return &s.chunks[i/chunkSlots].Load()[i%chunkSlots]
}

// lookup returns sk's slot, or -1.
func (s *memoryShard) lookup(sk stateKey, h uint64) int32 {
	x := s.index.Load()
	tag := h >> 32
	for p := uint32(tag) & x.mask; ; p = (p + 1) & x.mask {
		c := x.cells[p]
		if c == 0 {
			return -1
		}
		if c>>32 == tag {
			i := int32(uint32(c)) - 1
			if e := s.entry(i); e.hash == h && e.is(sk) {
				return i
			}
		}
	}
}

// insert gives sk a slot, evicting if the shard is full.
func (s *memoryShard) insert(sk stateKey, h uint64, now int64) *memoryEntry {
	if len(s.free) == 0 && int(s.slots) >= s.cap {
		v := s.victim(now)
		if now < s.entry(v).expires {
			s.evicted.Add(1) // a state that still mattered: its count is forgotten
		}
		s.remove(v)
	}
	var i int32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
	} else {
		i = s.slots
		s.slots++
		if i%chunkSlots == 0 {
			s.chunks[i/chunkSlots].Store(new(slotChunk))
		}
	}
	s.tick++
	e := s.entry(i)
	e.take(sk, h, s.tick)
	x := s.index.Load()
	if 2*(x.used+1) > len(x.cells) {
		x = s.grow(x)
	}
	x.put(cell(h, i))
	return e
}

// grow replaces the index with one twice its size. The old one is left as
// it is for any warm still reading it.
func (s *memoryShard) grow(x *slotIndex) *slotIndex {
	y := newSlotIndex(2 * len(x.cells))
	for _, c := range x.cells {
		if c != 0 {
			y.put(c)
		}
	}
	s.index.Store(y)
	return y
}

// victim picks the slot to evict from a full shard: the first expired state
// of a random sample, or else the sample's least recently used.
func (s *memoryShard) victim(now int64) int32 {
	best := int32(-1)
	for range evictionSample {
		s.rng ^= s.rng << 13
		s.rng ^= s.rng >> 7
		s.rng ^= s.rng << 17
		i := int32(s.rng % uint64(s.slots))
		e := s.entry(i)
		if e.used == 0 {
			continue
		}
		if now >= e.expires {
			return i
		}
		if best < 0 || e.used < s.entry(best).used {
			best = i
		}
	}
	if best < 0 { // a sample of free slots only: cannot happen when full
		for i := range s.slots {
			if s.entry(i).used != 0 {
				return i
			}
		}
	}
	return best
}

// remove frees slot i, which holds a state.
func (s *memoryShard) remove(i int32) {
	e := s.entry(i)
	x := s.index.Load()
	want := cell(e.hash, i)
	p := uint32(want>>32) & x.mask
	for x.cells[p] != want {
		p = (p + 1) & x.mask
	}
	x.delete(p)
	e.free()
	s.free = append(s.free, i)
}

// Reset implements Store. It forgets the key's leases too, and the state
// of each of limits on it.
func (m *Store) Reset(_ context.Context, key string, limits ...engine.NamedLimit) error {
	m.resetLeases(key)
	forget := func(sk stateKey) {
		h := m.hash(sk.alg, sk.key)
		s := m.shard(h)
		s.mu.Lock()
		if i := s.lookup(sk, h); i >= 0 {
			s.remove(i)
		}
		s.mu.Unlock()
	}
	for _, a := range engine.Algorithms {
		forget(stateKey{a, key})
	}
	for _, l := range limits {
		forget(limitStateKey(key, l))
	}
	return nil
}

// multiFlag marks the state of one limit of a multi-limit request in
// stateKey.alg, so that it never meets a single-limit state.
const multiFlag engine.Algorithm = 0x80

// limitStateKey is where limit l of a multi-limit request on key keeps its
// state: the key, then the name after a brace, as in Redis (upstream's
// LimitKey). A name holds no brace, so two (key, name) pairs never meet.
func limitStateKey(key string, l engine.NamedLimit) stateKey {
	return stateKey{alg: l.Limit.Algorithm | multiFlag, key: key + "}:" + l.Name}
}

// decideMulti decides a run of multi-limit requests on one key under the
// same limits with the shards of all its limits locked, so that no other
// decision comes between a request's check and its charge, and each
// limit's state is found once for the run. It does for each what the
// batch script does (lua/batch.lua): each limit looks (a peek at the
// request's cost); if all admit and it is no peek, each is charged; if
// any refuses, nothing is, and each limit with room reports what it has
// (a look at cost 0). A charge is taken by each limit, whatever the
// others, and a refund given back to each; a grant is a take.
func (m *Store) decideMulti(now int64, run []engine.Request, res []engine.Result) {
	r0 := &run[0]
	n := len(r0.Limits)
	var sks [engine.MaxLimits]stateKey
	var hs [engine.MaxLimits]uint64
	var locked [engine.MaxLimits]*memoryShard
	held := 0
	for j, l := range r0.Limits {
		sks[j] = limitStateKey(r0.Key, l)
		hs[j] = m.hash(sks[j].alg, sks[j].key)
		locked[held] = m.shard(hs[j])
		held++
	}
	// Each shard once, in address order: any two requests lock in one
	// order, so none waits for the other forever.
	order := locked[:held]
	for a := 1; a < len(order); a++ {
		for b := a; b > 0 && uintptr(unsafe.Pointer(order[b])) < uintptr(unsafe.Pointer(order[b-1])); b-- {
			order[b], order[b-1] = order[b-1], order[b]
		}
	}
	for k, s := range order {
		if k == 0 || s != order[k-1] {
			s.mu.Lock()
			defer s.mu.Unlock()
		}
	}
	var es [engine.MaxLimits]*memoryEntry
	find := func() {
		for j := range n {
			es[j] = nil
			s := m.shard(hs[j])
			if i := s.lookup(sks[j], hs[j]); i >= 0 {
				e := s.entry(i)
				s.tick++
				e.used = s.tick
				if now >= e.expires {
					e.State = engine.State{Log: e.Log[:0]}
				}
				es[j] = e
			}
		}
	}
	find()
	for k := range run {
		// An insert may evict, even an entry es holds: the run's next
		// request finds them again.
		if m.decideOneMulti(now, &run[k], &res[k], &es, &sks, &hs) {
			find()
		}
	}
}

// decideOneMulti decides one request of decideMulti's run against the
// entries es of its limits (nil: none yet), their state keys and hashes,
// and reports whether it inserted an entry.
func (m *Store) decideOneMulti(now int64, r *engine.Request, res *engine.Result, es *[engine.MaxLimits]*memoryEntry, sks *[engine.MaxLimits]stateKey, hs *[engine.MaxLimits]uint64) (inserted bool) {
	n := len(r.Limits)
	var parts [engine.MaxLimits]engine.Decision
	look := func(j int, cost int64) engine.Decision {
		var zero engine.State
		st := &zero
		if es[j] != nil {
			st = &es[j].State
		}
		d, _ := engine.Step(st, now, &engine.Request{Key: r.Key, Limit: r.Limits[j].Limit, Cost: cost, Peek: true})
		return d
	}
	// A refund gives back to each limit by its own anchor, which the
	// caller left in Detail: read before the decisions overwrite it.
	var anchors [engine.MaxLimits]int64
	if r.Refund {
		for j := range n {
			anchors[j] = r.Detail[j].Anchor
		}
	}
	allowed := true
	for j := range n {
		if r.Charge || r.Refund {
			break // taken (given back) by each limit, whatever the others: no look
		}
		parts[j] = look(j, r.Cost)
		allowed = allowed && parts[j].Allowed
	}
	switch {
	case !allowed:
		for j := range n {
			if parts[j].Allowed {
				parts[j] = look(j, 0)
			}
		}
	case !r.Peek:
		// The states that exist first, then the new ones: an insert may
		// evict, and must not take a slot this loop has yet to use.
		for j := range n {
			if e := es[j]; e != nil {
				var out engine.Outcome
				rj := limitRequest(r, j, &anchors)
				parts[j], out = engine.Step(&e.State, now, &rj)
				if out.Write {
					e.expires = out.Expires
				}
			}
		}
		for j := range n {
			if es[j] == nil {
				var st engine.State
				var out engine.Outcome
				rj := limitRequest(r, j, &anchors)
				parts[j], out = engine.Step(&st, now, &rj)
				if out.Write {
					s := m.shard(hs[j])
					e := s.insert(sks[j], hs[j], now)
					e.State, e.expires = st, out.Expires
					inserted = true
				}
			}
		}
	}
	copy(r.Detail, parts[:n])
	*res = engine.Result{Decision: engine.Combine(parts[:n])}
	return inserted
}

// limitRequest is multi-limit request r as its limit j steps it: a take,
// a charge, a grant, or a refund by anchors[j].
func limitRequest(r *engine.Request, j int, anchors *[engine.MaxLimits]int64) engine.Request {
	return engine.Request{Key: r.Key, Limit: r.Limits[j].Limit, Cost: r.Cost, Charge: r.Charge,
		Grant: r.Grant, Refund: r.Refund, Anchor: anchors[j]}
}

// Len reports how many states the store holds, expired ones included until
// their slot is reused or evicted.
// Evictions is how many states that still mattered (not expired) were
// evicted to stay within MaxKeys: each forgot a key's count, so that its
// next request is decided as the key's first. On the in-memory store, and
// in the local fallback, a client that fills the store with keys of its
// own can so reset another's; a count that grows says MaxKeys is too
// small for the keys in use.
func (m *Store) Evictions() uint64 {
	var n uint64
	for i := range m.shards {
		n += m.shards[i].evicted.Load()
	}
	return n
}

func (m *Store) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += int(s.slots) - len(s.free)
		s.mu.Unlock()
	}
	return n
}
