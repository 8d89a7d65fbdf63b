package redisobserve

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/watch"
)

// Failovers seen. A promoted replica starts where its replication stream
// stopped: the charges its master had made and not yet sent are gone,
// and a request that is not durable may be admitted again. Redis says
// where a promoted master started: its INFO replication names the
// replication stream it continues (master_replid2, its old master's
// master_replid) and the offset it took over at (second_repl_offset). A
// sidecar that reads every master's INFO replication now and then
// (WatchReplication) thus sees each failover, and, when it had seen the
// old master further along than where the new one started, a lower bound
// of the bytes of writes lost: the offset went back. Writes made after
// its last look are lost unseen, so the count of failovers is the signal
// to act on, and the bytes a floor.

// Replication is what WatchReplication has seen, for INFO and metrics.
type Replication struct {
	// Failovers counts the masters seen that were promoted from a
	// replica of a master seen before.
	Failovers uint64
	// LostFailovers counts those that started behind an offset seen on
	// their old master, and LostBytes the replication bytes between.
	LostFailovers, LostBytes uint64
	// Replicas is the fewest replicas connected to a master at the last
	// look (-1 before the first): 0 means durable requests cannot hold.
	Replicas int
}

// maxStreams bounds the replication streams remembered: one per master,
// and one more per master restarted without persistence (a new stream
// that continues none).
const maxStreams = 256

// replWatch keeps the highest offset seen per replication stream.
type replWatch struct {
	mu    sync.Mutex
	seen  map[string]int64 // master_replid → highest master_repl_offset seen; guarded by mu
	stats Replication      // guarded by mu
}

// masterRepl is a master's INFO replication, the fields read.
type masterRepl struct {
	replid, replid2      string
	offset, secondOffset int64
	replicas             int
}

// observe records one master's state.
func (w *replWatch) observe(m masterRepl) {
	if w.seen == nil {
		w.seen = map[string]int64{}
	}
	if _, known := w.seen[m.replid]; !known {
		if old, ok := w.seen[m.replid2]; ok {
			// Promoted from a replica of a master seen before: it holds
			// the old stream up to second_repl_offset-1.
			w.stats.Failovers++
			if lost := old - (m.secondOffset - 1); lost > 0 {
				w.stats.LostFailovers++
				w.stats.LostBytes += uint64(lost)
			}
			delete(w.seen, m.replid2) // counted once
		}
		if len(w.seen) >= maxStreams {
			clear(w.seen)
		}
	}
	w.seen[m.replid] = max(w.seen[m.replid], m.offset)
}

// parseRepl reads INFO replication; ok is false unless it is a master's.
func parseRepl(info string) (m masterRepl, ok bool) {
	role := ""
	for line := range strings.SplitSeq(info, "\n") {
		k, v, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found {
			continue
		}
		switch k {
		case "role":
			role = v
		case "master_replid":
			m.replid = v
		case "master_replid2":
			m.replid2 = v
		case "master_repl_offset":
			m.offset, _ = strconv.ParseInt(v, 10, 64)
		case "second_repl_offset":
			m.secondOffset, _ = strconv.ParseInt(v, 10, 64)
		case "connected_slaves":
			m.replicas, _ = strconv.Atoi(v)
		}
	}
	return m, role == "master" && m.replid != ""
}

// WatchReplication reads every master's INFO replication now and every
// interval until ctx ends, counting the failovers it sees (Replication).
// A master that does not answer is skipped until the next look. behind,
// when not nil, is called after a look that saw a failover or a master
// that did not answer: a Cluster client's slot map may still send a dead
// master's slots to it. A sidecar that sends nothing there would
// otherwise learn it at its next request there, answered by the failure
// mode.
func (o *Observer) WatchReplication(ctx context.Context, every time.Duration, behind func()) {
	look := func() {
		if !o.lookAtReplication(ctx, every) && behind != nil && ctx.Err() == nil {
			behind()
		}
	}
	look()
	watch.Every(ctx, every, look)
}

// lookAtReplication reads each master's INFO replication once, and
// reports whether every master answered and none was newly promoted.
func (o *Observer) lookAtReplication(ctx context.Context, timeout time.Duration) (settled bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		mu     sync.Mutex
		looked []masterRepl
	)
	err := o.eachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if m, ok := parseRepl(info); ok {
			mu.Lock()
			looked = append(looked, m)
			mu.Unlock()
		}
		return nil
	})
	if len(looked) == 0 {
		return false
	}
	w := &o.repl
	w.mu.Lock()
	before := w.stats
	fewest := looked[0].replicas
	for _, m := range looked {
		w.observe(m)
		fewest = min(fewest, m.replicas)
	}
	w.stats.Replicas = fewest
	after := w.stats
	w.mu.Unlock()
	if after.Failovers > before.Failovers {
		o.log.Warn("a replica took over from its master: charges the master had not replicated are lost, and requests that are not durable may be admitted again",
			"upstream_failovers", after.Failovers, "upstream_failover_lost_bytes_seen", after.LostBytes-before.LostBytes)
	}
	return err == nil && after.Failovers == before.Failovers
}

// Replication returns what WatchReplication has seen so far.
func (o *Observer) Replication() Replication {
	w := &o.repl
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// infoReplication is INFO's fields for failovers, in the Upstream
// section after the store's durable calls: the replicas connected, the
// failovers seen and the writes known lost.
func (o *Observer) infoReplication() [][2]string {
	r := o.Replication()
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return [][2]string{{"upstream_replicas", strconv.Itoa(r.Replicas)},
		{"upstream_failovers", u(r.Failovers)}, {"upstream_failovers_lost_writes", u(r.LostFailovers)},
		{"upstream_failover_lost_bytes", u(r.LostBytes)}}
}
