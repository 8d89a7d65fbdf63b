package telemetry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/service"
)

func TestMetricsCountKnownTraffic(t *testing.T) {
	tel, err := New(Config{Sources: Sources{
		Clients: func() int64 { return 7 },
		DenyCache: func() chain.DenyCacheStats {
			return chain.DenyCacheStats{Hits: 40, Misses: 60, Evictions: 2, Entries: 5}
		},
		Memory:       func() int { return 1234 },
		Guard:        func() chain.GuardStats { return chain.GuardStats{BreakerOpen: true, Fallbacks: 9} },
		LateCalls:    func() uint64 { return 3 },
		OverdueCalls: func() uint64 { return 1 },
		Grants: func() chain.GrantStats {
			return chain.GrantStats{Held: 2, Outstanding: 150, Taken: 11, GivenBack: 30, Revoked: 6}
		},
		Decisions: func(f func(string, engine.Algorithm, service.Outcome, engine.Path, uint64)) {
			f("api", engine.GCRA, service.Allowed, engine.PathStore, 3)
			f("api", engine.GCRA, service.Refused, engine.PathDenyCache, 1)
			f(service.Inline, engine.FixedWindow, service.Refused, engine.PathFailClosed, 1)
			f("api", engine.GCRA, service.Allowed, engine.PathGrant, 8)
		},
		Errors:     func(f func(service.ErrorKind, uint64)) { f(service.ErrRequest, 2) },
		LocalShare: func() LocalShare { return LocalShare{Fleet: true, Sidecars: 4} },
	}})
	if err != nil {
		t.Fatal(err)
	}
	tel.ObserveBatch(time.Now().Add(-time.Millisecond), 16, nil)
	tel.ObserveBatch(time.Now(), 4, errors.New("timeout"))

	srv := httptest.NewServer(tel.Handler())
	defer srv.Close()
	fams := metricstest.Scrape(t, srv.URL+"/metrics")

	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_decisions_total", map[string]string{"policy": "api", "algorithm": "gcra", "outcome": "allowed", "path": "store"}, 3},
		{"sluice_decisions_total", map[string]string{"policy": "api", "algorithm": "gcra", "outcome": "refused", "path": "deny_cache"}, 1},
		{"sluice_decisions_total", map[string]string{"policy": "inline", "algorithm": "fixed_window", "outcome": "refused", "path": "fail_closed"}, 1},
		{"sluice_errors_total", map[string]string{"kind": "request"}, 2},
		{"sluice_clients", nil, 7},
		{"sluice_deny_cache_hits_total", nil, 40},
		{"sluice_deny_cache_misses_total", nil, 60},
		{"sluice_deny_cache_evictions_total", nil, 2},
		{"sluice_deny_cache_entries", nil, 5},
		{"sluice_memory_store_keys", nil, 1234},
		{"sluice_breaker_open", nil, 1},
		{"sluice_fallbacks_total", nil, 9},
		{"sluice_decisions_total", map[string]string{"policy": "api", "algorithm": "gcra", "outcome": "allowed", "path": "grant"}, 8},
		{"sluice_grants_held", nil, 2},
		{"sluice_grant_units_outstanding", nil, 150},
		{"sluice_grants_taken_total", nil, 11},
		{"sluice_grant_units_given_back_total", nil, 30},
		{"sluice_grants_revoked_total", nil, 6},
		{"sluice_upstream_late_calls_total", nil, 3},
		{"sluice_upstream_overdue_calls_total", nil, 1},
		{"sluice_fleet_sidecars", nil, 4},
		{"sluice_local_share", nil, 0.25},
		{"sluice_batch_size", nil, 2},
		{"sluice_upstream_round_trip_seconds", map[string]string{"outcome": "ok"}, 1},
		{"sluice_upstream_round_trip_seconds", map[string]string{"outcome": "error"}, 1},
	}
	for _, c := range checks {
		if got, ok := metricstest.Sample(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found: %t); want %v", c.name, c.labels, got, ok, c.want)
		}
	}

	// Every label is one of a fixed, bounded set: none can carry a key.
	allowed := map[string]bool{"policy": true, "algorithm": true, "outcome": true, "path": true, "kind": true, "le": true}
	for name, f := range fams {
		if strings.HasPrefix(name, "target_info") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s has label %s=%q outside the bounded set", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

func TestBatchSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(t.Context())
	tel, err := New(Config{Tracer: tp.Tracer("sluice"), Upstream: "127.0.0.1:6379"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-2 * time.Millisecond)
	tel.ObserveBatch(start, 32, nil)
	tel.ObserveBatch(start, 8, errors.New("i/o timeout"))
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans; want 2", len(spans))
	}
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if spans[0].Name != "sluice.upstream.batch" || attrs["sluice.batch.size"] != "32" ||
		attrs["server.address"] != "127.0.0.1:6379" || attrs["sluice.batch.outcome"] != "ok" {
		t.Errorf("span %s %v", spans[0].Name, attrs)
	}
	if !spans[0].StartTime.Equal(start) {
		t.Errorf("span starts at %v; want the batch's start %v", spans[0].StartTime, start)
	}
	if len(spans[1].Events) == 0 {
		t.Errorf("failed batch's span records no error")
	}
}

