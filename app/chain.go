package app

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/internal/redisurl"
	"github.com/sluice-rl/sluice/internal/tlsfiles"
	"github.com/sluice-rl/sluice/respserver"
	"github.com/sluice-rl/sluice/telemetry"
	"github.com/sluice-rl/sluice/upstream"
)

// sharedStore is the central Redis and the chain in front of it
// (engine/chain: guard, deny cache, batcher, in the order chain.New
// owns). Leases go from the guard straight to upstream.
type sharedStore struct {
	kind  redisurl.Kind
	up    *upstream.Store // its replies are read on the first event loop (app.go)
	chain *chain.Chain
	close func()
}

func newChain(cfg Config, mem *memstore.Store, tel *telemetry.Telemetry, log *slog.Logger) (c *sharedStore, err error) {
	var roots *x509.CertPool
	if cfg.UpstreamTLSCA != "" {
		if roots, err = tlsfiles.Pool(cfg.UpstreamTLSCA); err != nil {
			return nil, fmt.Errorf("invalid --upstream-tls-ca: %w", err)
		}
	}
	upstream.LogTo(log)
	client, kind, err := upstream.NewClient(cfg.Upstream, roots)
	if err != nil {
		return nil, fmt.Errorf("invalid --upstream: %w", err)
	}
	c = &sharedStore{kind: kind}
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
	up, err := upstream.New(upstream.Config{Client: client, Prefix: cfg.KeyPrefix, Log: log, Replicas: cfg.DurableReplicas})
	if err != nil {
		return nil, err
	}
	closers = append(closers, up.Close)
	c.up = up
	if c.chain, err = chain.New(chain.Config{Store: up, Shard: up.Shards(), Local: mem, Default: cfg.OnFailure,
		Timeout: cfg.UpstreamTimeout, MaxBatch: cfg.BatchMax, MaxInFlight: cfg.BatchInFlight, OnBatch: tel.ObserveBatch,
		DenyCacheSize: cfg.DenyCacheSize, Check: up.Check,
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
	closers = append(closers, c.chain.Close)
	// Know from the start whether Redis can decide: readiness and the
	// breaker follow the check, and the chain keeps checking while no
	// request asks.
	startCtx, cancel := context.WithTimeout(context.Background(), max(cfg.UpstreamTimeout, time.Second))
	if err := c.chain.Check(startCtx); err != nil {
		log.Warn("the upstream Redis cannot decide: deciding by each request's failure mode until it can", "err", err)
	}
	cancel()

	// Resets made through any sidecar reach this one: drop what it
	// remembers of the key, the refusal and the fallback's local count.
	subCtx, stopSub := context.WithCancel(context.Background())
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		up.Subscribe(subCtx, func(key string) {
			c.chain.Forget(key)
			_ = mem.Reset(subCtx, key)
		})
	}()
	closers = append(closers, func() { stopSub(); <-subDone })
	// Failovers seen, and the replicas durable requests wait for.
	replCtx, stopRepl := context.WithCancel(context.Background())
	replDone := make(chan struct{})
	go func() {
		defer close(replDone)
		up.WatchReplication(replCtx, time.Second)
	}()
	closers = append(closers, func() { stopRepl(); <-replDone })
	log.Info("using the upstream Redis", "kind", string(kind), "addrs", redisurl.Redact(cfg.Upstream),
		"key_prefix", cfg.KeyPrefix, "on_upstream_failure", cfg.OnFailure.String(),
		"upstream_timeout", cfg.UpstreamTimeout, "batch_max", cfg.BatchMax, "batch_inflight", cfg.BatchInFlight,
		"deny_cache_size", cfg.DenyCacheSize)
	return c, nil
}

// ready is /readyz: the sidecar can decide unless the upstream is failing
// (the breaker, which the idle checks keep current) and the default
// failure mode refuses everything, or unless asked to wait for the rate
// limit service's configuration and it has no domain yet.
func (s *Sidecar) ready() error {
	if rules := s.rlsRules(); s.cfg.RLSReadyWithConfig && (rules == nil || len(rules.Domains()) == 0) {
		return errors.New("the rate limit service has no domain configured yet, and --rls-ready-with-config waits for one")
	}
	c := s.chain
	if c == nil || s.cfg.OnFailure != engine.FailClosed || !c.chain.Stats().Guard.BreakerOpen {
		return nil
	}
	return errors.New("the upstream Redis cannot decide and --on-upstream-failure is deny")
}

// infoSections are INFO's Sluice sections, each written by the part
// that holds its data; INFO sluice shows them all.
func (s *Sidecar) infoSections() []respserver.InfoSection {
	secs := []respserver.InfoSection{
		{Name: "Memory", Fields: s.mem.InfoMemory},
		{Name: "Leases", Fields: func() [][2]string { return append(s.svc.InfoLeases(), s.mem.InfoLeases()...) }},
		{Name: "Policies", Fields: func() [][2]string {
			if s.policies == nil {
				return s.live.Info(s.cfg.Policies)
			}
			return append(s.live.Info(s.cfg.Policies), s.policies.Info("policies_")...)
		}},
		{Name: "Rls", Fields: func() [][2]string {
			f := s.rules.Info()
			if s.xds != nil {
				f = s.xds.Info()
			}
			if ov := s.overlay.Load(); ov != nil {
				f = append(f, ov.Info()...)
			}
			return f
		}},
		{Name: "Recording", Fields: func() [][2]string { return s.rec.Info() }},
		s.upstreamInfo(),
	}
	if c := s.chain; c != nil {
		secs = append(secs, respserver.InfoSection{Name: "Batcher", Fields: c.chain.InfoBatcher},
			respserver.InfoSection{Name: "Denycache", Fields: c.chain.InfoDenyCache})
	}
	// The admin server starts after the RESP door is built (app.go).
	return append(secs, respserver.InfoSection{Name: "Admin", Fields: func() [][2]string { return s.admin.Info() }})
}

// upstreamInfo is INFO's Upstream section: the address (its kind, its
// hosts), then the store's fields and the chain's.
func (s *Sidecar) upstreamInfo() respserver.InfoSection {
	c := s.chain
	if c == nil {
		return respserver.InfoSection{Name: "Upstream", Fields: func() [][2]string { return [][2]string{{"upstream", "none"}} }}
	}
	addr := [][2]string{{"upstream", string(c.kind)}, {"upstream_addrs", redisurl.Redact(s.cfg.Upstream)}}
	return respserver.InfoSection{Name: "Upstream", Fields: func() [][2]string {
		return slices.Concat(addr, c.up.Info(), c.chain.InfoUpstream())
	}}
}
