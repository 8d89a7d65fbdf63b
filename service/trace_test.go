package service_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/service"
)

var parentSpan = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	TraceFlags: trace.FlagsSampled,
	Remote:     true,
})

// searchPolicy has two limits: a request refused by its daily one shows
// which limit refused and each limit's own answer. The memory
// store's clock stands 8h into a day (1.8e9 s), so the day has 16h left.
var searchPolicy = engine.Policy{Name: "search", Prefix: "search:", Limits: []engine.NamedLimit{
	{Name: "burst", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 5, Burst: 5, Period: time.Second}},
	{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: 24 * time.Hour}},
}}

// spanAttrs decides reqs in one traced batch on store and returns each
// decision's span attributes, as an in-process exporter saw them.
func spanAttrs(t *testing.T, store engine.Store, reqs ...service.Request) []map[string]string {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(t.Context())
	ps := policies{"search": searchPolicy, "trial": testPolicies["trial"], "closed": testPolicies["closed"]}
	svc, err := service.New(service.Config{Store: store, Policies: ps, Tracer: tp.Tracer("test"), StoreName: "redis",
		Digest: func() string { return "d1" }})
	if err != nil {
		t.Fatal(err)
	}
	b := svc.NewBatch()
	b.Trace = parentSpan
	for _, r := range reqs {
		if _, err := b.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	decide(svc, b)
	spans := exp.GetSpans()
	if len(spans) != len(reqs) {
		t.Fatalf("%d spans for %d decisions", len(spans), len(reqs))
	}
	out := make([]map[string]string, len(spans))
	for i, s := range spans {
		out[i] = map[string]string{}
		for _, kv := range s.Attributes {
			out[i][string(kv.Key)] = kv.Value.Emit()
		}
	}
	return out
}

func testMem(t *testing.T) engine.Store {
	t.Helper()
	mem, err := memstore.New(memstore.Config{Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// A sampled span carries the explanation's fields: the limit that
// decided, its algorithm and state, remaining and retry, the path and
// why, each limit's own answer under a multi-limit policy, shadow mode.
func TestTraceExplains(t *testing.T) {
	search := service.Request{ByPolicy: true, Policy: "search", Key: "u", Cost: 1}
	got := spanAttrs(t, testMem(t), search, search, search,
		service.Request{ByPolicy: true, Policy: "trial", Key: "u", Cost: 1},
		service.Request{ByPolicy: true, Policy: "trial", Key: "u", Cost: 1})
	for _, tc := range []struct {
		span int
		want map[string]string
	}{
		{0, map[string]string{"sluice.policy": "search", "sluice.allowed": "true", "sluice.path": "store", "sluice.decided_by": "redis",
			"sluice.why": "redis decided", "sluice.limit": "daily", "sluice.limit.algorithm": "fixed_window",
			"sluice.limit.state": "used 1 of 2, back to full in 57600000ms", "sluice.remaining": "1", "sluice.retry_after_ms": "0",
			"sluice.digest": "d1", "sluice.on_failure": "default",
			"sluice.limits": `["burst token_bucket allowed=1 tokens 4 of 5, full in 200ms","daily fixed_window allowed=1 used 1 of 2, back to full in 57600000ms"]`}},
		{2, map[string]string{"sluice.allowed": "false", "sluice.limit": "daily", "sluice.algorithm": "fixed_window",
			"sluice.limit.state": "used 2 of 2, back to full in 57600000ms", "sluice.remaining": "0", "sluice.retry_after_ms": "57600000",
			"sluice.limits": `["burst token_bucket allowed=1 tokens 3 of 5, full in 400ms","daily fixed_window allowed=0 used 2 of 2, back to full in 57600000ms"]`}},
		{4, map[string]string{"sluice.policy": "trial", "sluice.allowed": "true", "sluice.shadowed": "true", "sluice.limit": "trial",
			"sluice.limit.algorithm": "gcra", "sluice.limit.state": "TAT now+3600000ms"}},
	} {
		for k, v := range tc.want {
			if got[tc.span][k] != v {
				t.Errorf("span %d: %s = %q; want %q (all: %v)", tc.span, k, got[tc.span][k], v, got[tc.span])
			}
		}
	}
}

// A decision the store did not make says which failure mode made it, and
// an inline request of a door's rule names the rule.
func TestTraceFailureMode(t *testing.T) {
	got := spanAttrs(t, pathStore{path: engine.PathFailOpen, allowed: true},
		service.Request{ByPolicy: true, Policy: "closed", Key: "u", Cost: 1},
		service.Request{Key: "k", Limit: oneAnHour, Cost: 1, Label: "edge.remote_address", Digest: "r1"})
	want := []map[string]string{
		{"sluice.path": "fail_open", "sluice.decided_by": "fail_open", "sluice.on_failure": "deny",
			"sluice.why": "the store failed or was too slow; allowed by the failure mode (on_failure deny)", "sluice.limit": "closed"},
		{"sluice.rule": "edge.remote_address", "sluice.limit": "edge.remote_address", "sluice.digest": "r1", "sluice.limit.algorithm": "gcra"},
	}
	for i, w := range want {
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("span %d: %s = %q; want %q (all: %v)", i, k, got[i][k], v, got[i])
			}
		}
	}
}

// BenchmarkTrace is a traced decision under a sampler that records it
// and one that does not: the explanation's attributes are computed only
// for the first.
func BenchmarkTrace(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled", sdktrace.AlwaysSample()}, {"unsampled", sdktrace.NeverSample()}} {
		b.Run(bc.name, func(b *testing.B) {
			mem, err := memstore.New(memstore.Config{})
			if err != nil {
				b.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(bc.sampler))
			defer tp.Shutdown(b.Context())
			svc, err := service.New(service.Config{Store: mem, Tracer: tp.Tracer("bench"), Policies: policies{"search": searchPolicy}})
			if err != nil {
				b.Fatal(err)
			}
			batch := svc.NewBatch()
			batch.Trace = parentSpan
			r := service.Request{ByPolicy: true, Policy: "search", Key: "k", Cost: 0}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := batch.Add(r); err != nil {
					b.Fatal(err)
				}
				svc.DecideWait(batch)
				batch.Clear()
			}
		})
	}
}
