package redisobserve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/watch"
)

// Eviction. Every key the store writes has a TTL, so under a maxmemory
// policy that evicts (allkeys-* or volatile-*) Redis may drop a limit's
// state under memory pressure, and the limit starts again from nothing:
// in one run a key went from 2 remaining back to 4, in another one key
// was admitted 32 times against its limit of 5. Nothing fails, so
// nothing else would tell. ReadMemory asks every master its policy
// (CONFIG GET, or INFO memory where CONFIG is refused, as managed Redis
// services refuse it) and how many keys it has evicted (INFO stats); a
// policy that can evict is one warning naming the fix, an INFO field and
// a metric, and the evictions Redis counts are exported as they grow.
// Under noeviction a full Redis refuses writes instead: the check fails
// with cause oom, and each request gets its failure mode's answer.

// NodeMemory is what one master said of its memory.
type NodeMemory struct {
	// Addr is the master's address ("master" behind Sentinel).
	Addr string
	// Policy is its maxmemory-policy; empty when neither CONFIG GET nor
	// INFO memory answered.
	Policy string
	// From says where Policy was read: "config" or "info".
	From string
	// MaxMemory is its maxmemory in bytes (0: no limit), from INFO memory.
	MaxMemory int64
	// Evicted is its evicted_keys, the keys it has evicted since it
	// started (all keys, not only Sluice's).
	Evicted uint64
	// Err is why the node could not be read; nil when it was.
	Err error
}

// Evicts says whether policy can evict Sluice's keys: every policy but
// noeviction, since every key Sluice writes has a TTL.
func Evicts(policy string) bool {
	return strings.HasPrefix(policy, "allkeys-") || strings.HasPrefix(policy, "volatile-")
}

// Memory is what the masters said at the last read.
type Memory struct {
	// Read is when; zero: never.
	Read  time.Time
	Nodes []NodeMemory // by address
	// EvictedKeys is the growth of the masters' evicted_keys since the
	// first read: the keys Redis evicted while this sidecar watched.
	EvictedKeys uint64
}

// Evicting are the masters whose policy can evict Sluice's keys.
func (m Memory) Evicting() []NodeMemory {
	var ev []NodeMemory
	for _, n := range m.Nodes {
		if Evicts(n.Policy) {
			ev = append(ev, n)
		}
	}
	return ev
}

