// Package telemetry is how operators see Sluice: OpenTelemetry metrics,
// exported for Prometheus on the admin port (and over OTLP when the
// standard OTEL_EXPORTER_OTLP_* variables say where), a span per upstream
// batch when tracing is configured, and the /healthz and /readyz probes.
//
// The hot path only adds to the service's atomic counters; the
// OpenTelemetry instruments read them when scraped (Sources), so metrics
// cost a decision one atomic add and nothing else.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/record"
	"github.com/sluice-rl/sluice/service"
)

// Sources are read when metrics are collected. Any may be nil: its
// instruments then report nothing.
type Sources struct {
	// Decisions and Errors walk the service's counters
	// (service.Service.EachDecision and EachError).
	Decisions func(func(policy string, alg engine.Algorithm, outcome service.Outcome, path engine.Path, n uint64))
	Errors    func(func(kind service.ErrorKind, n uint64))
	Clients   func() int64                // connected clients
	DenyCache func() chain.DenyCacheStats // hits, misses, evictions, entries
	Memory    func() int                  // in-memory store size, in keys
	// MemoryEvictions counts the in-memory store's evictions of states
	// that still mattered (memstore.Store.Evictions).
	MemoryEvictions func() uint64
	Guard           func() chain.GuardStats   // breaker state
	Batcher         func() chain.BatcherStats // batches and their decisions
	// Grants reads the grant layer's counts (chain.Chain.GrantStats); nil
	// without --grants.
	Grants func() chain.GrantStats
	// LateCalls and OverdueCalls count the batch calls Redis started
	// after their callers were answered: skipped, or (started in time,
	// finished late) charged (upstream.Store.LateCalls, OverdueCalls).
	LateCalls, OverdueCalls func() uint64
	// DurableCalls and UnreplicatedCalls count the batch calls of durable
	// requests, and those whose replicas did not acknowledge them in time
	// (upstream.Store.DurableCalls, UnreplicatedCalls).
	DurableCalls, UnreplicatedCalls func() uint64
	// Replication is what the upstream's masters said of their
	// replication (redisobserve.Observer.Replication): failovers seen, and the
	// replicas connected.
	Replication func() Replication
	// Leases walks the lease counts per policy
	// (service.Service.EachLeasePolicy).
	Leases func(func(policy string, st service.LeaseStats))
	// Reservations walks the reservation counts per policy
	// (service.Service.EachReservationPolicy).
	Reservations func(func(policy string, st service.ReservationStats))
	// Configs gives the watched configurations' load records.
	Configs func() []ConfigStatus
	// Recording reads the recording's counts (record.Writer.Stats); nil
	// without --record.
	Recording func() record.Stats
	// Upstream gives the upstream Redis's state.
	Upstream func() UpstreamStatus
	// LocalShare gives the share of each limit the local failure mode
	// enforces (share.go).
	LocalShare func() LocalShare
}

// Replication is the upstream's replication as Sources.Replication gives
// it (redisobserve.Replication).
type Replication struct {
	// Failovers counts the masters promoted from a replica of one seen
	// before; LostFailovers those that started behind an offset seen on
	// their old master, and LostBytes the replication bytes between.
	Failovers, LostFailovers, LostBytes uint64
	// Replicas is the fewest replicas connected to a master; -1: not
	// known yet.
	Replicas int
}

// Config configures Telemetry.
type Config struct {
	Sources Sources
	// Ready reports whether this sidecar can decide: nil when the upstream
	// answers or the configured fallback can decide. Nil means always ready.
	Ready func() error
	// Upstream names the Redis node(s), for batch spans.
	Upstream string
	// Tracer, when set, receives a span per upstream batch. Nil turns
	// tracing off, and then batches pay nothing for it.
	Tracer trace.Tracer
	// Parent is the context batch spans start in (TraceParent); nil means
	// the background context.
	Parent context.Context
	// Readers are extra metric readers, such as an OTLP exporter's.
	Readers []sdkmetric.Reader
	// Collectors are served on /metrics beside Sluice's own instruments
	// (envoyproxy/ratelimit's metrics, when Sluice stands in for it).
	Collectors []prometheus.Collector
	// MetricsPath is where Handler serves the metrics; empty: /metrics.
	MetricsPath string
}

