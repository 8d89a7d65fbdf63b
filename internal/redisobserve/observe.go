// Package redisobserve watches the Redis a store decides on, and says
// what it sees: whether the Redis can be used, since when and why not
// (a cause an operator acts on: cause.go, health.go), whether its
// maxmemory policy may evict the limits' state (eviction.go), and the
// failovers its masters went through (failover.go). It also routes
// go-redis's own log lines into the process's log (log.go).
//
// It is apart from the store (package upstream) because none of this is
// on a decision's way: the store plans, sends and decodes, and tells the
// Observer the outcome of its checks (Check); app tells it the breaker's
// changes (Observe) and runs its watchers. It knows a go-redis client and
// nothing of what the store's commands mean: it imports no engine, no
// script and no store (tests/imports_test.go says so), so what it reads
// (INFO, CONFIG GET) and what it names (a failure's cause) can be tested
// against a real Redis on their own.
package redisobserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/watch"
)

// Config configures an Observer. Zero values mean the documented
// defaults.
type Config struct {
	// Client is the Redis watched: a *redis.Client (standalone, or
	// Sentinel through a failover client) or a *redis.ClusterClient, the
	// store's own. Required.
	Client redis.UniversalClient
	// Log gets a line for each change seen. Nil means slog.Default().
	Log *slog.Logger
	// Now pins the wall clock, for tests. Nil means time.Now.
	Now func() time.Time
}

// Observer keeps what it has seen of one Redis. It is safe for
// concurrent use.
type Observer struct {
	client redis.UniversalClient
	log    *slog.Logger
	now    func() time.Time
	// reach is whether the upstream can be used, and warner rate-limits
	// the warnings that say why not (health.go); memory is what the
	// masters say of eviction (eviction.go); repl what WatchReplication
	// saw of the masters' replication streams (failover.go).
	reach  reach
	warner *warner
	memory memory
	repl   replWatch
	// checkedNode is set once Check found the server no Cluster node,
	// until a check fails.
	checkedNode atomic.Bool
	// lastDial is the last dial that failed with a telling cause (cause.go).
	lastDial atomic.Pointer[dialFailure]
}

// New returns an Observer of cfg.Client. It does not talk to Redis; it
// adds a hook to the client that keeps its last failed dial's cause.
func New(cfg Config) (*Observer, error) {
	if cfg.Client == nil {
		return nil, errors.New("redisobserve: Config.Client is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	o := &Observer{client: cfg.Client, log: cfg.Log, now: cfg.Now}
	o.repl.stats.Replicas = -1
	o.warner = newWarner(cfg.Log, warnEvery, cfg.Now)
	o.watchDials()
	return o, nil
}

// Check runs call, the store's check (the call decisions make, with
// nothing to decide), names the cause of its failure, and records its
// outcome (Reach). Off Cluster, it first makes sure, once per outage,
// that the server is no Cluster node: a check that declares no key would
// pass on one, and only the first decisions would meet MOVED. Its error
// is an *Error.
func (o *Observer) Check(ctx context.Context, call func(context.Context) error) error {
	started := time.Now()
	err := o.checkNode(ctx)
	if err == nil {
		err = call(ctx)
	}
	if err != nil {
		o.checkedNode.Store(false)
		err = o.diagnose(err, started)
	}
	o.observe(err)
	return err
}

// checkNode fails on a Cluster node reached as one server (redis://).
// An INFO that the ACL denies proves nothing either way, and is let be.
func (o *Observer) checkNode(ctx context.Context) error {
	if _, cluster := o.client.(*redis.ClusterClient); cluster || o.checkedNode.Load() {
		return nil
	}
	info, err := o.client.Info(ctx, "cluster").Result()
	var rerr redis.Error
	if err != nil && !errors.As(err, &rerr) {
		return err
	}
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return &Error{Cause: CauseMoved, Err: errors.New("the server has cluster_enabled:1")}
	}
	o.checkedNode.Store(true)
	return nil
}

// Info is the Observer's fields of INFO's Upstream section, as
// name-value pairs in order, after the store's own: the fewest replicas
// connected to a master, the failovers seen and the writes known lost
// (failover.go); whether the upstream can be used and since when
// (upstream_state: up, down or unknown before the first check; the time
// in seconds since the Unix epoch), the last failure's cause and error
// (kept after recovery); and what the masters said of eviction at the
// last read (their policies, whether any can evict Sluice's keys, and
// the keys Redis evicted since this sidecar started watching).
func (o *Observer) Info() [][2]string {
	r := o.Reach()
	state, since := "unknown", "0"
	if r.Known {
		state = "down"
		if r.Up {
			state = "up"
		}
		since = strconv.FormatInt(r.Since.Unix(), 10)
	}
	var failures uint64
	for _, n := range r.Failures {
		failures += n
	}
	m := o.Memory()
	evicts := "0"
	if len(m.Evicting()) > 0 {
		evicts = "1"
	}
	return slices.Concat(o.infoReplication(), [][2]string{{"upstream_state", state}, {"upstream_state_since", since},
		{"upstream_failures", strconv.FormatUint(failures, 10)},
		{"upstream_last_error_cause", string(r.Cause)}, {"upstream_last_error", watch.OneLine(r.Err)},
		{"upstream_maxmemory_policy", strings.Join(m.Policies(), ",")}, {"upstream_eviction_possible", evicts},
		{"upstream_evicted_keys", strconv.FormatUint(m.EvictedKeys, 10)}})
}

// eachMaster calls read on the client of every master: each Cluster
// master's at once, or the one Redis's.
func (o *Observer) eachMaster(ctx context.Context, read func(context.Context, *redis.Client) error) error {
	switch c := o.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, read)
	case *redis.Client:
		return read(ctx, c)
	}
	return fmt.Errorf("redisobserve: a %T has no masters to read", o.client)
}
