package app

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/respserver"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/telemetry"
	"github.com/sluice-rl/sluice/upstream"
)

// chain is what stands in front of the central Redis, in this order from
// the service down:
//
//	guard     answers by each request's failure mode while Redis cannot
//	          (the in-memory store enforcing limits locally, by default)
//	deny      a refused key is refused locally until its retry-after
//	batcher   all connections' decisions share round trips
//	upstream  the Redis store: the batch script, one call per batch
//
// Leases (RL.ACQUIRE, RL.RELEASE) go from the guard straight to upstream.
type chain struct {
	kind    upstream.Kind
	up      *upstream.Store // its replies are read on the first event loop (app.go)
	batcher *engine.Batcher
	deny    *engine.DenyCache
	guard   *engine.Guard
	close   func()
}

func newChain(cfg Config, mem *engine.MemoryStore, tel *telemetry.Telemetry, log *slog.Logger) (c *chain, err error) {
	var roots *x509.CertPool
	if cfg.UpstreamTLSCA != "" {
		if roots, err = upstream.LoadCA(cfg.UpstreamTLSCA); err != nil {
			return nil, fmt.Errorf("invalid --upstream-tls-ca: %w", err)
		}
	}
	upstream.LogTo(log)
	client, kind, err := upstream.NewClient(cfg.Upstream, roots)
	if err != nil {
		return nil, fmt.Errorf("invalid --upstream: %w", err)
	}
	c = &chain{kind: kind}
	var closers []func()
	c.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	closers = append(closers, func() { client.Close() })
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	up, err := upstream.New(upstream.Config{Client: client, Prefix: cfg.KeyPrefix})
	if err != nil {
		return nil, err
	}
	closers = append(closers, up.Close)
	c.up = up
	if c.batcher, err = engine.NewBatcher(engine.BatcherConfig{Store: up, MaxBatch: cfg.BatchMax,
		MaxInFlight: cfg.BatchInFlight, Timeout: cfg.UpstreamTimeout, OnBatch: tel.ObserveBatch}); err != nil {
		return nil, err
	}
	closers = append(closers, c.batcher.Close)
	if c.deny, err = engine.NewDenyCache(engine.DenyCacheConfig{Store: c.batcher, MaxEntries: cfg.DenyCacheSize}); err != nil {
		return nil, err
	}
	if c.guard, err = engine.NewGuard(engine.GuardConfig{
		Store: c.deny, Local: mem, Default: cfg.OnFailure,
		// Leases go to Redis past the deny cache and the batcher: a
		// concurrency refusal is never remembered.
		Leaser: up, LeaseTimeout: cfg.UpstreamTimeout,
		OnBreaker: func(open bool, cause error) {
			if open {
				log.Warn("upstream Redis failing: deciding by each request's failure mode", "err", cause, "default", cfg.OnFailure.String())
			} else {
				log.Info("upstream Redis answering again")
			}
		},
	}); err != nil {
		return nil, err
	}
	// Know from the start whether Redis can decide, and keep knowing while
	// no request asks: readiness and the breaker follow the check.
	startCtx, cancel := context.WithTimeout(context.Background(), max(cfg.UpstreamTimeout, time.Second))
	if err := up.Check(startCtx); err != nil {
		log.Warn("the upstream Redis cannot decide: deciding by each request's failure mode until it can", "err", err)
		c.guard.Health(err)
	}
	cancel()
	healthCtx, stopHealth := context.WithCancel(context.Background())
	healthDone := make(chan struct{})
	go func() {
		defer close(healthDone)
		checkWhileIdle(healthCtx, up, c.guard, cfg.UpstreamTimeout)
	}()
	closers = append(closers, func() { stopHealth(); <-healthDone })

	// Resets made through any sidecar reach this one: drop what it
	// remembers of the key, the refusal and the fallback's local count.
	subCtx, stopSub := context.WithCancel(context.Background())
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		up.Subscribe(subCtx, func(key string) {
			c.deny.Forget(key)
			_ = mem.Reset(subCtx, key)
		})
	}()
	closers = append(closers, func() { stopSub(); <-subDone })
	log.Info("using the upstream Redis", "kind", string(kind), "addrs", upstream.Redact(cfg.Upstream),
		"key_prefix", cfg.KeyPrefix, "on_upstream_failure", cfg.OnFailure.String(),
		"upstream_timeout", cfg.UpstreamTimeout, "batch_max", cfg.BatchMax, "batch_inflight", cfg.BatchInFlight,
		"deny_cache_size", cfg.DenyCacheSize)
	return c, nil
}