// Telemetry holds the instruments and serves the admin endpoints.
type Telemetry struct {
	cfg       Config
	sources   atomic.Pointer[Sources]
	ready     atomic.Pointer[func() error]
	registry  *prometheus.Registry
	provider  *sdkmetric.MeterProvider
	batchSize metric.Int64Histogram
	roundTrip metric.Float64Histogram
	okAttr    metric.MeasurementOption
	errAttr   metric.MeasurementOption
}

// New registers the instruments with a Prometheus registry of their own.
func New(cfg Config) (*Telemetry, error) {
	t := &Telemetry{cfg: cfg, registry: prometheus.NewRegistry()}
	for _, c := range cfg.Collectors {
		if err := t.registry.Register(c); err != nil {
			return nil, fmt.Errorf("telemetry: collector: %w", err)
		}
	}
	if t.cfg.MetricsPath == "" {
		t.cfg.MetricsPath = "/metrics"
	}
	t.SetSources(cfg.Sources)
	t.SetReady(cfg.Ready)
	exporter, err := otelprom.New(otelprom.WithRegisterer(t.registry), otelprom.WithoutScopeInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(exporter),
		sdkmetric.WithResource(serviceResource)}
	for _, r := range cfg.Readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	t.provider = sdkmetric.NewMeterProvider(opts...)
	meter := t.provider.Meter("github.com/sluice-rl/sluice")
	if err := errors.Join(t.instruments(meter), t.leaseInstruments(meter), t.reservationInstruments(meter), t.configInstruments(meter), t.recordInstruments(meter), t.upstreamInstruments(meter)); err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	if err := t.shareInstruments(meter); err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	t.okAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "ok")))
	t.errAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "error")))
	return t, nil
}

