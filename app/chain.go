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

func newChain(ctx context.Context, cfg Config, mem *memstore.Store, tel *telemetry.Telemetry, log *slog.Logger) (c *sharedStore, err error) {
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
	if cfg.UpstreamTLSCert != "" {
		cert, err := tlsfiles.LoadClientCert(cfg.UpstreamTLSCert, cfg.UpstreamTLSKey)
		if err == nil {
			err = upstream.UseClientCert(client, cert.GetClientCertificate)
		}
		if err != nil {
			client.Close()
			return nil, fmt.Errorf("invalid --upstream-tls-cert: %w", err)
		}
	}
	c = &sharedStore{kind: kind}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	c.close = closeAll
	closers = append(closers, func() { client.Close() })
	defer func() {
		if err != nil {
			closeAll() // c is nil by then
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
		// The breaker's changes are the upstream's reachability under
		// traffic; the store logs them, naming the cause.
		OnBreaker: func(open bool, cause error) {
			if open {
				up.Observe(cause)
			} else {
				up.Observe(nil)
			}
		},
	}); err != nil {
		return nil, err
	}
	closers = append(closers, c.chain.Close)
	// Know from the start whether Redis can decide: readiness and the
	// breaker follow the check (whose failure the store logs, naming its
	// cause), and the chain keeps checking while no request asks.
	if err := c.firstCheck(ctx, cfg, log); err != nil {
		return nil, err
	}
	closers = append(closers, c.watchMemory(cfg, log))

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
	closers = append(closers, func() { stopRepl(); waitAWhile(replDone) })
	log.Info("using the upstream Redis", "kind", string(kind), "addrs", redisurl.Redact(cfg.Upstream),
		"key_prefix", cfg.KeyPrefix, "on_upstream_failure", cfg.OnFailure.String(),
		"upstream_timeout", cfg.UpstreamTimeout, "batch_max", cfg.BatchMax, "batch_inflight", cfg.BatchInFlight,
		"deny_cache_size", cfg.DenyCacheSize)
	return c, nil
}

// firstCheck checks the upstream once; with --upstream-required, until it
// answers, within --upstream-required-timeout, and a failure is the
// start-up's error, naming the last cause. Nothing listens meanwhile, as
// envoyproxy/ratelimit opens no port until Redis answers.
func (c *sharedStore) firstCheck(ctx context.Context, cfg Config, log *slog.Logger) error {
	attempt := max(cfg.UpstreamTimeout, time.Second)
	if !cfg.UpstreamRequired {
		cctx, cancel := context.WithTimeout(ctx, attempt)
		defer cancel()
		_ = c.chain.Check(cctx)
		return nil
	}
	log.Info("waiting for the upstream Redis to answer (--upstream-required)", "addrs", redisurl.Redact(cfg.Upstream),
		"timeout", cfg.UpstreamRequiredTimeout)
	wctx, cancel := context.WithCancel(ctx)
	if cfg.UpstreamRequiredTimeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, cfg.UpstreamRequiredTimeout)
	}
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		cctx, cancelCheck := context.WithTimeout(wctx, attempt)
		err := c.chain.Check(cctx)
		cancelCheck()
		if err == nil {
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-wctx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return fmt.Errorf("stopped while waiting for the upstream Redis (--upstream-required): %w", err)
			}
			cause := upstream.CauseOf(err)
			return fmt.Errorf("the upstream Redis did not answer within %s (--upstream-required): %s: %w",
				cfg.UpstreamRequiredTimeout, cause.Hint(), err)
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// watchMemory reads the masters' eviction policy now (the warning at
// start) and every --upstream-eviction-check, until the returned stop.
func (c *sharedStore) watchMemory(cfg Config, log *slog.Logger) (stop func()) {
	if c.up.Reach().Up { // else the check's line said why, and the watch reads it later
		rctx, cancel := context.WithTimeout(context.Background(), max(cfg.UpstreamTimeout, time.Second))
		if err := c.up.ReadMemory(rctx); err != nil {
			log.Warn("cannot read the upstream's eviction policy", "err", err)
		}
		cancel()
	}
	if cfg.UpstreamEvictionCheck == 0 {
		return func() {}
	}
	wctx, cancelWatch := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.up.Watch(wctx, cfg.UpstreamEvictionCheck)
	}()
	return func() { cancelWatch(); waitAWhile(done) }
}

// waitAWhile waits for a background reader of the upstream to end after
// its context was cancelled, but not past a second: a read caught in
// go-redis's own retries (a Sentinel that refuses, dialled again and
// again) must not hold the sidecar's exit up; closing the client next
// ends it.
func waitAWhile(done <-chan struct{}) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
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
	if c == nil {
		return nil
	}
	if r := c.up.Reach(); s.cfg.UpstreamRequired && !r.Up {
		return fmt.Errorf("the upstream Redis cannot be used (%s) and --upstream-required is set", r.Cause)
	}
	if s.cfg.OnFailure != engine.FailClosed || !c.chain.Stats().Guard.BreakerOpen {
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
		{Name: "Reservations", Fields: s.svc.InfoReservations},
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

// upstreamStatus is the upstream's state, for the metrics.
func (c *sharedStore) upstreamStatus() telemetry.UpstreamStatus {
	r, m := c.up.Reach(), c.up.Memory()
	st := telemetry.UpstreamStatus{Known: r.Known, Reachable: r.Up, Since: r.Since, Failures: map[string]uint64{},
		EvictionPossible: len(m.Evicting()) > 0, EvictedKeys: m.EvictedKeys}
	for cause, n := range r.Failures {
		st.Failures[string(cause)] = n
	}
	if !m.Read.IsZero() {
		st.Policies = map[string]int{}
		for _, n := range m.Nodes {
			p := n.Policy
			if p == "" {
				p = "unknown"
			}
			st.Policies[p]++
		}
	}
	return st
}
