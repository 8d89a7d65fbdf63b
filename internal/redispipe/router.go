package redispipe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/evloop"
)

// Router is one pipe per Cluster master, by address, and which master
// serves each hash slot, as go-redis's slot map said when it was last
// asked. Each master's pipe comes wrapped as its user wants it (T: package
// upstream's store of that master), so that routing a request costs one
// cached load and no map.
//
// The map can be behind: a slot moved, or is migrating. The user that
// finds out (a command met a key its master no longer serves, or a
// master stopped answering) calls Moved, and the next lookup of every
// slot asks go-redis again.
type Router[T any] struct {
	cc   *redis.ClusterClient
	cfg  Config // Options unset: each master's own
	wrap func(*Pipe) T

	// bySlot caches go-redis's answer per slot: asking it (MasterForKey)
	// hashes the key, reads its state and locks, per request. A slot's
	// entry is 1 + the master's index in list (0: not asked since the
	// last Moved), two slots a word: 32 KB, which stays in cache, where a
	// pointer a slot (128 KB) missed it on most requests.
	bySlot [16384 / 2]atomic.Uint32
	list   atomic.Pointer[[]T] // every master's, in order made; grows under mu

	mu     sync.Mutex
	pipes  map[string]int // address → index in list; guarded by mu
	all    []*Pipe        // by index; guarded by mu
	loop   *evloop.Loop   // guarded by mu
	closed bool           // guarded by mu
}

// errNoPipe: a master's client is one a pipe cannot stand in for (New).
var errNoPipe = errors.New("redispipe: no pipe for this master")

// NewRouter returns the router of cc's masters, each pipe configured as
// cfg says (its Options unused) and wrapped once by wrap, or nil when
// cc's connections are ones a pipe cannot stand in for (a streaming
// credentials provider).
func NewRouter[T any](cc *redis.ClusterClient, cfg Config, wrap func(*Pipe) T) *Router[T] {
	if cc.Options().StreamingCredentialsProvider != nil {
		return nil
	}
	r := &Router[T]{cc: cc, cfg: cfg, wrap: wrap, pipes: map[string]int{}}
	r.list.Store(new([]T))
	return r
}

// Cached returns the master that serves slot, if the slot was looked up
// (Of) since the last Moved: one atomic load.
func (r *Router[T]) Cached(slot uint16) (m T, ok bool) {
	if i := uint16(r.bySlot[slot/2].Load() >> (16 * uint32(slot&1))); i != 0 {
		return (*r.list.Load())[i-1], true
	}
	return m, false
}

// Of returns the master that serves slot, asking go-redis's slot map
// with key, a key of that slot, and caches it for Cached.
func (r *Router[T]) Of(slot uint16, key string) (T, error) {
	m, i, err := r.of(context.Background(), key)
	if err != nil || i >= 1<<16-1 {
		return m, err
	}
	shift := 16 * uint32(slot&1)
	for w := &r.bySlot[slot/2]; ; {
		old := w.Load()
		if w.CompareAndSwap(old, old&^(0xffff<<shift)|uint32(i+1)<<shift) {
			return m, nil
		}
	}
}

// OfKey returns the master that serves key, asking go-redis's slot map
// (loading it first if it has none yet), and its pipe.
func (r *Router[T]) OfKey(ctx context.Context, key string) (T, *Pipe, error) {
	m, i, err := r.of(ctx, key)
	if err != nil {
		return m, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.all) {
		return m, nil, ErrClosed // closed since
	}
	return m, r.all[i], nil
}

// Moved empties the slot cache: a slot moved, or a master stopped
// answering, and the slot map is being reloaded.
func (r *Router[T]) Moved() {
	for i := range r.bySlot {
		r.bySlot[i].Store(0)
	}
}

func (r *Router[T]) of(ctx context.Context, key string) (m T, i int, err error) {
	node, err := r.cc.MasterForKey(ctx, key)
	if err != nil {
		return m, 0, fmt.Errorf("upstream: the master of %s: %w", key, err)
	}
	opt := node.Options()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return m, 0, ErrClosed
	}
	list := *r.list.Load()
	if i, ok := r.pipes[opt.Addr]; ok {
		return list[i], i, nil
	}
	cfg := r.cfg
	cfg.Options = opt
	p := New(cfg)
	if p == nil {
		return m, 0, errNoPipe
	}
	if r.loop != nil {
		p.UseLoop(r.loop)
	}
	m, i = r.wrap(p), len(list)
	r.pipes[opt.Addr] = i
	r.all = append(r.all, p)
	grown := append(slices.Clip(list), m)
	r.list.Store(&grown)
	return m, i, nil
}

// UseLoop has l read every master's replies, as Pipe.UseLoop.
func (r *Router[T]) UseLoop(l *evloop.Loop) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loop = l
	for _, p := range r.all {
		p.UseLoop(l)
	}
}

// Close closes every master's pipe; later lookups fail with ErrClosed.
func (r *Router[T]) Close() {
	r.mu.Lock()
	r.closed = true
	all := r.all
	r.all, r.pipes = nil, nil
	r.mu.Unlock()
	for _, p := range all {
		p.Close()
	}
}
