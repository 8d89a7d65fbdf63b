package upstream

import (
	"context"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redispipe"
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
// pipelined connection per master, redispipe.Router), read by the event
// loop UseLoop gives, as the standalone store's: no goroutine on the
// decision path. A TLS connection (rediss+cluster://), or a store whose loop has
// ended or was never given (--io-loops 0), has a reader goroutine per
// master's connection instead, as the standalone pipe has.
//
// The map can be behind: a slot moved, or migrating, and a key already
// gone to its target. Inside a script such a key shows only as "Script
// attempted to access a non local key", with no target; its request
// fails alone before anything of it is written (batch.lua reads every key
// of a request before it writes). Those requests alone are sent again,
// through go-redis, as calls of one slot with declared keys (resend,
// goredis.go), so that Redis answers MOVED, ASK or TRYAGAIN and go-redis
// follows; the slot map is reloaded. A request that the
// script decided is never sent again.

// node is where a batch goes on one Redis (the standalone or Sentinel
// master, or one Cluster master): a shard per durability, so that a
// batcher with Shards gives durable requests batches of their own and
// the others never wait for a replica (durable.go).
type node struct {
	shards [len(durabilities)]*shard
}

// durabilities is every engine.Durability a request may have.
var durabilities = [...]engine.Durability{engine.DurableNone, engine.DurableReplica, engine.DurableDisk}

// newNode makes the shards of pipe p: the plain requests on p, the
// durable ones on p's twin (redispipe.Pipe.Twin), where the WAIT that
// follows each of their calls holds up none of the plain calls.
func (s *Store) newNode(p *redispipe.Pipe, undeclared bool) *node {
	n := &node{}
	for _, d := range durabilities {
		sh := &shard{s: s, send: s.onPipe(p, undeclared)}
		if d != engine.DurableNone {
			sh.send = s.onDurablePipe(p.Twin(), undeclared, d)
		}
		n.shards[d] = sh
	}
	return n
}

// shard is one node's requests of one durability as an engine.Store: what
// Shards routes a request to.
type shard struct {
	s      *Store
	send   sender
	bySlot bool // go-redis on Cluster: a call per slot
}

// Submit sends the batch by the store's one path.
func (sh *shard) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	sh.s.submit(sh.send, sh.bySlot, reqs, res, deadline, done)
}

// Reset resets through the store, which finds the key's master itself.
func (sh *shard) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	return sh.s.Reset(ctx, key, limits...)
}

// Shards routes each request to the shard that decides it, for a batcher
// that gives each shard its own batches (chain.Config.Shard): on Cluster
// the master that serves its key, and everywhere its durability. Nil
// where no pipe can stand in for go-redis.
func (s *Store) Shards() engine.Shards {
	if s.masters == nil && s.node == nil {
		return nil
	}
	return s.shardOf
}

func (s *Store) shardOf(r *engine.Request) (engine.Store, error) {
	d := r.Durable
	if int(d) >= len(durabilities) {
		d = engine.DurableNone // invalid: submit fails it alone
	}
	if s.masters == nil {
		if s.node != nil {
			return s.node.shards[d], nil
		}
		return s.unpiped[d], nil
	}
	slot := s.slotOf(r)
	if n, ok := s.masters.Cached(slot); ok {
		return n.shards[d], nil
	}
	n, err := s.masters.Of(slot, s.keyOf(r))
	if err != nil {
		s.reloadSlots(context.Background())
		return nil, err
	}
	return n.shards[d], nil
}

// slotOf is the hash slot of r's keys, read from r.Key without joining
// its Redis key where the prefix cannot hold the hash tag.
func (s *Store) slotOf(r *engine.Request) uint16 {
	alg := r.Limit.Algorithm
	if r.Multi() {
		alg = r.Limits[0].Limit.Algorithm
	}
	if alg == engine.PeerWindow || r.Key == "" || r.Key[0] == '}' || strings.IndexByte(s.prefix, '{') >= 0 {
		return redispipe.Slot(s.keyOf(r))
	}
	// The key is prefix{r.Key}:…, its hash tag r.Key up to its first '}'.
	tag := r.Key
	if i := strings.IndexByte(tag, '}'); i > 0 {
		tag = tag[:i]
	}
	return redispipe.TagSlot(tag)
}
