// Package fleet learns how many sidecars share one upstream Redis, so that
// a sidecar deciding alone while Redis is away (the local failure mode)
// enforces its share of each limit, not the whole of it (engine/chain,
// share.go): N sidecars each enforcing the whole limit admit N times it.
//
// While Redis answers, each sidecar says it is alive once a Period: one
// sorted set under the store's key prefix holds a member per sidecar
// process, scored by Redis's own clock (TIME), so that sidecars whose
// clocks disagree still agree on who is live. Each beat adds or refreshes
// this sidecar's member, drops the members that no beat refreshed for a
// Window (three periods), reads how many are left, and sets the key to
// expire a Window later, so that a fleet that is gone leaves nothing
// behind. The count learned (at least 1) is kept, with when it was
// learned, through an outage: what Redis last said is all a sidecar can
// know while Redis is away.
//
// A count read just after an outage is low: the other sidecars' members
// aged out while Redis was away and come back one beat at a time. So for
// one Window after a beat that follows failed ones (or the first), the
// count kept only rises; after that it follows Redis's.
//
// The commands are plain ones on one key (TIME, ZADD, ZREMRANGEBYSCORE,
// ZCARD, PEXPIRE; ZREM when leaving), sent through the go-redis client the
// store's background work shares, so they work on one Redis, through
// Sentinel and on Cluster, where TIME is asked of the key's master. The
// package knows nothing of the store, the chain or the scripts.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config configures a Membership. Zero values mean the documented
// defaults.
type Config struct {
	// Client reaches the upstream Redis: a *redis.Client (standalone, or
	// Sentinel's failover client) or a *redis.ClusterClient. Required.
	Client redis.UniversalClient
	// Key is the sorted set of the fleet's members: under the store's
	// prefix, shared by every sidecar of the fleet. Required.
	Key string
	// ID is this sidecar's member, unique per process. Empty means the
	// host's name, the process id and 8 random bytes: a restarted
	// container has the same host name and often the same pid.
	ID string
	// Period is how often the sidecar says it is alive. Zero means 1s. A
	// member not refreshed for three periods is no longer counted.
	Period time.Duration
	// Now is the local clock, which says how old the count is and ends
	// the rise-only window after an outage; scores are Redis's time.
	// Nil means time.Now.
	Now func() time.Time
	// Log gets a warning when Redis refuses a beat (an ACL without the
	// commands, a key of another type); outages are the store's to log.
	// Nil means slog.Default().
	Log *slog.Logger
}

// Membership is one sidecar's membership of the fleet: it says this
// sidecar is alive and keeps the count of live sidecars last learned.
// Its methods are safe for concurrent use.
type Membership struct {
	client redis.UniversalClient
	key    string
	id     string
	period time.Duration
	window time.Duration // 3 periods: how long a member counts unrefreshed
	now    func() time.Time
	log    *slog.Logger

	n        atomic.Int64 // the count kept, at least 1: Sidecars
	beats    atomic.Uint64
	failures atomic.Uint64

	mu      sync.Mutex
	learned time.Time // when n was last learned; zero: never; guarded by mu
	upSince time.Time // the first beat of this run of good ones; zero after a failure; guarded by mu
	warned  bool      // a refusal was logged in this run of failures; guarded by mu
}

// New returns a Membership counting 1 sidecar, itself. It does not talk
// to Redis: Beat and Run do.
func New(cfg Config) (*Membership, error) {
	if cfg.Client == nil || cfg.Key == "" {
		return nil, errors.New("fleet: Config.Client and Config.Key are required")
	}
	if cfg.Period < 0 {
		return nil, errors.New("fleet: negative Config.Period")
	}
	if cfg.Period == 0 {
		cfg.Period = time.Second
	}
	if cfg.ID == "" {
		cfg.ID = newID()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	m := &Membership{client: cfg.Client, key: cfg.Key, id: cfg.ID, period: cfg.Period, window: 3 * cfg.Period,
		now: cfg.Now, log: cfg.Log}
	m.n.Store(1)
	return m, nil
}

// newID is a member name unique to this process: readable where it comes
// from (the host's name is a pod's), random past that.
func newID() string {
	host, _ := os.Hostname()
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand's Read never fails
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
}

// ID is this sidecar's member in the key.
func (m *Membership) ID() string { return m.id }

// Key is the sorted set the fleet's members are in.
func (m *Membership) Key() string { return m.key }

// Sidecars is the count of live sidecars last learned, at least 1 (this
// one): the N of the local share. It is an atomic load, for every local
// decision.
func (m *Membership) Sidecars() int { return int(m.n.Load()) }

// Run says the sidecar is alive now and every Period until ctx ends, each
// beat bounded by a Period. It does not leave the fleet: Leave does.
func (m *Membership) Run(ctx context.Context) {
	t := time.NewTicker(m.period)
	defer t.Stop()
	for {
		bctx, cancel := context.WithTimeout(ctx, m.period)
		_ = m.Beat(bctx) // kept in Stats, logged where it says something new
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Beat says once that the sidecar is alive and learns the count of live
// sidecars. On failure the count kept is unchanged.
func (m *Membership) Beat(ctx context.Context) error {
	m.beats.Add(1)
	now, err := m.redisTime(ctx)
	if err == nil {
		var count int64
		if count, err = m.refresh(ctx, now); err == nil {
			m.learn(count)
			return nil
		}
	}
	err = fmt.Errorf("fleet: beat on %s: %w", m.key, err)
	m.failed(err)
	return err
}

// redisTime is the time of the Redis that holds the key: on Cluster, its
// master's (any node would do as well as their clocks agree, but one
// clock for every sidecar is one thing less to doubt).
func (m *Membership) redisTime(ctx context.Context) (time.Time, error) {
	var c redis.Cmdable = m.client
	if cc, ok := m.client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, m.key)
		if err != nil {
			return time.Time{}, err
		}
		c = node
	}
	return c.Time(ctx).Result()
}

// refresh scores this sidecar's member now (Redis's time), drops the
// members older than the window, and returns how many are left. The key
// lives a window past the last beat of any sidecar.
func (m *Membership) refresh(ctx context.Context, now time.Time) (int64, error) {
	ms := now.UnixMilli()
	var card *redis.IntCmd
	_, err := m.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, m.key, redis.Z{Score: float64(ms), Member: m.id})
		p.ZRemRangeByScore(ctx, m.key, "-inf", "("+strconv.FormatInt(ms-m.window.Milliseconds(), 10))
		card = p.ZCard(ctx, m.key)
		p.PExpire(ctx, m.key, m.window)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return card.Val(), nil
}

