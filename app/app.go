// Package app builds a whole Sluice sidecar from a Config: the stores and
// their wrappers in their one right order, the service, the RESP door, the
// admin server, telemetry and the policies watcher. The binary's main and
// the end-to-end tests both build the sidecar here, so that what is tested
// is what runs; main only turns flags and signals into calls.
//
// It wires and does no more: each door serves its own protocol (the
// peer's HTTP port is rls's), each part writes its own INFO fields and
// the admin port is telemetry's; app creates them in order, hands each
// what it needs of the others, and stops them in reverse.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/httpcheck"
	"github.com/sluice-rl/sluice/internal/accept"
	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/internal/membudget"
	"github.com/sluice-rl/sluice/internal/redisurl"
	"github.com/sluice-rl/sluice/internal/settings"
	"github.com/sluice-rl/sluice/internal/tlsfiles"
	"github.com/sluice-rl/sluice/internal/version"
	"github.com/sluice-rl/sluice/internal/watch"
	"github.com/sluice-rl/sluice/policy"
	"github.com/sluice-rl/sluice/record"
	"github.com/sluice-rl/sluice/respserver"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rls/peerstats"
	"github.com/sluice-rl/sluice/rlsconfig"
	"github.com/sluice-rl/sluice/rlsconfig/xds"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/telemetry"
)

// Config is the sidecar's settings; the table itself (flags, variables,
// defaults, validation) is package settings'.
type Config = settings.Config

// Sidecar is a built sidecar, listening once New returns.
type Sidecar struct {
	cfg   Config
	log   *slog.Logger
	mem   *memstore.Store
	chain *sharedStore // nil without an upstream
	live  *policy.Live
	svc   *service.Service
	tel   *telemetry.Telemetry
	// peerStats are envoyproxy/ratelimit's metrics (--rls-peer-metrics); nil: off.
	peerStats *peerstats.Stats
	resp      *respserver.Server
	ln        net.Listener
	budget    *membudget.Budget // --max-input-memory, shared by the RESP and gRPC doors
	admin     *telemetry.Admin
	rules     *rlsconfig.Watcher // nil without --rls-config
	xds       *xds.Client        // nil without --rls-xds-server
	grpc      *rls.Server        // nil without --grpc-listen
	grpcLn    net.Listener
	check     *httpcheck.Server // nil without --http-listen
	rlsHTTP   *http.Server      // nil without --rls-http-listen
	rlsHTLn   net.Listener
	checkLn   net.Listener
	closers   []func()       // run in reverse by close
	rec       *record.Writer // nil without --record
	// overlay is --rls-overlay's watcher, nil without it; set after the
	// configuration's watcher or stream has started, whose reload hook
	// (configLoaded) reads it.
	overlay atomic.Pointer[rlsconfig.OverlayWatcher]

	policies *watch.Watcher // nil without --policies
}

