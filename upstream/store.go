// Package upstream is Sluice's Redis store: an engine.Store that decides
// requests with the scripts of package lua on a central Redis (standalone,
// Sentinel or Cluster, through go-redis's UniversalClient), so that every
// sidecar shares one truth and every decision is one atomic script run.
//
// It is the adapter between the two: it plans a batch once (plan.go),
// encodes it as one call of the batch script (lua.BatchCall), sends it
// once, and decodes the reply (send.go). The connection that carries the
// call is package redispipe's, which knows no script and no request: one
// pipelined connection per Redis, per master on Cluster, written by the
// caller without waiting and read by the event loop UseLoop gives (or a
// goroutine). On standalone and Sentinel Redis one call decides the whole
// batch, so Redis pays its per-command cost once for many decisions; on
// Cluster the batch is grouped by the master that serves each key, one
// call per master (masters.go). Where no pipe can stand in for go-redis,
// and for the few requests a master no longer serves, go-redis is the
// sender instead (goredis.go). A Redis that lost its scripts (restarted,
// SCRIPT FLUSH) answers NOSCRIPT; the store then sends the same calls as
// EVAL, which loads the scripts again, invisibly to the caller.
//
// Watching the Redis is not the store's: whether it can be used and why
// not, its eviction policy and its failovers are package redisobserve's,
// which the store tells of each Check; the go-redis client it is given
// is made by package redisclient.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/internal/redisobserve"
	"github.com/sluice-rl/sluice/internal/redispipe"
	"github.com/sluice-rl/sluice/internal/redisurl"
	"github.com/sluice-rl/sluice/lua"
)

// Config configures a Store. Zero values mean the documented defaults.
type Config struct {
	// Client reaches Redis: a *redis.Client (standalone, or Sentinel through
	// a failover client) or a *redis.ClusterClient. Required. A *redis.Ring
	// is refused: it shards on the client, where one script call cannot
	// follow.
	Client redis.UniversalClient
	// Prefix starts every key. Empty means redisurl.DefaultPrefix. A request's state
	// lives at Prefix + "{" + key + "}:" + the algorithm's short name, and
	// a multi-limit request's limit at Prefix + "{" + key + "}:" + the
	// limit's name + ":" + the short name. The hash tag keeps all of a
	// key's algorithms and limits in one Cluster slot, so that one script
	// call decides them together; a prefix should hold no '{'.
	Prefix string
	// Now pins the clock, for tests only. Nil means Redis's own clock
	// (TIME), which keeps sidecars with skewed clocks in agreement.
	Now func() time.Time
	// Log gets the line that says whether batches call a Redis function
	// or EVALSHA (functions.go). Nil means slog.Default().
	Log *slog.Logger
	// Replicas is how many replicas must acknowledge a durable request's
	// charge before it is answered (durable.go). Zero means 1.
	Replicas int
	// Observer is told the outcome of each Check, and names its cause
	// (package redisobserve); it watches Client. Nil means one of the
	// store's own, over Client and Log.
	Observer *redisobserve.Observer
}

// Store decides requests on Redis. It is safe for concurrent use.
type Store struct {
	client  redis.UniversalClient
	cluster bool // client is a *redis.ClusterClient: group batches by master, or by slot
	prefix  string
	now     func() time.Time
	batches sync.Pool // *batch
	// send is how Submit's batches go off Cluster: on pipe, or through
	// go-redis where no pipe can stand in for it (send.go).
	send sender
	pipe *redispipe.Pipe // nil on Cluster
	// node is pipe's shards by durability (Shards); nil with no pipe.
	node *node
	// unpiped is the shards by durability where no pipe can stand in for
	// go-redis: the plain one sends through it, the durable ones refuse
	// (durable.go).
	unpiped [len(durabilities)]engine.Store
	// masters holds a pipe per Cluster master, as a node of shards (the
	// shards of Shards); nil off Cluster, and where a pipe cannot stand
	// in for go-redis.
	masters *redispipe.Router[*node]
	// functions is set while batches call the batch library (FCALL);
	// refusedAt is when Redis last refused to load it (UnixNano, 0:
	// never, or loaded since), and retrying is set while a retry runs
	// (functions.go).
	functions, retrying atomic.Bool
	refusedAt           atomic.Int64
	// reloading holds the pipes with a FUNCTION LOAD under way: the
	// batches sent when a master lost the library all meet its absence,
	// and one load is enough.
	reloading sync.Map // *redispipe.Pipe → struct{}
	log       *slog.Logger
	// clock is the offset to Redis's clock where no pipe keeps one: a
	// standalone Redis reached through go-redis.
	clock redispipe.Clock
	// late counts the batch calls Redis started after their deadline, and
	// so skipped; overdue those it ran after their callers had been
	// answered without them (deadline.go). lastNote rate-limits their log
	// line (UnixNano).
	late, overdue atomic.Uint64
	lastNote      atomic.Int64
	// replicas is Config.Replicas. durableCalls counts the calls of
	// durable requests, unreplicated those whose WAIT said fewer
	// replicas than replicas hold their charges (durable.go); lastShort
	// rate-limits their log line (UnixNano).
	replicas                   int
	durableCalls, unreplicated atomic.Uint64
	lastShort                  atomic.Int64
	// obs is told the outcome of each Check (check.go).
	obs *redisobserve.Observer
}