func TestProbes(t *testing.T) {
	var down error
	tel, err := New(Config{Ready: func() error { return down }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tel.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d while ready", code)
	}
	down = errors.New("upstream unreachable and policy api fails closed")
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "fails closed") {
		t.Errorf("/readyz = %d %q; want 503 with the reason", code, body)
	}
}

// With the standard OTLP variables pointing at a receiver, batch spans and
// metrics are pushed there over OTLP/HTTP; without them nothing is set up.
func TestOTLPFromEnv(t *testing.T) {
	got := make(chan string, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Path
		w.WriteHeader(http.StatusOK)
	}))
	defer receiver.Close()
	// The exporters read the standard variables themselves.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	getenv := os.Getenv

	tracer, stopTraces, err := TracerFromEnv(t.Context(), getenv)
	if err != nil || tracer == nil {
		t.Fatalf("TracerFromEnv = %v, %v; want a tracer", tracer, err)
	}
	reader, err := MetricReaderFromEnv(t.Context(), getenv)
	if err != nil || reader == nil {
		t.Fatalf("MetricReaderFromEnv = %v, %v; want a reader", reader, err)
	}
	tel, err := New(Config{Tracer: tracer, Readers: []sdkmetric.Reader{reader}})
	if err != nil {
		t.Fatal(err)
	}
	tel.ObserveBatch(time.Now(), 3, nil)
	// Shutting down flushes both.
	if err := stopTraces(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for !seen["/v1/traces"] || !seen["/v1/metrics"] {
		select {
		case p := <-got:
			seen[p] = true
		case <-timeout:
			t.Fatalf("the receiver saw %v; want /v1/traces and /v1/metrics", seen)
		}
	}

	none := func(string) string { return "" }
	if tr, _, err := TracerFromEnv(t.Context(), none); tr != nil || err != nil {
		t.Errorf("without an endpoint: tracer %v, %v; want none", tr, err)
	}
	if r, err := MetricReaderFromEnv(t.Context(), none); r != nil || err != nil {
		t.Errorf("without an endpoint: reader %v, %v; want none", r, err)
	}
}

// An OTLP endpoint that refuses every export is a warning in Sluice's own
// log, not silence, and one line for many failures.
func TestOTLPExportErrorsLogged(t *testing.T) {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such tenant", http.StatusBadRequest) // not retried by the exporter
	}))
	defer receiver.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "20") // ms
	var logs syncLog
	LogExportErrors(slog.New(slog.NewTextHandler(&logs, nil)))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	reader, err := MetricReaderFromEnv(t.Context(), os.Getenv)
	if err != nil || reader == nil {
		t.Fatalf("MetricReaderFromEnv = %v, %v", reader, err)
	}
	tel, err := New(Config{Readers: []sdkmetric.Reader{reader}})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	tel.ObserveBatch(time.Now(), 3, nil)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "OTLP export failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning for an endpoint refusing exports; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Exports every 20ms for a while more: still one line.
	time.Sleep(300 * time.Millisecond)
	if n := strings.Count(logs.String(), "OTLP export failed"); n != 1 {
		t.Errorf("%d warnings within a minute; want 1:\n%s", n, logs.String())
	}
}

// syncLog is a log sink safe for the SDK's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
