package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rlsconfig"
	"github.com/sluice-rl/sluice/rlsconfig/xds/xdstest"
)

// egRoute is a rule as Envoy Gateway writes it for a BackendTrafficPolicy
// of two rules on one route (its translator's descriptor names): each
// rule's descriptor under the route's.
func egRoute(rule0, rule1 string) string {
	return `domain: default/eg/http
descriptors:
  - key: httproute/default/api/rule/0/match/0/api_example_com
    value: httproute/default/api/rule/0/match/0/api_example_com
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        rate_limit: {` + rule0 + `}
      - key: rule-1-match-0
        value: rule-1-match-0
        rate_limit: {` + rule1 + `}
`
}

// egOverlay selects Envoy Gateway's rules by their descriptor paths.
func egOverlay(rules ...string) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for _, r := range rules {
		fmt.Fprintf(&b, `  - domain: default/eg/http
    descriptors:
      - {key: httproute/default/api/rule/0/match/0/api_example_com, value: httproute/default/api/rule/0/match/0/api_example_com}
      - {key: %s-match-0, value: %s-match-0}
`, strings.Fields(r)[0], strings.Fields(r)[0])
		for _, f := range strings.Fields(r)[1:] {
			b.WriteString("    " + strings.Replace(f, "=", ": ", 1) + "\n")
		}
	}
	return b.String()
}

// TestRLSOverlayFiles: --rls-overlay gives Envoy Gateway's rules, loaded
// from --rls-config, Sluice's algorithms. Each decides by its algorithm
// (GCRA with a burst of 2 admits 3 at once where the fixed window of the
// file admits 10); a change of the overlay and a change of the
// configuration each take effect, the overlay staying laid on the new
// configuration; a broken overlay keeps the one in use, and says so in
// INFO, the metrics and the log.
func TestRLSOverlayFiles(t *testing.T) {
	r := redistest.Start(t)
	dir := writeRLS(t, map[string]string{"eg.yaml": egRoute("unit: minute, requests_per_unit: 10", "unit: hour, requests_per_unit: 10")})
	overlay := filepath.Join(t.TempDir(), "overlay.yaml")
	write := func(path, body string) { t.Helper(); replaceFile(t, path, body) }
	write(overlay, egOverlay("rule-0 algorithm=gcra burst=2"))
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--grpc-listen", grpcAddr, "--rls-config", dir, "--rls-overlay", overlay)
	waitAccepting(t, grpcAddr, s)
	c, _ := rlsClient(t, grpcAddr)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	defer rdb.Close()
	info := func() string { return rdb.Info(ctxT(t), "rls").Val() }
	route := []string{"httproute/default/api/rule/0/match/0/api_example_com", "httproute/default/api/rule/0/match/0/api_example_com"}
	calls := func(rule string, n int) string {
		t.Helper()
		var out []string
		for range n {
			resp := ask(t, c, "default/eg/http", 1, desc(append(route, rule+"-match-0", rule+"-match-0")...))
			st := resp.GetStatuses()[0]
			out = append(out, fmt.Sprintf("%v/%d/%v", resp.GetOverallCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit()))
		}
		return strings.Join(out, " ")
	}
	want := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %s\nwant %s\nlog:\n%s", what, got, want, s.logs)
		}
	}
	ok, over := "OK/", "OVER_LIMIT/"
	want("rule 0 under GCRA, burst 2", calls("rule-0", 4), strings.Repeat(ok+"10/MINUTE ", 3)+over+"10/MINUTE")
	want("rule 1 as the file says, a fixed window of 10", calls("rule-1", 4), strings.TrimSpace(strings.Repeat(ok+"10/HOUR ", 4)))
	if i := info(); !strings.Contains(i, "rls_overlay_rules_changed:1") || !strings.Contains(i, "rls_overlay_reload_failing:0") {
		t.Errorf("INFO rls:\n%s", i)
	}

	// The overlay changes: rule 1 becomes a token bucket of one.
	write(overlay, egOverlay("rule-0 algorithm=gcra burst=2", "rule-1 algorithm=token_bucket capacity=1"))
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(info(), "rls_overlay_rules_changed:2") }, s.logs)
	want("rule 1 under a token bucket of one", calls("rule-1", 2), ok+"10/HOUR "+over+"10/HOUR")

	// The configuration changes: rule 0 is 30 an hour; the overlay's GCRA
	// stays on it.
	digest := func() string {
		_, after, _ := strings.Cut(info(), "rls_config_digest:")
		return strings.Fields(after + " ")[0]
	}
	was := digest()
	write(filepath.Join(dir, "eg.yaml"), egRoute("unit: hour, requests_per_unit: 30", "unit: hour, requests_per_unit: 10"))
	waitFor(t, 10*time.Second, func() bool { return digest() != was }, s.logs)
	want("rule 0, 30 an hour, still GCRA with a burst of 2", calls("rule-0", 4), strings.Repeat(ok+"30/HOUR ", 3)+over+"30/HOUR")

	// A broken overlay: the one in use stays, visibly.
	write(overlay, egOverlay("rule-0 algorithm=gcra burst=2", "rule-1 algorithm=token_bukket"))
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(info(), "rls_overlay_reload_failing:1") }, s.logs)
	for _, w := range []string{"rls_overlay_reload_failures:1", `rls_overlay_last_error:`, "token_bukket", "rls_overlay_rules_changed:2"} {
		if !strings.Contains(info(), w) {
			t.Errorf("INFO rls after a broken overlay has no %q:\n%s", w, info())
		}
	}
	want("rule 1 still the token bucket, empty (a fixed window of 10 would admit)", calls("rule-1", 1), over+"10/HOUR")
	if !strings.Contains(s.logs.String(), "rls overlay not reloaded: keeping the one in use") {
		t.Errorf("the log does not name the broken overlay:\n%s", s.logs)
	}
	if v, ok := metricstest.Sample(metricstest.Scrape(t, "http://"+s.Admin+"/metrics"), "sluice_config_reload_failing",
		map[string]string{"config": "rls_overlay"}); !ok || v != 1 {
		t.Errorf("sluice_config_reload_failing{config=rls_overlay} = %v (%v); want 1", v, ok)
	}
}

