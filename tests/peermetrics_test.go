package tests

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// metricsRules exercise what the peer's metrics and metadata tell apart:
// one level and two, shadow mode, and metadata to merge.
const metricsRules = `domain: gw
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
    metadata: {team: a, tier: {plan: gold}}
  - key: route
    descriptors:
      - key: method
        rate_limit: {unit: hour, requests_per_unit: 5}
        metadata: {team: b, tier: {region: eu}, extra: 1}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// metricsCall is one call of the fixed sequence.
type metricsCall struct {
	hits uint64 // per-descriptor hits_addend; 0: the request's default
	ds   []*rlv3.RateLimitDescriptor
}

func metricsSequence() []metricsCall {
	var out []metricsCall
	for range 7 { // 1 hit each: near from the 9th of 10 at ratio 0.8
		out = append(out, metricsCall{1, []*rlv3.RateLimitDescriptor{desc("user", "alice")}})
	}
	out = append(out, metricsCall{4, []*rlv3.RateLimitDescriptor{desc("user", "alice")}}) // 11 of 10: over by 1, near 2
	out = append(out, metricsCall{3, []*rlv3.RateLimitDescriptor{desc("route", "r1", "method", "GET")}})
	out = append(out, metricsCall{2, []*rlv3.RateLimitDescriptor{desc("route", "r1", "method", "GET"), desc("user", "bob")}})
	out = append(out, metricsCall{1, []*rlv3.RateLimitDescriptor{desc("route", "r1", "method", "GET"), desc("user", "bob")}})
	for range 4 {
		out = append(out, metricsCall{1, []*rlv3.RateLimitDescriptor{desc("beta", "x")}})
	}
	out = append(out, metricsCall{0, []*rlv3.RateLimitDescriptor{desc("unknown", "y"), desc("user", "carol")}})
	return out
}

// peerMetricsWant is what the peer served after metricsSequence with
// NEAR_LIMIT_RATIO=0.8, recorded from envoyproxy/ratelimit built from its
// repository (see peerBinary): every ratelimit_service_* counter series,
// as name{labels} value, sorted. A test run with SLUICE_TEST_PEER checks
// the peer against it too.
var peerMetricsWant = []string{
	`ratelimit_service_config_load_success 1`,
	`ratelimit_service_rate_limit_near_limit{domain="gw",key1="beta"} 1`,
	`ratelimit_service_rate_limit_near_limit{domain="gw",key1="route",key2="method"} 1`,
	`ratelimit_service_rate_limit_near_limit{domain="gw",key1="user"} 2`,
	`ratelimit_service_rate_limit_over_limit{domain="gw",key1="beta"} 2`,
	`ratelimit_service_rate_limit_over_limit{domain="gw",key1="route",key2="method"} 1`,
	`ratelimit_service_rate_limit_over_limit{domain="gw",key1="user"} 1`,
	`ratelimit_service_rate_limit_shadow_mode{domain="gw",key1="beta"} 2`,
	`ratelimit_service_rate_limit_total_hits{domain="gw",key1="beta"} 4`,
	`ratelimit_service_rate_limit_total_hits{domain="gw",key1="route",key2="method"} 6`,
	`ratelimit_service_rate_limit_total_hits{domain="gw",key1="user"} 15`,
	`ratelimit_service_rate_limit_within_limit{domain="gw",key1="beta"} 2`,
	`ratelimit_service_rate_limit_within_limit{domain="gw",key1="route",key2="method"} 5`,
	`ratelimit_service_rate_limit_within_limit{domain="gw",key1="user"} 11`,
	`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 16`,
	`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 16`,
}

// peerMetadataWant is the dynamic metadata of each call of
// metricsSequence, as the peer returned it (protojson, the limit's text
// form aside), recorded as peerMetricsWant is.
var peerMetadataWant = []string{
	`{"descriptors":[{"entries":["user=alice"],"hitsAddend":1}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
	`{"descriptors":[{"entries":["user=alice"],"hitsAddend":1}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
	`{"descriptors":[{"entries":["user=alice"],"hitsAddend":1}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
	`{"descriptors":[{"entries":["user=alice"],"hitsAddend":1}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
	`{"descriptors":[{"entries":["user=alice"],"hitsAddend":1}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
	`{"descriptors":[{"entries":["user=alice"],"hitsAddend":1}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
	`{"descriptors":[{"entries":["user=alice"],"hitsAddend":1}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
	`{"descriptors":[{"entries":["user=alice"],"hitsAddend":4}],"domain":"gw"}`,
	`{"descriptors":[{"entries":["route=r1","method=GET"],"hitsAddend":3}],"domain":"gw","metadata":{"extra":1,"team":"b","tier":{"region":"eu"}}}`,
	`{"descriptors":[{"entries":["route=r1","method=GET"],"hitsAddend":2},{"entries":["user=bob"],"hitsAddend":2}],"domain":"gw","metadata":{"extra":1,"team":"b","tier":{"plan":"gold","region":"eu"}}}`,
	`{"descriptors":[{"entries":["route=r1","method=GET"],"hitsAddend":1},{"entries":["user=bob"],"hitsAddend":1}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
	`{"descriptors":[{"entries":["beta=x"],"hitsAddend":1}],"domain":"gw"}`,
	`{"descriptors":[{"entries":["beta=x"],"hitsAddend":1}],"domain":"gw"}`,
	`{"descriptors":[{"entries":["beta=x"],"hitsAddend":1}],"domain":"gw"}`,
	`{"descriptors":[{"entries":["beta=x"],"hitsAddend":1}],"domain":"gw"}`,
	`{"descriptors":[{"entries":["unknown=y"]},{"entries":["user=carol"]}],"domain":"gw","metadata":{"team":"a","tier":{"plan":"gold"}}}`,
}

// TestPeerMetricsAndMetadata: Sluice started as the peer with
// USE_PROMETHEUS and RESPONSE_DYNAMIC_METADATA serves, after a fixed
// sequence of calls, the peer's ratelimit_service_* metrics with the same
// names, labels and values, and returns the same dynamic metadata in each
// response.
func TestPeerMetricsAndMetadata(t *testing.T) {
	sides := []string{"sluice"}
	if peerBinary() != "" {
		sides = append(sides, "envoyproxy/ratelimit")
	}
	for _, name := range sides {
		t.Run(name, func(t *testing.T) {
			r := redistest.Start(t)
			root := t.TempDir()
			writeConfig(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"gw.yaml": metricsRules})
			grpcPort, promPort := port(t), port(t)
			env := peerEnv(t, r.Addr, root, grpcPort)
			env["USE_PROMETHEUS"], env["PROMETHEUS_ADDR"] = "true", "127.0.0.1:"+promPort
			env["RESPONSE_DYNAMIC_METADATA"], env["STATS_FLUSH_INTERVAL"] = "true", "100ms"
			if name == "sluice" {
				startRatelimit(t, env, "127.0.0.1:"+grpcPort)
			} else {
				startWithEnv(t, peerBinary(), env, "127.0.0.1:"+grpcPort)
			}
			c, _ := rlsClient(t, "127.0.0.1:"+grpcPort)
			var metadata []string
			for _, call := range metricsSequence() {
				for _, d := range call.ds {
					if call.hits > 0 {
						d.HitsAddend = wrapperspb.UInt64(call.hits)
					}
				}
				resp := ask(t, c, "gw", 0, call.ds...)
				b, err := protojson.MarshalOptions{}.Marshal(resp.GetDynamicMetadata())
				if err != nil {
					t.Fatal(err)
				}
				metadata = append(metadata, strings.ReplaceAll(string(b), " ", ""))
			}
			// The peer's counters reach /metrics at its next flush.
			var got []string
			deadline := time.Now().Add(10 * time.Second)
			for {
				got = scrapePeerMetrics(t, "http://127.0.0.1:"+promPort+"/metrics")
				if slices.Equal(got, peerMetricsWant) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !slices.Equal(got, peerMetricsWant) {
				t.Errorf("metrics:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(peerMetricsWant, "\n     "))
			}
			if !slices.Equal(metadata, peerMetadataWant) {
				t.Errorf("dynamic metadata:\n got %s\nwant %s", strings.Join(metadata, "\n     "), strings.Join(peerMetadataWant, "\n     "))
			}
		})
	}
}

// scrapePeerMetrics is every ratelimit_service_* counter sample of the
// page (histograms by their _count), sorted.
func scrapePeerMetrics(t *testing.T, url string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "ratelimit_service_") || strings.Contains(line, "_bucket{") || strings.Contains(line, "_sum{") {
			continue
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}