// healthEvery is how often the upstream is checked while no decision
// has reached it.
const healthEvery = time.Second

// checkWhileIdle checks the upstream every healthEvery unless a round
// trip has answered meanwhile (decisions tell the breaker themselves), so
// that a sidecar sent no traffic, such as a pod out of service, still
// knows when Redis fails and when it is back.
func checkWhileIdle(ctx context.Context, up *upstream.Store, g *engine.Guard, timeout time.Duration) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(g.Stats().LastOutcome) < healthEvery {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := up.Check(cctx)
		cancel()
		if ctx.Err() == nil {
			g.Health(err)
		}
	}
}

// ready is /readyz: the sidecar can decide unless the upstream is failing
// (the breaker, which the idle checks keep current) and the default
// failure mode refuses everything.
func (s *Sidecar) ready() error {
	c := s.chain
	if c == nil || s.cfg.OnFailure != engine.FailClosed || !c.guard.Stats().BreakerOpen {
		return nil
	}
	return errors.New("the upstream Redis cannot decide and --on-upstream-failure is deny")
}

// infoSections are INFO's Sluice sections, read from the parts that hold
// their data; INFO sluice shows them all.
func (s *Sidecar) infoSections() []respserver.InfoSection {
	cfg := s.cfg
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	secs := []respserver.InfoSection{
		{Name: "Memory", Fields: func() [][2]string {
			return [][2]string{{"memory_store_keys", strconv.Itoa(s.mem.Len())}, {"memory_store_max_keys", strconv.Itoa(cfg.MaxKeys)}}
		}},
		{Name: "Leases", Fields: s.leaseInfo},
		{Name: "Policies", Fields: func() [][2]string {
			if s.live == nil {
				return [][2]string{{"policies", "0"}, {"policies_file", ""}}
			}
			set := s.live.Current()
			return [][2]string{{"policies", strconv.Itoa(set.Len())}, {"policies_file", cfg.Policies},
				{"policy_names", strings.Join(set.Names(), ",")}}
		}},
	}
	c := s.chain
	if c == nil {
		return append(secs, respserver.InfoSection{Name: "Upstream", Fields: func() [][2]string {
			return [][2]string{{"upstream", "none"}}
		}})
	}
	return append(secs,
		respserver.InfoSection{Name: "Upstream", Fields: func() [][2]string {
			g := c.guard.Stats()
			open := "0"
			if g.BreakerOpen {
				open = "1"
			}
			return [][2]string{{"upstream", string(c.kind)}, {"upstream_addrs", upstream.Redact(cfg.Upstream)},
				{"upstream_timeout_ms", strconv.FormatInt(cfg.UpstreamTimeout.Milliseconds(), 10)},
				{"breaker_open", open}, {"fallback_decisions", u(g.Fallbacks)},
				{"on_upstream_failure", cfg.OnFailure.String()}}
		}},
		respserver.InfoSection{Name: "Batcher", Fields: func() [][2]string {
			b := c.batcher.Stats()
			avg := "0"
			if b.Batches > 0 {
				avg = strconv.FormatFloat(float64(b.Decisions)/float64(b.Batches), 'f', 2, 64)
			}
			return [][2]string{{"batches", u(b.Batches)}, {"batched_decisions", u(b.Decisions)},
				{"avg_batch_size", avg}, {"batch_max", strconv.Itoa(cfg.BatchMax)}, {"batch_inflight", strconv.Itoa(cfg.BatchInFlight)}}
		}},
		respserver.InfoSection{Name: "Denycache", Fields: func() [][2]string {
			d := c.deny.Stats()
			return [][2]string{{"deny_cache_hits", u(d.Hits)}, {"deny_cache_misses", u(d.Misses)},
				{"deny_cache_evictions", u(d.Evictions)}, {"deny_cache_entries", strconv.Itoa(d.Entries)},
				{"deny_cache_size", strconv.Itoa(cfg.DenyCacheSize)}}
		}})
}

// leaseInfo is INFO's Leases section: the concurrency limiter's counts,
// summed over policies (the metrics have them per policy).
func (s *Sidecar) leaseInfo() [][2]string {
	t := s.svc.LeaseTotals()
	f := [][2]string{{"leases_held", strconv.FormatInt(t.Held, 10)}}
	for e, n := range t.Events {
		f = append(f, [2]string{"leases_" + service.LeaseEvent(e).String(), strconv.FormatUint(n, 10)})
	}
	return append(f, [2]string{"memory_store_leases", strconv.Itoa(s.mem.Leases())})
}