func (t *Telemetry) instruments(m metric.Meter) error {
	var errs []error
	must := func(err error) { errs = append(errs, err) }
	var err error

	decisions, err := m.Int64ObservableCounter("sluice.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions made, by policy (\"inline\" for inline commands), algorithm, outcome (allowed, refused, shadow) and path (store, deny_cache, local_fallback, fail_open, fail_closed, grant)."))
	must(err)
	errorsC, err := m.Int64ObservableCounter("sluice.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Error replies sent to clients, by kind."))
	must(err)
	clients, err := m.Int64ObservableGauge("sluice.clients", metric.WithUnit("{client}"),
		metric.WithDescription("Connected clients."))
	must(err)
	hits, err := m.Int64ObservableCounter("sluice.deny_cache.hits", metric.WithUnit("{request}"),
		metric.WithDescription("Requests refused locally by a remembered refusal, without a round trip."))
	must(err)
	misses, err := m.Int64ObservableCounter("sluice.deny_cache.misses", metric.WithUnit("{request}"),
		metric.WithDescription("Requests the deny cache could not answer."))
	must(err)
	evictions, err := m.Int64ObservableCounter("sluice.deny_cache.evictions", metric.WithUnit("{entry}"),
		metric.WithDescription("Remembered refusals evicted to stay within the cache's size."))
	must(err)
	entries, err := m.Int64ObservableGauge("sluice.deny_cache.entries", metric.WithUnit("{entry}"),
		metric.WithDescription("Refusals remembered now."))
	must(err)
	memKeys, err := m.Int64ObservableGauge("sluice.memory_store.keys", metric.WithUnit("{key}"),
		metric.WithDescription("States held by the in-memory store."))
	must(err)
	memEvictions, err := m.Int64ObservableCounter("sluice.memory_store.evictions", metric.WithUnit("{key}"),
		metric.WithDescription("States the in-memory store evicted past --max-keys while they still mattered: each forgot a key's count."))
	must(err)
	breaker, err := m.Int64ObservableGauge("sluice.breaker.open",
		metric.WithDescription("1 while the breaker in front of the upstream is open, else 0."))
	must(err)
	fallbacks, err := m.Int64ObservableCounter("sluice.fallbacks", metric.WithUnit("{request}"),
		metric.WithDescription("Requests decided by a failure mode because the upstream could not answer."))
	must(err)
	late, err := m.Int64ObservableCounter("sluice.upstream.late_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Batch calls Redis started after their callers had been answered by the failure mode, and so skipped, charging nothing."))
	must(err)
	overdue, err := m.Int64ObservableCounter("sluice.upstream.overdue_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Batch calls Redis ran (and charged) although their callers had been answered by the failure mode: it started them in time, then paused."))
	must(err)
	durableC, err := m.Int64ObservableCounter("sluice.upstream.durable_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Batch calls of durable requests: each followed by a WAIT for the replicas."))
	must(err)
	unreplicated, err := m.Int64ObservableCounter("sluice.upstream.unreplicated_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Batch calls of durable requests whose charges the replicas did not acknowledge by the deadline: their requests got their failure mode's answer."))
	must(err)
	failovers, err := m.Int64ObservableCounter("sluice.upstream.failovers", metric.WithUnit("{failover}"),
		metric.WithDescription("Upstream masters seen promoted from a replica of a master seen before: the charges the old master had not replicated are lost, and requests that are not durable may be admitted again."))
	must(err)
	lostFailovers, err := m.Int64ObservableCounter("sluice.upstream.failovers_lost_writes", metric.WithUnit("{failover}"),
		metric.WithDescription("Failovers whose new master started behind a replication offset this sidecar had seen on the old one: writes known lost."))
	must(err)
	lostBytes, err := m.Int64ObservableCounter("sluice.upstream.failover_lost_bytes", metric.WithUnit("By"),
		metric.WithDescription("Replication bytes known lost in failovers (a floor: writes made after this sidecar last looked are lost unseen)."))
	must(err)
	replicas, err := m.Int64ObservableGauge("sluice.upstream.replicas", metric.WithUnit("{replica}"),
		metric.WithDescription("The fewest replicas connected to an upstream master: below --durable-replicas, durable requests get their failure mode."))
	must(err)
	grantsHeld, err := m.Int64ObservableGauge("sluice.grants.held", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants this sidecar holds now: hot keys it decides from units the upstream granted it, without a round trip (--grants)."))
	must(err)
	grantUnits, err := m.Int64ObservableGauge("sluice.grant.units_outstanding", metric.WithUnit("{unit}"),
		metric.WithDescription("Units the grants held may still spend: taken from the keys' budgets, so another sidecar may be refused while they wait here."))
	must(err)
	grantsTaken, err := m.Int64ObservableCounter("sluice.grants.taken", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants the upstream gave this sidecar."))
	must(err)
	grantGiven, err := m.Int64ObservableCounter("sluice.grant.units_given_back", metric.WithUnit("{unit}"),
		metric.WithDescription("Units of window grants that ended unspent, sent back to their keys."))
	must(err)
	grantsRevoked, err := m.Int64ObservableCounter("sluice.grants.revoked", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants dropped before their end by a reset (RL.RESET, the reset broadcast) or a policy reload."))
	must(err)
	t.batchSize, err = m.Int64Histogram("sluice.batch.size", metric.WithUnit("{request}"),
		metric.WithDescription("Requests per upstream round trip."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048))
	must(err)
	t.roundTrip, err = m.Float64Histogram("sluice.upstream.round_trip", metric.WithUnit("s"),
		metric.WithDescription("Upstream round-trip latency, by outcome (ok, error)."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1))
	must(err)
	if err := errors.Join(errs...); err != nil {
		return err
	}

	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src := *t.sources.Load()
		if src.Decisions != nil {
			src.Decisions(func(policy string, alg engine.Algorithm, outcome service.Outcome, path engine.Path, n uint64) {
				o.ObserveInt64(decisions, int64(n), metric.WithAttributes(
					attribute.String("policy", policy), attribute.String("algorithm", alg.String()),
					attribute.String("outcome", outcome.String()), attribute.String("path", path.String())))
			})
		}
		if src.Errors != nil {
			src.Errors(func(kind service.ErrorKind, n uint64) {
				o.ObserveInt64(errorsC, int64(n), metric.WithAttributes(attribute.String("kind", kind.String())))
			})
		}
		if src.Clients != nil {
			o.ObserveInt64(clients, src.Clients())
		}
		if src.DenyCache != nil {
			s := src.DenyCache()
			o.ObserveInt64(hits, int64(s.Hits))
			o.ObserveInt64(misses, int64(s.Misses))
			o.ObserveInt64(evictions, int64(s.Evictions))
			o.ObserveInt64(entries, int64(s.Entries))
		}
		if src.Memory != nil {
			o.ObserveInt64(memKeys, int64(src.Memory()))
		}
		if src.MemoryEvictions != nil {
			o.ObserveInt64(memEvictions, int64(src.MemoryEvictions()))
		}
		if src.Guard != nil {
			s := src.Guard()
			open := int64(0)
			if s.BreakerOpen {
				open = 1
			}
			o.ObserveInt64(breaker, open)
			o.ObserveInt64(fallbacks, int64(s.Fallbacks))
		}
		if src.Grants != nil {
			s := src.Grants()
			o.ObserveInt64(grantsHeld, int64(s.Held))
			o.ObserveInt64(grantUnits, s.Outstanding)
			o.ObserveInt64(grantsTaken, int64(s.Taken))
			o.ObserveInt64(grantGiven, int64(s.GivenBack))
			o.ObserveInt64(grantsRevoked, int64(s.Revoked))
		}
		if src.LateCalls != nil {
			o.ObserveInt64(late, int64(src.LateCalls()))
		}
		if src.OverdueCalls != nil {
			o.ObserveInt64(overdue, int64(src.OverdueCalls()))
		}
		if src.DurableCalls != nil {
			o.ObserveInt64(durableC, int64(src.DurableCalls()))
		}
		if src.UnreplicatedCalls != nil {
			o.ObserveInt64(unreplicated, int64(src.UnreplicatedCalls()))
		}
		if src.Replication != nil {
			r := src.Replication()
			o.ObserveInt64(failovers, int64(r.Failovers))
			o.ObserveInt64(lostFailovers, int64(r.LostFailovers))
			o.ObserveInt64(lostBytes, int64(r.LostBytes))
			if r.Replicas >= 0 {
				o.ObserveInt64(replicas, int64(r.Replicas))
			}
		}
		return nil
	}, decisions, errorsC, clients, hits, misses, evictions, entries, memKeys, memEvictions, breaker, fallbacks, late, overdue, durableC, unreplicated,
		failovers, lostFailovers, lostBytes, replicas, grantsHeld, grantUnits, grantsTaken, grantGiven, grantsRevoked)
	return err
}

