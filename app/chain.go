package app

import (
	"cmp"
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
	"github.com/sluice-rl/sluice/internal/fleet"
	"github.com/sluice-rl/sluice/internal/redisclient"
	"github.com/sluice-rl/sluice/internal/redisobserve"
	"github.com/sluice-rl/sluice/internal/redisurl"
	"github.com/sluice-rl/sluice/internal/settings"
	"github.com/sluice-rl/sluice/internal/tlsfiles"
	"github.com/sluice-rl/sluice/respserver"
	"github.com/sluice-rl/sluice/telemetry"
	"github.com/sluice-rl/sluice/upstream"
)

// sharedStore is the central Redis and the chain in front of it
// (engine/chain: guard, deny cache, batcher, in the order chain.New
// owns), and what watches that Redis. Leases go from the guard straight
// to upstream.
type sharedStore struct {
	kind  redisurl.Kind
	up    *upstream.Store // its replies are read on the first event loop (app.go)
	obs   *redisobserve.Observer
	chain *chain.Chain
	// fleet counts the live sidecars for the local failure mode's share;
	// nil with --local-share whole.
	fleet *fleet.Membership
	close func()
}

func newChain(ctx context.Context, cfg Config, mem *memstore.Store, tel *telemetry.Telemetry, log *slog.Logger) (c *sharedStore, err error) {
	var roots *x509.CertPool
	if cfg.UpstreamTLSCA != "" {
		if roots, err = tlsfiles.Pool(cfg.UpstreamTLSCA); err != nil {
			return nil, fmt.Errorf("invalid --upstream-tls-ca: %w", err)
		}
	}
	redisobserve.LogTo(log)
	client, kind, err := redisclient.NewClient(cfg.Upstream, roots)
	if err != nil {
		return nil, fmt.Errorf("invalid --upstream: %w", err)
	}
	if cfg.UpstreamTLSCert != "" {
		cert, err := tlsfiles.LoadClientCert(cfg.UpstreamTLSCert, cfg.UpstreamTLSKey)
		if err == nil {
			err = redisclient.UseClientCert(client, cert.GetClientCertificate)
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
	obs, err := redisobserve.New(redisobserve.Config{Client: client, Log: log})
	if err != nil {
		return nil, err
	}
	c.obs = obs
	up, err := upstream.New(upstream.Config{Client: client, Prefix: cfg.KeyPrefix, Log: log, Replicas: cfg.DurableReplicas, Observer: obs})
	if err != nil {
		return nil, err
	}
	closers = append(closers, up.Close)
	c.up = up
	// The local failure mode's share: 1/N of each limit, N the live
	// sidecars this one learns from Redis while it answers.
	var sidecars func() int
	if cfg.LocalShare == settings.ShareFleet {
		if c.fleet, err = fleet.New(fleet.Config{Client: client, Key: cmp.Or(cfg.KeyPrefix, redisurl.DefaultPrefix) + "fleet",
			Log: log}); err != nil {
			return nil, err
		}
		sidecars = c.fleet.Sidecars
	}
	if c.chain, err = chain.New(chain.Config{Store: up, Shard: lanes(kind, cfg, up), Local: mem, Default: cfg.OnFailure, Sidecars: sidecars,
		Timeout: cfg.UpstreamTimeout, MaxBatch: cfg.BatchMax, MaxInFlight: cfg.BatchInFlight, OnBatch: tel.ObserveBatch,
		DenyCacheSize: cfg.DenyCacheSize, Check: up.Check, Grants: cfg.Grants,
		// The breaker's changes are the upstream's reachability under
		// traffic; the Observer logs them, naming the cause.
		OnBreaker: func(open bool, cause error) {
			if open {
				obs.Observe(cause)
			} else {
				obs.Observe(nil)
			}
		},
	}); err != nil {
		return nil, err
	}
	closers = append(closers, c.chain.Close)
	// Know from the start whether Redis can decide: readiness and the
	// breaker follow the check (whose failure the Observer logs, naming its
	// cause), and the chain keeps checking while no request asks.
	if err := c.firstCheck(ctx, cfg, log); err != nil {
		return nil, err
	}
	closers = append(closers, c.watchMemory(cfg, log))

	// Resets made through any sidecar reach this one: drop what it
	// remembers of the key, the refusal, its grants and the fallback's
	// local count.
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
		obs.WatchReplication(replCtx, time.Second, up.SlotMapBehind)
	}()
	closers = append(closers, func() { stopRepl(); waitAWhile(replDone) })
	if c.fleet != nil {
		closers = append(closers, c.joinFleet(cfg))
	}
	log.Info("using the upstream Redis", "kind", string(kind), "addrs", redisurl.Redact(cfg.Upstream),
		"key_prefix", cfg.KeyPrefix, "on_upstream_failure", cfg.OnFailure.String(), "local_share", cfg.LocalShare.String(),
		"upstream_timeout", cfg.UpstreamTimeout, "batch_max", cfg.BatchMax, "batch_inflight", cfg.BatchInFlight,
		"deny_cache_size", cfg.DenyCacheSize, "grants", cfg.Grants)
	return c, nil
}

// lanes is the store's shards that the batcher gives lanes of their own:
// on Cluster each master's, and on one Redis each durability's, so that
// a plain request never waits for a replica. When nothing can ask for
// durability on one Redis (no --durable, and no policies file, whose
// reload may bring a durable policy), there are none: plain batches take
// the batcher's one lane and skip the lane choice that each of their
// requests paid (BenchmarkSubmitPath in package upstream).
func lanes(kind redisurl.Kind, cfg Config, up *upstream.Store) engine.Shards {
	if kind != redisurl.Cluster && cfg.Durable == engine.DurableNone && cfg.Policies == "" {
		return nil
	}
	return up.Shards()
}

// joinFleet says every second that this sidecar is alive, until the
// returned stop, which takes it out of the fleet: the others then count
// one fewer at their next beat, not three seconds later.
func (c *sharedStore) joinFleet(cfg Config) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.fleet.Run(ctx)
	}()
	return func() {
		cancel()
		waitAWhile(done)
		lctx, cancelLeave := context.WithTimeout(context.Background(), cfg.UpstreamTimeout)
		_ = c.fleet.Leave(lctx) // a Redis away at shutdown ages the member out instead
		cancelLeave()
	}
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
			cause := redisobserve.CauseOf(err)
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
	if c.obs.Reach().Up { // else the check's line said why, and the watch reads it later
		rctx, cancel := context.WithTimeout(context.Background(), max(cfg.UpstreamTimeout, time.Second))
		if err := c.obs.ReadMemory(rctx); err != nil {
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
		c.obs.WatchMemory(wctx, cfg.UpstreamEvictionCheck)
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
	if r := c.obs.Reach(); s.cfg.UpstreamRequired && !r.Up {
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
			respserver.InfoSection{Name: "Denycache", Fields: c.chain.InfoDenyCache},
			respserver.InfoSection{Name: "Grants", Fields: c.chain.InfoGrants})
	}
	// The admin server starts after the RESP door is built (app.go).
	return append(secs, respserver.InfoSection{Name: "Admin", Fields: func() [][2]string { return s.admin.Info() }})
}

// upstreamInfo is INFO's Upstream section: the address (its kind, its
// hosts), then the store's fields, the Observer's and the chain's.
func (s *Sidecar) upstreamInfo() respserver.InfoSection {
	c := s.chain
	if c == nil {
		return respserver.InfoSection{Name: "Upstream", Fields: func() [][2]string { return [][2]string{{"upstream", "none"}} }}
	}
	addr := [][2]string{{"upstream", string(c.kind)}, {"upstream_addrs", redisurl.Redact(s.cfg.Upstream)}}
	return respserver.InfoSection{Name: "Upstream", Fields: func() [][2]string {
		f := c.chain.InfoUpstream()
		if c.fleet != nil {
			f = append(f, c.fleet.Info()...)
		}
		return slices.Concat(addr, c.up.Info(), c.obs.Info(), f)
	}}
}

// upstreamStatus is the upstream's state, for the metrics.
func (c *sharedStore) upstreamStatus() telemetry.UpstreamStatus {
	r, m := c.obs.Reach(), c.obs.Memory()
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