// New builds the sidecar cfg describes and starts listening; Run serves.
// getenv reads the OpenTelemetry variables (OTEL_EXPORTER_OTLP_*,
// TRACEPARENT); nil means none are set.
func New(ctx context.Context, cfg Config, log *slog.Logger, getenv func(string) string) (*Sidecar, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	s := &Sidecar{cfg: cfg, log: log}
	if err := s.build(ctx, getenv); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// build makes and starts the parts; close undoes what it did.
func (s *Sidecar) build(ctx context.Context, getenv func(string) string) (err error) {
	cfg, log := s.cfg, s.log
	if s.mem, err = memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys}); err != nil {
		return err
	}
	tracer, err := s.telemetry(ctx, getenv)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, s.runWatcher(s.watchEvictions))
	var store engine.Store = s.mem
	if cfg.Upstream == "" {
		log.Info("no --upstream: using the in-memory store; limits apply to this process only")
		if cfg.Grants {
			log.Warn("--grants has no meaning on the in-memory store, which decides every request without a round trip")
		}
	} else {
		if s.chain, err = newChain(ctx, cfg, s.mem, s.tel, log); err != nil {
			return err
		}
		s.closers = append(s.closers, s.chain.close)
		store = s.chain.chain
	}
	var policies engine.Policies
	if cfg.Policies != "" {
		set, err := policy.Load(cfg.Policies)
		if err != nil {
			return err
		}
		log.Info("policies loaded", "file", cfg.Policies, "count", set.Len(), "names", set.LogNames())
		s.live = policy.NewLive(set)
		policies = s.live
		wcfg := policy.WatchConfig{Path: cfg.Policies, Poll: cfg.PoliciesPoll, Logger: log}
		if s.chain != nil {
			// Grants were taken under the old policies' limits.
			wcfg.OnReload = s.chain.chain.DropGrants
		}
		if s.policies, err = s.live.Watcher(wcfg); err != nil {
			return err
		}
		s.closers = append(s.closers, s.runWatcher(s.policies.Run))
	}
	storeName := "memory"
	if cfg.Upstream != "" {
		storeName = "redis"
	}
	if err := s.startRecording(); err != nil {
		return err
	}
	scfg := service.Config{Store: store, Policies: policies, Tracer: tracer, StoreName: storeName, Recorder: s.rec, Durable: cfg.Durable,
		MaxReservations: cfg.MaxReservations}
	if cfg.Durable != engine.DurableNone && cfg.Upstream == "" {
		log.Warn("--durable has no meaning on the in-memory store, which has no replicas: decisions are answered at once", "durable", cfg.Durable.String())
	}
	if s.policies != nil {
		scfg.Digest = s.policies.Digest // an explanation names the policies it was decided by
	}
	// RL.EXPLAIN reads each limit's state back from the store that
	// holds it: the central Redis, or the in-memory store.
	scfg.States = s.mem
	if s.chain != nil {
		scfg.States = s.chain.up
	}
	if s.chain != nil {
		// The RESP door cuts a large round into as many parts as the
		// batcher sends round trips at once.
		scfg.InFlight = cfg.BatchInFlight
	}
	if s.svc, err = service.New(scfg); err != nil {
		return err
	}
	loops, err := s.startLoops(cfg.IOLoops)
	if err != nil {
		return err
	}
	if s.chain != nil && len(loops) > 0 {
		// The Redis connection belongs to the first loop: its replies are
		// read there, with no thread woken between them and the clients
		// that loop serves (a TLS connection keeps a reader goroutine).
		s.chain.up.UseLoop(loops[0])
		log.Debug("the upstream's connection is read on the first event loop", "loop", 0, "io_loops", len(loops))
	}
	if s.budget, err = membudget.New(int64(cfg.MaxInputMemory)); err != nil {
		return fmt.Errorf("invalid --max-input-memory: %w", err)
	}
	rcfg := respserver.Config{Service: s.svc, RequirePass: cfg.RequirePass, Logger: log, Budget: s.budget,
		MaxConns: cfg.MaxClients, MaxInputMemory: int64(cfg.MaxInputMemory), Info: s.infoSections(), Keys: s.mem.Len, Loops: loops}
	if s.resp, err = respserver.New(rcfg); err != nil {
		return err
	}
	s.tel.SetSources(s.sources())
	if s.ln, err = listenRESP(cfg.Listen, cfg.ListenPerm); err != nil {
		return fmt.Errorf("RESP listener: %w", err)
	}
	log.Info("listening", "addr", s.ln.Addr().String(), "version", version.String(), "auth", cfg.RequirePass != "")
	s.closers = append(s.closers, func() { s.ln.Close() }) // a no-op once Serve has closed it
	if s.admin, err = s.tel.ListenAdmin(cfg.AdminListen, cfg.AdminOptional, log); err != nil {
		return err
	}
	if cfg.RLSXDSServer != "" {
		if err := s.rlsFromXDS(ctx); err != nil {
			return err
		}
	}
	if err := s.listenGRPC(); err != nil {
		return err
	}
	if err := s.listenRLSHTTP(); err != nil {
		return err
	}
	return s.listenHTTPCheck()
}

// runWatcher runs a configuration watcher's Run on a goroutine of its
// own, and returns what stops it and waits for it.
func (s *Sidecar) runWatcher(run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = run(ctx)
	}()
	return func() { cancel(); <-done }
}

// startLoops runs the n event loops of --io-loops until the sidecar
// closes: they serve the RESP door's connections and the upstream's. On
// a system with none (not Linux) it returns none, and every connection
// gets a goroutine of its own, as with --io-loops 0.
func (s *Sidecar) startLoops(n int) ([]*evloop.Loop, error) {
	var loops []*evloop.Loop
	for i := range n {
		l, err := evloop.New()
		if errors.Is(err, errors.ErrUnsupported) {
			s.log.Info("no event loops on this system: a goroutine per connection", "io_loops", n)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("event loop %d: %w", i, err)
		}
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			if err := l.Run(); err != nil {
				s.log.Error("event loop failed; its connections are closed", "loop", i, "err", err)
			}
		}()
		s.closers = append(s.closers, func() { l.Close(); <-ran })
		loops = append(loops, l)
	}
	return loops, nil
}