// SetSources replaces the sources, for those that exist only once
// Telemetry does (a server that reports to it).
func (t *Telemetry) SetSources(s Sources) { t.sources.Store(&s) }

// SetReady replaces the readiness check.
func (t *Telemetry) SetReady(ready func() error) { t.ready.Store(&ready) }

// ObserveBatch records one upstream round trip: its size and latency, and a
// span when tracing is on. The batcher calls it after each round trip.
func (t *Telemetry) ObserveBatch(start time.Time, size int, err error) {
	ctx := context.Background()
	if t.cfg.Parent != nil {
		ctx = t.cfg.Parent
	}
	elapsed := time.Since(start)
	t.batchSize.Record(ctx, int64(size))
	outcome := t.okAttr
	if err != nil {
		outcome = t.errAttr
	}
	t.roundTrip.Record(ctx, elapsed.Seconds(), outcome)
	if t.cfg.Tracer == nil {
		return
	}
	_, span := t.cfg.Tracer.Start(ctx, "sluice.upstream.batch", trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int("sluice.batch.size", size), attribute.String("server.address", t.cfg.Upstream)))
	if err != nil {
		span.RecordError(err)
		span.SetAttributes(attribute.String("sluice.batch.outcome", "error"))
	} else {
		span.SetAttributes(attribute.String("sluice.batch.outcome", "ok"))
	}
	span.End(trace.WithTimestamp(start.Add(elapsed)))
}

// Handler serves /metrics (Prometheus text; Config.MetricsPath), /healthz (the process serves)
// and /readyz (it can decide).
func (t *Telemetry) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+t.cfg.MetricsPath, promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready := *t.ready.Load(); ready != nil {
			if err := ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// Shutdown flushes and stops the metric readers.
func (t *Telemetry) Shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }
