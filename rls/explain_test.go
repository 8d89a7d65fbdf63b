package rls

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-rl/sluice/internal/rlsopts"
	"github.com/sluice-rl/sluice/service"
)

// A call that asks with x-sluice-explain gets one explanation per
// descriptor in the response header x-sluice-explanation, on either
// transport, only when the server enables it: a gateway must not leak
// it. The third call of an IP allowed two an hour is refused by its
// rule; the second descriptor has no rule.
func TestExplain(t *testing.T) {
	for _, tr := range []rlsopts.Transport{rlsopts.TransportOwn, rlsopts.TransportGRPCGo} {
		for _, tc := range []struct {
			name          string
			enabled, asks bool
		}{
			{"enabled and asked", true, true},
			{"enabled, not asked", true, false},
			{"asked, not enabled", false, true},
		} {
			t.Run(tr.String()+"/"+tc.name, func(t *testing.T) {
				s, _ := newAnswering(t, Config{Transport: tr, Explain: tc.enabled})
				client := pb.NewRateLimitServiceClient(serveOn(t, s))
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if tc.asks {
					ctx = metadata.AppendToOutgoingContext(ctx, "x-sluice-explain", "1")
				}
				req := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{entry("client_ip", "203.0.113.7"), entry("nosuch", "x")}}
				var header metadata.MD
				for range 3 {
					header = nil
					resp, err := client.ShouldRateLimit(ctx, req, grpc.Header(&header))
					if err != nil {
						t.Fatal(err)
					}
					_ = resp
				}
				vals := header.Get("x-sluice-explanation")
				if !tc.enabled || !tc.asks {
					if len(vals) != 0 {
						t.Fatalf("explanations %q; want none", vals)
					}
					return
				}
				if len(vals) != 2 {
					t.Fatalf("explanations %q; want one per descriptor", vals)
				}
				var e, none service.Explanation
				if err := json.Unmarshal([]byte(vals[0]), &e); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal([]byte(vals[1]), &none); err != nil {
					t.Fatal(err)
				}
				if e.Door != "grpc" || e.Rule != "shop.client_ip" || e.Allowed || len(e.Limits) != 1 ||
					e.Limits[0].State != "used 3 of 2, back to full in 3000000ms" || e.Digest == "" || e.Path != "store" {
					t.Errorf("explanation %s: want rule shop.client_ip over its limit, with the rules' digest", vals[0])
				}
				if !none.Allowed || none.Path != "none" || none.Rule != "shop" {
					t.Errorf("explanation %s: want no rule, OK", vals[1])
				}
			})
		}
	}
}

// Metadata values must be ASCII: every other character is escaped, and
// the JSON reads back the same.
func TestASCIIJSON(t *testing.T) {
	for _, v := range []string{"plain", "café", "日本", "emoji 😀", "mixed \u2028 é"} {
		doc, _ := json.Marshal(map[string]string{"k": v})
		got := asciiJSON(doc)
		for i := 0; i < len(got); i++ {
			if got[i] >= 0x80 || got[i] < 0x20 {
				t.Fatalf("%q: byte %#x in %q", v, got[i], got)
			}
		}
		var back map[string]string
		if err := json.Unmarshal([]byte(got), &back); err != nil || back["k"] != v {
			t.Errorf("%q: %q reads back as %q (%v)", v, got, back["k"], err)
		}
	}
}