// Policies are the masters' policies, each once, in order ("unknown" for
// a master that could not be read).
func (m Memory) Policies() []string {
	var ps []string
	for _, n := range m.Nodes {
		p := n.Policy
		if p == "" {
			p = "unknown"
		}
		if !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

type memory struct {
	mu     sync.Mutex
	last   Memory            // guarded by mu
	counts map[string]uint64 // evicted_keys by master at the last read; guarded by mu
	warned string            // the evicting masters last warned of; guarded by mu
}

// Memory returns what the masters said at the last read.
func (o *Observer) Memory() Memory {
	o.memory.mu.Lock()
	defer o.memory.mu.Unlock()
	m := o.memory.last
	m.Nodes = slices.Clone(m.Nodes)
	return m
}

// ReadMemory asks every master its eviction policy and its evicted keys,
// and logs a policy that can evict (once, until it changes) and keys
// evicted since the last read (at most once a warnEvery). Its error
// names the masters it could not read; those it read count.
func (o *Observer) ReadMemory(ctx context.Context) error {
	switch o.client.(type) {
	case *redis.ClusterClient, *redis.Client:
	default:
		return fmt.Errorf("redisobserve: a %T has no masters to read", o.client)
	}
	var mu sync.Mutex
	var nodes []NodeMemory
	read := func(ctx context.Context, c *redis.Client) error {
		n := readNode(ctx, c)
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return n.Err
	}
	err := o.eachMaster(ctx, read)
	slices.SortFunc(nodes, func(a, b NodeMemory) int { return strings.Compare(a.Addr, b.Addr) })
	o.noteMemory(nodes)
	if err != nil {
		return fmt.Errorf("redisobserve: read the masters' eviction policy: %w", err)
	}
	return nil
}

// readNode reads one master: CONFIG GET maxmemory-policy, INFO memory and
// INFO stats in one round trip.
func readNode(ctx context.Context, c *redis.Client) NodeMemory {
	n := NodeMemory{Addr: c.Options().Addr}
	if n.Addr == "FailoverClient" {
		n.Addr = "master"
	}
	pipe := c.Pipeline()
	conf := pipe.ConfigGet(ctx, "maxmemory-policy")
	mem := pipe.Info(ctx, "memory")
	stats := pipe.Info(ctx, "stats")
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	if p := conf.Val()["maxmemory-policy"]; conf.Err() == nil && p != "" {
		n.Policy, n.From = p, "config"
	}
	if info, err := mem.Result(); err == nil {
		if p, ok := infoField(info, "maxmemory_policy"); ok && n.Policy == "" {
			n.Policy, n.From = p, "info"
		}
		if v, ok := infoField(info, "maxmemory"); ok {
			n.MaxMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if info, err := stats.Result(); err == nil {
		if v, ok := infoField(info, "evicted_keys"); ok {
			n.Evicted, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	if n.Policy == "" {
		n.Err = fmt.Errorf("%s: neither CONFIG GET maxmemory-policy (%v) nor INFO memory (%v) told its policy", n.Addr,
			errors.Join(conf.Err()), errors.Join(mem.Err()))
	}
	return n
}

// noteMemory keeps what the masters said, adds their evictions to the
// growth, and logs what changed.
func (o *Observer) noteMemory(nodes []NodeMemory) {
	m := &o.memory
	m.mu.Lock()
	if m.counts == nil {
		m.counts = map[string]uint64{}
	}
	var grew uint64
	for i := range nodes {
		n := &nodes[i]
		if n.Policy == "" {
			// Not read: what it said last stands, so that a master that
			// does not answer for a while is not taken to have changed.
			if k := slices.IndexFunc(m.last.Nodes, func(x NodeMemory) bool { return x.Addr == n.Addr }); k >= 0 {
				err := n.Err
				*n = m.last.Nodes[k]
				n.Err = err
			}
			continue
		}
		if was, ok := m.counts[n.Addr]; ok {
			if n.Evicted >= was {
				grew += n.Evicted - was
			} else {
				grew += n.Evicted // restarted, or another master behind the address
			}
		}
		m.counts[n.Addr] = n.Evicted
	}
	m.last = Memory{Read: o.now(), Nodes: nodes, EvictedKeys: m.last.EvictedKeys + grew}
	var evicting []string
	var maxmem []string
	for _, n := range m.last.Evicting() {
		evicting = append(evicting, n.Addr+"="+n.Policy)
		maxmem = append(maxmem, n.Addr+"="+strconv.FormatInt(n.MaxMemory, 10))
	}
	list := strings.Join(evicting, ",")
	changed := list != m.warned
	m.warned = list
	total := m.last.EvictedKeys
	m.mu.Unlock()
	switch {
	case changed && list != "":
		o.log.Warn("the upstream Redis may evict Sluice's keys, which resets their limits: set maxmemory-policy noeviction, or give Sluice a Redis of its own",
			"maxmemory_policy", list, "maxmemory", strings.Join(maxmem, ","))
	case changed:
		o.log.Info("the upstream Redis no longer evicts Sluice's keys", "maxmemory_policy", strings.Join(m.last.Policies(), ","))
	}
	if grew > 0 {
		o.warner.warn("evicted", "the upstream Redis evicted keys: limits whose state it dropped start again from nothing",
			"evicted_keys", grew, "evicted_keys_total", total, "maxmemory_policy", list)
	}
}

// WatchMemory reads the masters' memory (ReadMemory) every interval
// until ctx ends. A read that fails is logged at most once a warnEvery;
// the Observer keeps what it read last.
func (o *Observer) WatchMemory(ctx context.Context, every time.Duration) {
	watch.Every(ctx, every, func() {
		rctx, cancel := context.WithTimeout(ctx, max(every/2, time.Second))
		if err := o.ReadMemory(rctx); err != nil && ctx.Err() == nil {
			o.warner.warn("memory", "cannot read the upstream's eviction policy", "err", err)
		}
		cancel()
	})
}

// infoField is the value of field name in INFO's reply text, whose lines
// are "name:value" under "# Section" titles.
func infoField(info, name string) (string, bool) {
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if ok && k == name {
			return v, true
		}
	}
	return "", false
}
