// Package app builds a whole Sluice sidecar from a Config: the stores and
// their wrappers in their one right order, the service, the RESP door, the
// admin server, telemetry and the policies watcher. The binary's main and
// the end-to-end tests both build the sidecar here, so that what is tested
// is what runs; main only turns flags and signals into calls.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/version"
	"github.com/sluice-rl/sluice/policy"
	"github.com/sluice-rl/sluice/respserver"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/telemetry"
	"github.com/sluice-rl/sluice/upstream"
)

// Sidecar is a built sidecar, listening once New returns.
type Sidecar struct {
	cfg     Config
	log     *slog.Logger
	mem     *engine.MemoryStore
	chain   *chain // nil without an upstream
	live    *policy.Live
	svc     *service.Service
	tel     *telemetry.Telemetry
	resp    *respserver.Server
	ln      net.Listener
	admin   *http.Server
	adminLn net.Listener
	reload  chan struct{}
	closers []func() // run in reverse by close
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
	s := &Sidecar{cfg: cfg, log: log, reload: make(chan struct{}, 1)}
	if err := s.build(ctx, getenv); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// build makes and starts the parts; close undoes what it did.
func (s *Sidecar) build(ctx context.Context, getenv func(string) string) (err error) {
	cfg, log := s.cfg, s.log
	if s.mem, err = engine.NewMemoryStore(engine.MemoryConfig{MaxKeys: cfg.MaxKeys}); err != nil {
		return err
	}
	tracer, err := s.telemetry(ctx, getenv)
	if err != nil {
		return err
	}
	var store engine.Store = s.mem
	if cfg.Upstream == "" {
		log.Info("no --upstream: using the in-memory store; limits apply to this process only")
	} else {
		if s.chain, err = newChain(cfg, s.mem, s.tel, log); err != nil {
			return err
		}
		s.closers = append(s.closers, s.chain.close)
		store = s.chain.guard
	}
	var policies engine.Policies
	if cfg.Policies != "" {
		set, err := policy.Load(cfg.Policies)
		if err != nil {
			return err
		}
		log.Info("policies loaded", "file", cfg.Policies, "count", set.Len(), "names", set.Names())
		s.live = policy.NewLive(set)
		policies = s.live
		wctx, stop := context.WithCancel(context.Background())
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			s.live.Watch(wctx, policy.WatchConfig{Path: cfg.Policies, Every: cfg.PoliciesPoll, Reload: s.reload, Logger: log})
		}()
		s.closers = append(s.closers, func() { stop(); <-watched })
	}
	if s.svc, err = service.New(service.Config{Store: store, Policies: policies, Tracer: tracer}); err != nil {
		return err
	}
	loops := cfg.IOLoops
	if loops == 0 {
		loops = -1 // respserver's "a goroutine per connection"
	}
	if s.resp, err = respserver.New(respserver.Config{Service: s.svc, RequirePass: cfg.RequirePass, Logger: log,
		MaxConns: cfg.MaxClients, MaxInputMemory: int64(cfg.MaxInputMemory), Info: s.infoSections(), Keys: s.mem.Len, Loops: loops}); err != nil {
		return err
	}
	s.tel.SetSources(s.sources())
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return err
	}
	log.Info("listening", "addr", s.ln.Addr().String(), "version", version.String(), "auth", cfg.RequirePass != "")
	if err := s.listenAdmin(); err != nil {
		s.ln.Close()
		return err
	}
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
	var readers []sdkmetric.Reader
	reader, err := telemetry.MetricReaderFromEnv(ctx, getenv)
	if err != nil {
		return nil, err
	}
	if reader != nil {
		readers = append(readers, reader)
	}
	s.tel, err = telemetry.New(telemetry.Config{Tracer: tracer, Upstream: upstream.Redact(s.cfg.Upstream),
		Parent: telemetry.TraceParent(getenv), Readers: readers, Ready: s.ready})
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
		Clients: s.resp.Clients, Memory: s.mem.Len}
	if c := s.chain; c != nil {
		src.DenyCache, src.Guard, src.Batcher = c.deny.Stats, c.guard.Stats, c.batcher.Stats
	}
	return src
}

// listenAdmin starts the admin HTTP server, unless --admin-listen is off.
func (s *Sidecar) listenAdmin() error {
	if s.cfg.AdminListen == "off" || s.cfg.AdminListen == "" {
		return nil
	}
	// The admin port shows counts and health, never keys or decisions on
	// demand, so unlike the RESP port it may listen beyond loopback (a
	// Prometheus in another pod scrapes it) without a password.
	ln, err := net.Listen("tcp", s.cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	s.adminLn = ln
	s.admin = &http.Server{Handler: s.tel.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := s.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", "err", err)
		}
	}()
	s.log.Info("admin endpoints", "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	return nil
}

// Addr is the RESP listener's address.
func (s *Sidecar) Addr() net.Addr { return s.ln.Addr() }

// AdminAddr is the admin server's address, or nil when it is off.
func (s *Sidecar) AdminAddr() net.Addr {
	if s.adminLn == nil {
		return nil
	}
	return s.adminLn.Addr()
}

// ReloadPolicies rereads the policies file now (SIGHUP), whatever its
// content; without a policies file it does nothing.
func (s *Sidecar) ReloadPolicies() {
	select {
	case s.reload <- struct{}{}:
	default: // a reload is already asked for
	}
}

// Run serves until ctx ends, then for ShutdownDelay more, then drains:
// every request already read is answered, for at most ShutdownTimeout.
// It closes everything before it returns.
func (s *Sidecar) Run(ctx context.Context) error {
	defer s.close()
	errc := make(chan error, 1)
	go func() { errc <- s.resp.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
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
	if err := s.resp.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown did not drain in time", "err", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, respserver.ErrServerClosed) {
		return err
	}
	s.log.Info("stopped")
	return nil
}

// close stops what New started, in reverse.
func (s *Sidecar) close() {
	if s.admin != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.admin.Shutdown(sctx)
		cancel()
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}