// listenGRPC loads --rls-config, starts watching it, and listens for
// Envoy's rate limit service.
func (s *Sidecar) listenGRPC() (err error) {
	cfg := s.cfg
	if cfg.RLSConfig != "" {
		if s.rules, err = rlsconfig.NewWatcher(rlsconfig.WatchConfig{Dir: cfg.RLSConfig, Logger: s.log, Poll: cfg.RLSConfigPoll,
			OnReload: s.configLoaded}); err != nil {
			return fmt.Errorf("invalid --rls-config: %w", err)
		}
		// The watcher's first read, when Run starts, counts as the peer's
		// first config_load_success.
		s.log.Info("rls config loaded", "dir", cfg.RLSConfig, "domains", s.rules.Current().Domains())
		s.closers = append(s.closers, s.runWatcher(s.rules.Run))
	}
	if cfg.RLSOverlay != "" {
		ov, err := rlsconfig.NewOverlayWatcher(rlsconfig.OverlayWatchConfig{Path: cfg.RLSOverlay, Base: s.baseRules,
			Logger: s.log, Poll: cfg.RLSConfigPoll})
		if err != nil {
			return fmt.Errorf("invalid --rls-overlay: %w", err)
		}
		s.overlay.Store(ov)
		s.closers = append(s.closers, s.runWatcher(ov.Run))
	}
	if cfg.GRPCListen == "" {
		if cfg.RLSConfig != "" {
			s.log.Warn("--rls-config is loaded but no door serves it: the rate limit service answers on --grpc-listen, which is off",
				"rls_config", cfg.RLSConfig)
		}
		return nil
	}
	tlsCfg, err := tlsfiles.Server(cfg.GRPCTLSCert, cfg.GRPCTLSKey, cfg.GRPCTLSClientCA)
	if err != nil {
		return fmt.Errorf("invalid --grpc-tls-*: %w", err)
	}
	var peerKeys *rlsconfig.PeerKeys
	if cfg.RLSPeerKeys {
		peerKeys = &rlsconfig.PeerKeys{Prefix: cfg.RLSPeerKeyPrefix, Jitter: cfg.RLSPeerKeyJitter}
	}
	if s.grpc, err = rls.New(rls.Config{Service: s.svc, Rules: s.rlsRules, StopWhenOverLimit: cfg.RLSStopOverLimit,
		Shadow: cfg.RLSShadow, Headers: cfg.RLSHeaders, DynamicMetadata: cfg.RLSDynamicMetadata, Explain: cfg.GRPCExplain, PeerStats: s.peerStats, PeerKeys: peerKeys, MaxDescriptors: cfg.RLSMaxDescriptors, MaxEntries: cfg.RLSMaxEntries,
		Ready: s.ready, TLS: tlsCfg, Transport: cfg.GRPCTransport, Logger: s.log,
		MaxConns: cfg.GRPCMaxConns, IdleTimeout: cfg.GRPCIdleTimeout, Budget: s.budget}); err != nil {
		return err
	}
	if s.grpcLn, err = net.Listen("tcp", cfg.GRPCListen); err != nil {
		return fmt.Errorf("grpc listener: %w", err)
	}
	s.closers = append(s.closers, func() { s.grpcLn.Close() })
	s.log.Info("serving Envoy's rate limit service (gRPC)", "addr", s.grpcLn.Addr().String(), "tls", tlsCfg != nil,
		"transport", cfg.GRPCTransport.String(), "client_certs", cfg.GRPCTLSClientCA != "", "headers", cfg.RLSHeaders.String(), "stop_charging_when_over_limit", cfg.RLSStopOverLimit,
		"peer_keys", cfg.RLSPeerKeys,
		"max_descriptors", cfg.RLSMaxDescriptors, "max_entries", cfg.RLSMaxEntries, "max_conns", cfg.GRPCMaxConns, "idle_timeout", cfg.GRPCIdleTimeout)
	return nil
}

// rlsRules is the rate limit service's configuration in use, from files
// or xDS, with --rls-overlay laid on it; nil (no domain) before the first.
func (s *Sidecar) rlsRules() *rlsconfig.Config {
	if ov := s.overlay.Load(); ov != nil {
		return ov.Current()
	}
	return s.baseRules()
}

// baseRules is the configuration from files or xDS, as they give it.
func (s *Sidecar) baseRules() *rlsconfig.Config {
	if s.xds != nil {
		return s.xds.Current()
	}
	if s.rules != nil {
		return s.rules.Current()
	}
	return nil
}

