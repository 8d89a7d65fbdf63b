package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/internal/resp"
)

// Cluster by master. With many keys almost every hash slot of a batch
// holds one request, so a call per slot is a call per request: Redis's
// fixed cost of a script call, paid per decision. Each request goes
// instead to the master that serves its key (go-redis's slot map, cached
// per slot): the batcher gathers each master's requests in a lane of its
// own (Store.Shards), and the store's own Submit splits a batch the same
// way (engine.SubmitSplit). A master's batch is one call of the batch
// script, which the flag
// allow-cross-slot-keys lets reach keys of every slot that master serves;
// the keys travel in ARGV (see lua/batch.lua), since a call may declare
// one slot's keys only. Each call goes on that master's own pipe (one
// pipelined connection per master, pipe.go), read by the event loop
// UseLoop gives, as the standalone store's: no goroutine on the decision
// path. A TLS connection (rediss+cluster://), or a store whose loop has
// ended or was never given (--io-loops 0), has a reader goroutine per
// master's connection instead, as the standalone pipe has.
//
// The map can be behind: a slot moved, or migrating, and a key already
// gone to its target. Inside a script such a key shows only as "Script
// attempted to access a non local key", with no target; its request
// fails alone before anything of it is written (batch.lua reads every key
// of a request before it writes). Those requests alone are sent again,
// through go-redis, as calls of one slot with declared keys (Decide's
// slot path, cluster.go), so that Redis answers MOVED, ASK or TRYAGAIN
// and go-redis follows; the slot map is reloaded. A request that the
// script decided is never sent again.

// masterPipes is one pipe per Cluster master, by address, and which
// master serves each slot, as go-redis's map said when it was last asked.
type masterPipes struct {
	s     *Store
	cc    *redis.ClusterClient
	stray func(reply any) // each pipe's (pipe.stray)

	// bySlot caches go-redis's answer per slot: asking it (MasterForKey)
	// hashes the key, reads its state and locks, per request. A slot's
	// entry is 1 + the master's index in list (0: not asked since the
	// map was last reloaded), two slots a word: 32 KB, which stays in
	// cache, where a pointer a slot (128 KB) missed it on most requests.
	// Emptied whenever the store reloads the slot map (forget), so that a
	// slot that moved is asked again.
	bySlot [16384 / 2]atomic.Uint32
	list   atomic.Pointer[[]*pipeStore] // every master's, in order made; grows under mu

	mu     sync.Mutex
	pipes  map[string]*pipeStore // guarded by mu
	loop   *evloop.Loop          // guarded by mu
	closed bool                  // guarded by mu
}

// pipeStore is a Cluster master's pipe as an engine.Store: the shard
// that decides the requests on the slots the master serves
// (Store.Shards).
type pipeStore struct {
	s   *Store
	p   *pipe
	idx int // the master's index in masterPipes.list
}

// Submit sends the batch to the master in one call, its keys undeclared
// (see lua/batch.lua), so that it may span every slot the master serves.
func (ps *pipeStore) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	ps.s.sendOn(ps.p, true, reqs, res, deadline, done)
}

// Reset resets through the store, which finds the key's master itself.
func (ps *pipeStore) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	return ps.s.Reset(ctx, key, limits...)
}

// errNoPipe: the master's client is one a pipe cannot stand in for.
var errNoPipe = errors.New("upstream: no pipe for this master")

// newMasterPipes returns the pipes of client's masters, or nil when the
// client's connections are ones a pipe cannot stand in for (a streaming
// credentials provider): the store then sends through go-redis.
func newMasterPipes(s *Store, cc *redis.ClusterClient) *masterPipes {
	if cc.Options().StreamingCredentialsProvider != nil {
		return nil
	}
	m := &masterPipes{s: s, cc: cc, stray: s.strayReply, pipes: map[string]*pipeStore{}}
	m.list.Store(new([]*pipeStore))
	return m
}

// ofRequest returns the master that serves r's keys (all of them share
// r.Key's hash tag, so its slot).
func (m *masterPipes) ofRequest(r *engine.Request) (*pipeStore, error) {
	slot := m.s.slotOf(r)
	shift := 16 * uint32(slot&1)
	if i := uint16(m.bySlot[slot/2].Load() >> shift); i != 0 {
		return (*m.list.Load())[i-1], nil
	}
	ms, err := m.of(context.Background(), m.s.keyOf(r))
	if err != nil || ms.idx >= 1<<16-1 {
		return ms, err
	}
	for w := &m.bySlot[slot/2]; ; {
		old := w.Load()
		if w.CompareAndSwap(old, old&^(0xffff<<shift)|uint32(ms.idx+1)<<shift) {
			return ms, nil
		}
	}
}