// learn keeps count, at least 1, as the sidecars live now; within a
// window of the first beat after failures, only if it is more than the
// count kept (see the package doc).
func (m *Membership) learn(count int64) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.upSince.IsZero() {
		m.upSince = now
	}
	n := max(1, count)
	if now.Sub(m.upSince) < m.window {
		n = max(n, m.n.Load())
	}
	if was := m.n.Swap(n); was != n {
		m.log.Debug("the live sidecars of the fleet changed", "sidecars", n, "was", was, "key", m.key)
	}
	m.learned, m.warned = now, false
}

// failed notes a failed beat: the next good one starts a rise-only
// window. A refusal of the membership's own (an ACL without its commands,
// NOPERM; the key of another type, WRONGTYPE) is logged once per run of
// failures: without it the sidecar never learns the fleet, and decides by
// the whole limit when Redis is away. Every other failure (Redis away,
// a wrong password or address) is the store's to log: it fails the
// store's checks alike.
func (m *Membership) failed(err error) {
	m.failures.Add(1)
	refused := redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "WRONGTYPE")
	m.mu.Lock()
	m.upSince = time.Time{}
	warn := !m.warned && refused
	m.warned = m.warned || warn
	m.mu.Unlock()
	if warn {
		m.log.Warn("Redis refused this sidecar's fleet membership: while Redis is away it enforces the share of each limit it last learned "+
			"(the whole limit if none); the ACL user needs TIME, ZADD, ZREMRANGEBYSCORE, ZCARD, PEXPIRE and ZREM on the key, "+
			"which no other program may use", "key", m.key, "err", err)
	}
}

// Leave takes this sidecar's member out of the fleet, so that the others
// count one fewer at their next beat rather than a window later. The
// caller bounds the wait with ctx.
func (m *Membership) Leave(ctx context.Context) error {
	if err := m.client.ZRem(ctx, m.key, m.id).Err(); err != nil {
		return fmt.Errorf("fleet: leave %s: %w", m.key, err)
	}
	return nil
}

// Stats is what the membership knows, for INFO and metrics.
type Stats struct {
	Sidecars int       // the count kept, at least 1
	Learned  time.Time // when it was learned; zero: never
	Beats    uint64    // beats tried
	Failures uint64    // beats that failed
}

// Stats returns the count kept and the beats so far.
func (m *Membership) Stats() Stats {
	m.mu.Lock()
	learned := m.learned
	m.mu.Unlock()
	return Stats{Sidecars: m.Sidecars(), Learned: learned, Beats: m.beats.Load(), Failures: m.failures.Load()}
}

// Info is INFO's fields for the membership, in its Upstream section: the
// key and member (to look at with redis-cli ZRANGE key 0 -1 WITHSCORES),
// the count kept and its age in ms (-1: never learned), and the beats
// that failed.
func (m *Membership) Info() [][2]string {
	s := m.Stats()
	age := int64(-1)
	if !s.Learned.IsZero() {
		age = m.now().Sub(s.Learned).Milliseconds()
	}
	return [][2]string{{"fleet_key", m.key}, {"fleet_member", m.id}, {"fleet_sidecars", strconv.Itoa(s.Sidecars)},
		{"fleet_learned_ms_ago", strconv.FormatInt(age, 10)}, {"fleet_beat_failures", strconv.FormatUint(s.Failures, 10)}}
}