// New returns a Store over cfg.Client. It does not talk to Redis.
func New(cfg Config) (*Store, error) {
	switch cfg.Client.(type) {
	case nil:
		return nil, errors.New("upstream: Config.Client is required")
	case *redis.Ring:
		return nil, errors.New("upstream: a *redis.Ring shards keys on the client, which one script call cannot follow; use a Redis Cluster")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = redisurl.DefaultPrefix
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Replicas < 0 {
		return nil, errors.New("upstream: negative Config.Replicas")
	}
	if cfg.Observer == nil {
		var err error
		if cfg.Observer, err = redisobserve.New(redisobserve.Config{Client: cfg.Client, Log: cfg.Log}); err != nil {
			return nil, err
		}
	}
	s := &Store{client: cfg.Client, prefix: cfg.Prefix, now: cfg.Now, log: cfg.Log, replicas: max(cfg.Replicas, 1), obs: cfg.Observer}
	s.batches.New = s.newBatch
	s.send = s.goRedis
	pipes := redispipe.Config{Stamp: redispipe.Stamp{Put: lua.PutDeadline, Time: lua.ReplyTime}, Stray: s.strayReply}
	switch c := cfg.Client.(type) {
	case *redis.ClusterClient:
		s.cluster = true
		s.masters = redispipe.NewRouter(c, pipes, func(p *redispipe.Pipe) *node {
			return s.newNode(p, true)
		})
	case *redis.Client:
		pipes.Options = c.Options()
		if s.pipe = redispipe.New(pipes); s.pipe != nil {
			s.send = s.onPipe(s.pipe, false)
			s.node = s.newNode(s.pipe, false)
		}
	}
	s.unpiped[engine.DurableNone] = &shard{s: s, send: s.send, bySlot: s.cluster}
	for _, d := range durabilities[1:] {
		s.unpiped[d] = unpiped{}
	}
	return s, nil
}

// Close closes the store's own connections; the client is the caller's
// to close.
func (s *Store) Close() {
	if s.pipe != nil {
		s.pipe.Close()
	}
	if s.masters != nil {
		s.masters.Close()
	}
}

// UseLoop has an event loop read the replies to batches from now on:
// the store's pipes watch their connections' descriptors on l, and their
// replies are read and their batches completed on l's goroutine. app
// hands it the loop that serves the RESP door's first connections, so
// that a reply reaches the loop that answers it with no thread woken in
// between; the loop waits first for a small batch's reply (evloop.Owing).
// On Cluster the loop reads every master's pipe. On a connection with no
// descriptor (TLS), a goroutine of the pipe's reads the replies, and so
// it does again once l ends.
func (s *Store) UseLoop(l *evloop.Loop) {
	if s.pipe != nil {
		s.pipe.UseLoop(l)
	}
	if s.masters != nil {
		s.masters.UseLoop(l)
	}
}

// Slot returns the Redis Cluster hash slot of key (redispipe.Slot).
func Slot(key string) uint16 { return redispipe.Slot(key) }

// Key returns the Redis key that holds key's state under algorithm a.
//
// A key's last part, the algorithm's short name, also names the layout of
// the state it holds: state format 1, what every Sluice so far has
// written. A change of layout gets a new name (say "gcra2"), so that a
// sidecar of one version never reads state that one of another wrote in
// a layout it does not know; see the README's "Rolling updates".
func (s *Store) Key(key string, a engine.Algorithm) string {
	return s.keyString(keyRef{key: key, alg: a})
}

// LimitKey returns the Redis key that holds the state of limit l of a
// multi-limit request on key: after the hash tag, the limit's name, then
// its algorithm as in Key. A name holds no brace or colon
// (engine.ValidateLimitName), so no two (key, name) pairs and no
// single-limit key ever meet.
func (s *Store) LimitKey(key string, l engine.NamedLimit) string {
	return s.keyString(keyRef{key: key, name: l.Name, alg: l.Limit.Algorithm})
}

// keyRef is a Redis key in its parts: Key's (name empty) or LimitKey's,
// not yet joined. A batch's keys are written out only as they are sent,
// so that the pipe sends them without making a string of each.
type keyRef struct {
	key  string // the request's key
	name string // a multi-limit request's limit's name
	alg  engine.Algorithm
}

// keyString is k joined: what Key or LimitKey returns. A peer window's
// key is the peer's own, stored as it is (engine/peer.go).
func (s *Store) keyString(k keyRef) string {
	if k.alg == engine.PeerWindow {
		return k.key
	}
	if k.name == "" {
		return s.prefix + "{" + k.key + "}:" + k.alg.Short()
	}
	return s.prefix + "{" + k.key + "}:" + k.name + ":" + k.alg.Short()
}

// keyOf is the Redis key of request r's first (or only) limit: all of a
// request's keys share its slot.
func (s *Store) keyOf(r *engine.Request) string {
	if r.Multi() {
		return s.LimitKey(r.Key, r.Limits[0])
	}
	return s.Key(r.Key, r.Limit.Algorithm)
}

// SlotMapBehind reloads a Cluster client's slot map, and the store's
// cache of it, when something else than a round trip of its own says it
// may be behind: a master that stopped answering, a replica promoted.
// Off Cluster it does nothing.
func (s *Store) SlotMapBehind() { s.reloadSlots(context.Background()) }

// reloadSlots asks a Cluster client to reload its slot map after a failed
// round trip. go-redis reloads it on MOVED, but a master that died answers
// nothing, so its slots stay mapped to it until the periodic reload (60s by
// default), long after its replica took over. go-redis runs one reload at a
// time, at most one every 200ms, in the background.
func (s *Store) reloadSlots(ctx context.Context) {
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		if s.masters != nil {
			s.masters.Moved()
		}
		cc.ReloadState(ctx)
	}
}

