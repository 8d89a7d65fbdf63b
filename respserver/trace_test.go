package respserver

import (
	"strconv"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-rl/sluice/service"
)

func TestTraceDecisions(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(t.Context())
	svc, err := service.New(service.Config{Store: memStore(t), Policies: testPolicies(t), Tracer: tp.Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	c := offlineClient(srv)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	replies := run(t, c, [][][]byte{
		bytesArgs("RL.GCRA", "untraced", "1", "1", "1s"),
		bytesArgs("RL.TRACE", parent),
		bytesArgs("RL.GCRA", "traced", "1", "1", "1s"),
		bytesArgs("RL.ALLOW", "api", "traced"),
		bytesArgs("RL.TRACE", "nonsense"),
		bytesArgs("RL.TRACE", "OFF"),
		bytesArgs("RL.GCRA", "untraced", "1", "1", "1s"),
	})
	if replies[1] != "+OK" || replies[5] != "+OK" || !strings.HasPrefix(replies[4], "-ERR invalid traceparent 'nonsense'") {
		t.Fatalf("replies %q", replies)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans; want 2, for the two decisions made while tracing", len(spans))
	}
	// Each span says why, as RL.EXPLAIN would: the limit that decided,
	// its algorithm and the key's state in its terms.
	whys := []map[string]string{
		{"sluice.limit": "gcra", "sluice.limit.algorithm": "gcra", "sluice.limit.state": "TAT now+1000ms", "sluice.remaining": "1",
			"sluice.retry_after_ms": "0", "sluice.decided_by": "store", "sluice.why": "store decided"},
		{"sluice.limit": "api", "sluice.limit.algorithm": "gcra", "sluice.limit.state": "TAT now+100ms", "sluice.remaining": "4"},
	}
	for i, want := range []string{"inline", "api"} {
		s := spans[i]
		if s.Name != "sluice.decision" || s.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
			s.Parent.SpanID().String() != "00f067aa0ba902b7" {
			t.Errorf("span %d: %s under %v", i, s.Name, s.Parent)
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["sluice.policy"] != want || attrs["sluice.allowed"] != "true" || attrs["sluice.path"] != "store" {
			t.Errorf("span %d attributes %v", i, attrs)
		}
		for k, v := range whys[i] {
			if attrs[k] != v {
				t.Errorf("span %d: %s = %q; want %q", i, k, attrs[k], v)
			}
		}
	}
}

func TestTraceNeedsATracer(t *testing.T) {
	c := offlineClient(fuzzServer(t))
	replies := run(t, c, [][][]byte{bytesArgs("RL.TRACE", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
	if !strings.HasPrefix(replies[0], "-ERR tracing is off") {
		t.Fatalf("RL.TRACE without a tracer: %q", replies[0])
	}
}

// The policy-prefixed keys of one pipeline share the connection's key
// buffer, which grows as the pipeline does: each request must still be
// decided against its own key.
func TestPipelinedPolicyKeysStayApart(t *testing.T) {
	c := offlineClient(fuzzServer(t))
	var cmds [][][]byte
	for i := range 200 {
		key := strings.Repeat("k", 1+i%40) + "-" + strconv.Itoa(i%50)
		cmds = append(cmds, bytesArgs("RL.ALLOW", "login", key))
	}
	replies := run(t, c, cmds)
	// login allows 3 a minute per key; every key appears 4 times, so each
	// key's fourth request is its only refusal.
	seen := map[string]int{}
	for i, r := range replies {
		key := string(cmds[i][2])
		seen[key]++
		want := "[1, 3, " + strconv.Itoa(3-seen[key]) + ", 0, 60000]"
		if seen[key] == 4 {
			want = "[0, 3, 0, "
		}
		if !strings.HasPrefix(r, want) {
			t.Fatalf("request %d (%s, #%d): %q; want %q…", i, key, seen[key], r, want)
		}
	}
}