// forget empties the slot cache: the slot map is being reloaded.
func (m *masterPipes) forget() {
	for i := range m.bySlot {
		m.bySlot[i].Store(0)
	}
}

// of returns the master that serves key, by go-redis's slot map, loading
// the map first if it has none yet.
func (m *masterPipes) of(ctx context.Context, key string) (*pipeStore, error) {
	node, err := m.cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("upstream: the master of %s: %w", key, err)
	}
	opt := node.Options()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errPipeClosed
	}
	ms := m.pipes[opt.Addr]
	if ms == nil {
		p := pipeOver(opt)
		if p == nil {
			return nil, errNoPipe
		}
		p.stray = m.stray
		if m.loop != nil {
			p.useLoop(m.loop)
		}
		list := *m.list.Load()
		ms = &pipeStore{s: m.s, p: p, idx: len(list)}
		m.pipes[opt.Addr] = ms
		grown := append(slices.Clip(list), ms)
		m.list.Store(&grown)
	}
	return ms, nil
}

func (m *masterPipes) useLoop(l *evloop.Loop) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loop = l
	for _, ms := range m.pipes {
		ms.p.useLoop(l)
	}
}

func (m *masterPipes) close() {
	m.mu.Lock()
	m.closed = true
	pipes := m.pipes
	m.pipes = nil
	m.mu.Unlock()
	for _, ms := range pipes {
		ms.p.close()
	}
}

// Shards routes each request to the master that serves its key, for a
// batcher that gives each master its own batches (chain.Config.Shard):
// nil off Cluster, or where no pipe can stand in for go-redis.
func (s *Store) Shards() engine.Shards {
	if s.masters == nil {
		return nil
	}
	return s.shardOf
}

func (s *Store) shardOf(r *engine.Request) (engine.Store, error) {
	ms, err := s.masters.ofRequest(r)
	if err != nil {
		s.reloadSlots(context.Background())
		return nil, err
	}
	return ms, nil
}

// slotOf is the hash slot of r's keys, read from r.Key without joining
// its Redis key where the prefix cannot hold the hash tag.
func (s *Store) slotOf(r *engine.Request) uint16 {
	alg := r.Limit.Algorithm
	if r.Multi() {
		alg = r.Limits[0].Limit.Algorithm
	}
	if alg == engine.PeerWindow || r.Key == "" || r.Key[0] == '}' || strings.IndexByte(s.prefix, '{') >= 0 {
		return Slot(s.keyOf(r))
	}
	// The key is prefix{r.Key}:…, its hash tag r.Key up to its first '}'.
	tag := r.Key
	if i := strings.IndexByte(tag, '}'); i > 0 {
		tag = tag[:i]
	}
	return crcSlot(tag)
}

// decideAgain decides the requests idx of reqs alone, by slot with
// declared keys, through go-redis, which follows the redirects their
// masters answer.
func (s *Store) decideAgain(ctx context.Context, reqs []engine.Request, res []engine.Result, idx []int) error {
	sub := make([]engine.Request, len(idx))
	subRes := make([]engine.Result, len(idx))
	for k, i := range idx {
		sub[k] = reqs[i] // a multi-limit request's Detail still points at the caller's
	}
	if err := s.decideBySlot(ctx, sub, subRes); err != nil {
		return err
	}
	for k, i := range idx {
		res[i] = subRes[k]
	}
	return nil
}

// notHere tells whether a request's error is a key its master does not
// serve (now): what a script sees of MOVED and ASK, or a cluster down.
// The request was not decided; declared, Redis redirects it, or says
// CLUSTERDOWN, which fails its batch.
func notHere(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "Script attempted to access a non local key") ||
		strings.Contains(msg, "Script attempted to execute a command while the cluster is down")
}

// appendUndeclared appends call c as a RESP command whose keys are not
// declared: no keys, and ARGV the number of keys, the keys, then c's
// arguments (see lua/batch.lua).
func (s *Store) appendUndeclared(buf []byte, name, body string, c *call) []byte {
	buf = redcon.AppendArray(buf, 4+len(c.keys)+c.batch.Args())
	buf = redcon.AppendBulkString(buf, name)
	buf = redcon.AppendBulkString(buf, body)
	buf = resp.AppendBulkInt(buf, 0)
	buf = resp.AppendBulkInt(buf, int64(len(c.keys)))
	for _, k := range c.keys {
		buf = s.appendKey(buf, k)
	}
	return c.batch.Append(buf)
}