// Reset implements engine.Store: it deletes key's state under every
// algorithm, its leases and each of limits' state, in one command, then announces the reset on the channel
// ResetChannel, so that every sidecar drops what it remembers of the key
// (see Subscribe).
func (s *Store) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	keys := make([]string, len(engine.Algorithms), len(engine.Algorithms)+1+len(limits))
	for k, a := range engine.Algorithms {
		keys[k] = s.Key(key, a)
	}
	keys = append(keys, s.LeaseKey(key))
	for _, l := range limits {
		keys = append(keys, s.LimitKey(key, l))
	}
	if s.cluster && !sameSlot(keys) {
		// Only a key whose hash tag is empty (it starts with '}') spreads
		// its algorithms over slots; delete them one by one.
		pipe := s.client.Pipeline()
		for _, k := range keys {
			pipe.Del(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("upstream: reset %q: %w", key, err)
		}
	} else if err := s.client.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("upstream: reset %q: %w", key, err)
	}
	if err := s.client.Publish(ctx, s.ResetChannel(), key).Err(); err != nil {
		return fmt.Errorf("upstream: announce the reset of %q: %w", key, err)
	}
	return nil
}

// ResetChannel is the pub/sub channel resets are announced on: the prefix
// and "reset", so that sidecars sharing a prefix share resets.
func (s *Store) ResetChannel() string { return s.prefix + "reset" }

// Subscribe calls forget with each key that any sidecar resets, until ctx
// ends. go-redis reconnects the subscription by itself when Redis goes and
// comes back; a reset announced while it was away is missed, and the
// refusal it would have dropped simply runs out at its retry-after.
func (s *Store) Subscribe(ctx context.Context, forget func(key string)) {
	sub := s.client.Subscribe(ctx, s.ResetChannel())
	defer sub.Close()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			forget(m.Payload)
		}
	}
}

func sameSlot(keys []string) bool {
	for _, k := range keys[1:] {
		if redispipe.Slot(k) != redispipe.Slot(keys[0]) {
			return false
		}
	}
	return true
}