// quotaResource is the RateLimitConfig Envoy AI Gateway's controller
// serves for a QuotaPolicy of two per-model quotas on one backend (its
// translator's shape: domain ai-gateway-quota, backend_name then
// model_name_override, quota_mode on every rule), each limit tokens a
// second.
func quotaResource(gpt4, gpt35 uint32) *rlspb.RateLimitConfig {
	model := func(name string, n uint32) *rlspb.RateLimitDescriptor {
		return &rlspb.RateLimitDescriptor{Key: "model_name_override", Value: name, QuotaMode: true,
			RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_SECOND, RequestsPerUnit: n}}
	}
	return &rlspb.RateLimitConfig{Name: "ai-gateway-quota", Domain: "ai-gateway-quota", Descriptors: []*rlspb.RateLimitDescriptor{
		{Key: "backend_name", Value: "default/llm", Descriptors: []*rlspb.RateLimitDescriptor{model("gpt-4", gpt4), model("gpt-3.5", gpt35)}}}}
}

// TestRLSOverlayAIGatewayQuota: Sluice started as the peer with Envoy AI
// Gateway's environment for its rate limit Deployment (xDS from the
// controller's server, node envoy-ai-gateway-ratelimit) and
// SLUICE_RLS_OVERLAY gives a QuotaPolicy, which its documentation calls a
// sliding window, Sluice's sliding window. Real calls at a window edge
// tell one from a fixed window: a model's whole quota spent (a response's
// tokens charged at stream end, the second over the limit) just before a
// second ends, the next request just after it is refused by the sliding
// window and admitted by a fixed one. An update of the overlay and of the
// xDS configuration each take effect; a broken overlay keeps the one in
// use.
func TestRLSOverlayAIGatewayQuota(t *testing.T) {
	r := redistest.Start(t)
	m := xdstest.Start(t, "127.0.0.1:0", nil) // the controller's port 18002, here a free one
	const node = "envoy-ai-gateway-ratelimit"
	m.Set(t, node, "1", quotaResource(1000, 1000))
	overlay := filepath.Join(t.TempDir(), "overlay.yaml")
	write := func(body string) { t.Helper(); replaceFile(t, overlay, body) }
	write("rules:\n  - domain: ai-gateway-quota\n    descriptors:\n      - {key: backend_name, value: default/llm}\n" +
		"      - {key: model_name_override, value: gpt-4}\n    algorithm: sliding_window\n")
	grpcPort, debugPort := port(t), port(t)
	// Envoy AI Gateway's Deployment of the peer (its tests/e2e
	// backend_quota_ratelimit.yaml), with Redis's and the xDS server's
	// addresses and free ports; and the overlay's variable.
	env := map[string]string{"LOG_LEVEL": "info", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "RUNTIME_ROOT": "/data",
		"RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_ID": node, "CONFIG_GRPC_XDS_SERVER_URL": m.Addr, "GRPC_PORT": grpcPort,
		"PORT": port(t), "DEBUG_PORT": debugPort, "SLUICE_RLS_OVERLAY": overlay}
	s := startRatelimit(t, env, "127.0.0.1:"+grpcPort)
	m.Acked(t, "1")
	c, _ := rlsClient(t, "127.0.0.1:"+grpcPort)
	model := func(name string) *rlv3.RateLimitDescriptor {
		return desc("backend_name", "default/llm", "model_name_override", name)
	}
	// edge spends each model's quota twice over just after a second
	// begins, then asks once just after the next begins, and returns each
	// model's answer then. An attempt whose calls the machine delayed past
	// the bounds that tell the two windows apart is made again.
	edge := func(quota map[string]uint32) map[string]pb.RateLimitResponse_Code {
		t.Helper()
		for attempt := 1; attempt <= 5; attempt++ {
			// The windows are whole seconds: wait for the clock to start one.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
			start := time.Now()
			for name, n := range quota {
				for range 2 { // the second response's tokens are charged over the limit, as at stream end
					ask(t, c, "ai-gateway-quota", n, model(name))
				}
			}
			if time.Since(start) > 600*time.Millisecond {
				t.Logf("attempt %d: the charges took %v, past the second; again", attempt, time.Since(start))
				continue
			}
			next := start.Truncate(time.Second).Add(time.Second)
			time.Sleep(time.Until(next.Add(10 * time.Millisecond)))
			got := map[string]pb.RateLimitResponse_Code{}
			for name := range quota {
				got[name] = ask(t, c, "ai-gateway-quota", 1, model(name)).GetOverallCode()
			}
			// A sliding window still counts 2000*(1-e) of the last second at
			// e seconds into this one: over 1000 until e is 0.5.
			if late := time.Since(next); late > 400*time.Millisecond {
				t.Logf("attempt %d: asked %v after the edge; again", attempt, late)
				continue
			}
			return got
		}
		t.Fatal("no attempt kept its calls within the window edge's bounds")
		return nil
	}
	check := func(what string, got map[string]pb.RateLimitResponse_Code, want map[string]pb.RateLimitResponse_Code) {
		t.Helper()
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: %s just after the edge: %v, want %v\nlog:\n%s", what, name, got[name], w, s.logs)
			}
		}
	}
	check("gpt-4 overlaid, gpt-3.5 as xDS says", edge(map[string]uint32{"gpt-4": 1000, "gpt-3.5": 1000}),
		map[string]pb.RateLimitResponse_Code{"gpt-4": rlOver, "gpt-3.5": rlOK})

	// The overlay changes: every rule of the domain a sliding window.
	write("rules:\n  - domain: ai-gateway-quota\n    algorithm: sliding_window\n")
	waitFor(t, 10*time.Second, func() bool { return strings.Count(s.logs.String(), "rls overlay in use") == 2 }, s.logs)
	check("the whole domain overlaid", edge(map[string]uint32{"gpt-4": 1000, "gpt-3.5": 1000}),
		map[string]pb.RateLimitResponse_Code{"gpt-4": rlOver, "gpt-3.5": rlOver})

	// The xDS configuration changes: gpt-3.5's quota is 4000; the
	// overlay stays laid on it.
	m.Set(t, node, "2", quotaResource(1000, 4000))
	m.Acked(t, "2")
	if got := ask(t, c, "ai-gateway-quota", 0, model("gpt-3.5")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != 4000 {
		t.Fatalf("gpt-3.5's limit after xDS version 2: %d, want 4000", got)
	}
	check("after xDS version 2", edge(map[string]uint32{"gpt-4": 1000, "gpt-3.5": 4000}),
		map[string]pb.RateLimitResponse_Code{"gpt-4": rlOver, "gpt-3.5": rlOver})

	// A broken overlay keeps the one in use, visibly.
	write("rules:\n  - domain: ai-gateway-quota\n    algorithm: sliding_windw\n")
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(s.logs.String(), "rls overlay not reloaded") }, s.logs)
	if v, ok := metricstest.Sample(metricstest.Scrape(t, "http://127.0.0.1:"+debugPort+"/metrics"), "sluice_config_reload_failing",
		map[string]string{"config": "rls_overlay"}); !ok || v != 1 {
		t.Errorf("sluice_config_reload_failing{config=rls_overlay} = %v (%v); want 1", v, ok)
	}
	check("after a broken overlay", edge(map[string]uint32{"gpt-4": 1000, "gpt-3.5": 4000}),
		map[string]pb.RateLimitResponse_Code{"gpt-4": rlOver, "gpt-3.5": rlOver})
}

// replaceFile writes path as a deploy tool does: a new file renamed over
// the old one, so that a watcher never reads it half written.
func replaceFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestDocsOverlays: every overlay docs/gateways.md shows, alone or as a
// ConfigMap's overlay.yaml, parses.
func TestDocsOverlays(t *testing.T) {
	page, err := os.ReadFile("../docs/gateways.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := 0
	for _, block := range fences(string(page), "yaml") {
		if _, inMap, ok := strings.Cut(block, "  overlay.yaml: |\n"); ok {
			var lines []string
			for _, l := range strings.Split(inMap, "\n") {
				if !strings.HasPrefix(l, "    ") {
					break
				}
				lines = append(lines, l[4:])
			}
			block = strings.Join(lines, "\n")
		}
		if !strings.HasPrefix(block, "rules:") {
			continue
		}
		shown++
		if _, err := rlsconfig.ParseOverlay("docs/gateways.md", []byte(block)); err != nil {
			t.Errorf("an overlay of docs/gateways.md does not parse: %v\n%s", err, block)
		}
	}
	if shown < 3 {
		t.Errorf("docs/gateways.md shows %d overlays; want its three", shown)
	}
}