// listenRLSHTTP serves envoyproxy/ratelimit's HTTP port (rls's
// HTTPHandler: /healthcheck and /json) unless --rls-http-listen is off;
// settings requires the gRPC door with it.
func (s *Sidecar) listenRLSHTTP() (err error) {
	if s.cfg.RLSHTTPListen == "" {
		return nil
	}
	s.rlsHTTP = &http.Server{Handler: s.grpc.HTTPHandler(), ReadHeaderTimeout: 5 * time.Second}
	if s.rlsHTLn, err = net.Listen("tcp", s.cfg.RLSHTTPListen); err != nil {
		return fmt.Errorf("rls http listener: %w", err)
	}
	s.rlsHTLn = accept.Retrying(s.rlsHTLn, s.log, "rls http")
	s.closers = append(s.closers, func() { s.rlsHTLn.Close() })
	s.log.Info("serving envoyproxy/ratelimit's HTTP port", "addr", s.rlsHTLn.Addr().String(), "paths", "/healthcheck /json")
	return nil
}

// listenHTTPCheck listens for the HTTP check.
func (s *Sidecar) listenHTTPCheck() (err error) {
	cfg := s.cfg
	if cfg.HTTPListen == "" {
		return nil
	}
	tlsCfg, err := tlsfiles.Server(cfg.HTTPTLSCert, cfg.HTTPTLSKey, "")
	if err != nil {
		return fmt.Errorf("invalid --http-tls-*: %w", err)
	}
	if s.check, err = httpcheck.New(httpcheck.Config{Service: s.svc, KeyHeader: cfg.HTTPKeyHeader, Token: cfg.HTTPToken,
		TLS: tlsCfg, Logger: s.log, MaxConns: cfg.HTTPMaxConns}); err != nil {
		return err
	}
	if s.checkLn, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
		return fmt.Errorf("http check listener: %w", err)
	}
	s.closers = append(s.closers, func() { s.checkLn.Close() })
	s.log.Info("serving the HTTP check", "addr", s.checkLn.Addr().String(), "path", httpcheck.Path, "tls", tlsCfg != nil,
		"token", cfg.HTTPToken != "", "key_header", cfg.HTTPKeyHeader)
	return nil
}

// telemetry sets up metrics (Prometheus, and OTLP when configured) and
// returns the tracer for decision spans: nil unless OTLP traces are
// configured.
func (s *Sidecar) telemetry(ctx context.Context, getenv func(string) string) (trace.Tracer, error) {
	tracer, stopTraces, err := telemetry.TracerFromEnv(ctx, getenv)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = stopTraces(sctx)
	})
	telemetry.LogExportErrors(s.log)
	var readers []sdkmetric.Reader
	reader, err := telemetry.MetricReaderFromEnv(ctx, getenv)
	if err != nil {
		return nil, err
	}
	if reader != nil {
		readers = append(readers, reader)
	}
	collectors, err := s.newPeerStats()
	if err != nil {
		return nil, err
	}
	s.tel, err = telemetry.New(telemetry.Config{Tracer: tracer, Upstream: redisurl.Redact(s.cfg.Upstream),
		Parent: telemetry.TraceParent(getenv), Readers: readers, Ready: s.ready, Collectors: collectors, MetricsPath: s.cfg.MetricsPath})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.tel.Shutdown(sctx)
	})
	return tracer, nil
}

// sources are what the metrics read when scraped.
func (s *Sidecar) sources() telemetry.Sources {
	src := telemetry.Sources{Decisions: s.svc.EachDecision, Errors: s.svc.EachError,
		Clients: s.resp.Clients, Memory: s.mem.Len, MemoryEvictions: s.mem.Evictions, Leases: s.svc.EachLeasePolicy, Reservations: s.svc.EachReservationPolicy, Configs: s.configs}
	if s.rec != nil {
		src.Recording = s.rec.Stats
	}
	if c := s.chain; c != nil {
		src.DenyCache = func() chain.DenyCacheStats { return c.chain.Stats().DenyCache }
		src.Guard = func() chain.GuardStats { return c.chain.Stats().Guard }
		src.Batcher = func() chain.BatcherStats { return c.chain.Stats().Batcher }
		if s.cfg.Grants {
			src.Grants = c.chain.GrantStats
		}
		src.LateCalls, src.OverdueCalls = c.up.LateCalls, c.up.OverdueCalls
		src.DurableCalls, src.UnreplicatedCalls = c.up.DurableCalls, c.up.UnreplicatedCalls
		src.Replication = func() telemetry.Replication {
			r := c.obs.Replication()
			return telemetry.Replication{Failovers: r.Failovers, LostFailovers: r.LostFailovers, LostBytes: r.LostBytes, Replicas: r.Replicas}
		}
		src.Upstream = c.upstreamStatus
		src.LocalShare = func() telemetry.LocalShare {
			fleet, n := c.chain.LocalShare()
			return telemetry.LocalShare{Fleet: fleet, Sidecars: n}
		}
	}
	return src
}

// configs are the watched configurations' load records, for the metrics.
func (s *Sidecar) configs() []telemetry.ConfigStatus {
	var cs []telemetry.ConfigStatus
	add := func(name string, st watch.Status) {
		cs = append(cs, telemetry.ConfigStatus{Name: name, Loaded: st.Loaded, Failures: st.Failures, Failing: st.Failing})
	}
	if s.policies != nil {
		add("policies", s.policies.Status())
	}
	if s.rules != nil {
		add("rls", s.rules.Status())
	}
	if s.xds != nil {
		add("rls", s.xds.Status())
	}
	if ov := s.overlay.Load(); ov != nil {
		add("rls_overlay", ov.Status())
	}
	return cs
}

// ReloadPolicies rereads the policies file and the rate limit service's
// configuration now (SIGHUP), whatever their content; each failure is
// logged by its watcher.
func (s *Sidecar) ReloadPolicies() {
	if s.policies != nil {
		go func() { _ = s.policies.Reload() }()
	}
	if s.rules != nil {
		go func() { _ = s.rules.Reload() }()
	}
	if ov := s.overlay.Load(); ov != nil {
		go func() { _ = ov.Reload() }()
	}
}

// Run serves until ctx ends, then for ShutdownDelay more, then drains:
// every request already read is answered, for at most ShutdownTimeout.
// It closes everything before it returns.
func (s *Sidecar) Run(ctx context.Context) error {
	defer s.close()
	// Every door serves until one fails or ctx ends; then all drain at
	// once, within one ShutdownTimeout.
	type door struct {
		name     string
		serve    func() error
		shutdown func(context.Context) error
		closed   error
	}
	doors := []door{{"resp", func() error { return s.resp.Serve(s.ln) }, s.resp.Shutdown, respserver.ErrServerClosed}}
	if s.grpc != nil {
		doors = append(doors, door{"grpc", func() error { return s.grpc.Serve(s.grpcLn) }, s.grpc.Shutdown, rls.ErrServerClosed})
	}
	if s.rlsHTTP != nil {
		doors = append(doors, door{"rls http", func() error { return s.rlsHTTP.Serve(s.rlsHTLn) }, s.rlsHTTP.Shutdown, http.ErrServerClosed})
	}
	if s.check != nil {
		doors = append(doors, door{"http check", func() error { return s.check.Serve(s.checkLn) }, s.check.Shutdown, httpcheck.ErrServerClosed})
	}
	errc := make(chan error, len(doors))
	for _, d := range doors {
		go func() {
			err := d.serve()
			if errors.Is(err, d.closed) {
				err = nil
			} else if err != nil {
				err = fmt.Errorf("%s: %w", d.name, err)
			}
			errc <- err
		}()
	}
	var first error
	pending := len(doors)
	select {
	case first = <-errc:
		pending--
		if first == nil {
			first = errors.New("a door stopped serving")
		}
	case <-ctx.Done():
	}
	if d := s.cfg.ShutdownDelay; d > 0 {
		// A plain sidecar container gets its SIGTERM together with the
		// application; the application's last requests still need answers.
		s.log.Info("shutting down: serving on until the delay ends", "delay", d)
		t := time.NewTimer(d)
		select {
		case err := <-errc:
			t.Stop()
			return err
		case <-t.C:
		}
	}
	s.log.Info("shutting down: draining connections", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, d := range doors {
		wg.Go(func() {
			if err := d.shutdown(sctx); err != nil {
				s.log.Warn("shutdown did not drain in time", "door", d.name, "err", err)
			}
		})
	}
	wg.Wait()
	for ; pending > 0; pending-- {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	s.log.Info("stopped")
	return nil
}

// closeWithin bounds close: the doors have drained by then, and a part
// stuck closing (go-redis's Sentinel client closes only once its lookup of
// an unreachable Sentinel has given up, retries and all) must not hold the
// process past its orchestrator's grace period.
const closeWithin = 5 * time.Second

// close stops what New started, in reverse, within closeWithin.
func (s *Sidecar) close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s.admin != nil {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.admin.Shutdown(sctx)
			cancel()
		}
		for i := len(s.closers) - 1; i >= 0; i-- {
			s.closers[i]()
		}
	}()
	t := time.NewTimer(closeWithin)
	defer t.Stop()
	select {
	case <-done:
		s.closers = nil
	case <-t.C:
		s.log.Warn("stopping without waiting for the rest to close", "waited", closeWithin)
	}
}
