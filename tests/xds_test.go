package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rlsconfig/xds/xdstest"
)

// TestRLSFromXDS: the binary, set up as Envoy Gateway sets up its rate
// limit service (node id envoy-ratelimit, mTLS to the xDS server, serving
// before any configuration), answers from what the server sends; it keeps
// answering while the server is gone, and takes the next version from the
// server restarted on the same port.
func TestRLSFromXDS(t *testing.T) {
	certs := xdstest.NewCerts(t, t.TempDir())
	m := xdstest.Start(t, "127.0.0.1:0", certs.ServerTLS())
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	s := startSluice(t, "--grpc-listen", grpcAddr, "--rls-xds-server", m.Addr, "--rls-xds-node-id", "envoy-ratelimit",
		"--rls-xds-node-metadata", "cluster=gateway", "--rls-xds-tls-ca", certs.CAFile, "--rls-xds-tls-cert", certs.ClientCert,
		"--rls-xds-tls-key", certs.ClientKey, "--rls-xds-tls-server-name", xdstest.ServerName,
		"--rls-xds-start-without-config", "--rls-xds-retry", "20ms")
	c, _ := rlsClient(t, grpcAddr)
	call := func() *pb.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop",
			Descriptors: []*rlv3.RateLimitDescriptor{desc("client_ip", "192.0.2.1")}}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v\n%s", err, s.logs)
		}
		return resp
	}
	limit := func(r *pb.RateLimitResponse) uint32 { return r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() }

	first := m.Next(t, "first request", func(*discoveryv3.DiscoveryRequest) bool { return true })
	if n := first.GetNode(); n.GetId() != "envoy-ratelimit" || n.GetMetadata().GetFields()["cluster"].GetStringValue() != "gateway" {
		t.Errorf("node %v", n)
	}
	if got := call(); got.GetOverallCode() != pb.RateLimitResponse_OK || limit(got) != 0 {
		t.Fatalf("before any configuration: %v; want OK without a limit", got)
	}
	m.Set(t, "envoy-ratelimit", "1", xdstest.Limits("shop", "client_ip", 2))
	m.Acked(t, "1")
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := call(); got.GetOverallCode() != want || limit(got) != 2 {
			t.Fatalf("call %d: %v; want %v with a limit of 2", i+1, got, want)
		}
	}

	m.Stop()
	if got := call(); got.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("with the xDS server gone: %v; want version 1 still deciding", got)
	}
	m2 := xdstest.Start(t, m.Addr, certs.ServerTLS())
	m2.Set(t, "envoy-ratelimit", "2", xdstest.Limits("shop", "client_ip", 10))
	m2.Acked(t, "2")
	if got := call(); got.GetOverallCode() != pb.RateLimitResponse_OK || limit(got) != 10 {
		t.Fatalf("after version 2: %v; want OK, the fourth of 10", got)
	}

	// A version that does not load is refused; go-control-plane's cache
	// sends it again at each refusal, and the binary refuses the first
	// resend at once and the next after growing waits from --rls-xds-retry
	// (20 ms), counting and logging it once, while version 2 decides.
	bad := xdstest.Limits("shop", "client_ip", 1)
	bad.Descriptors[0].RateLimit.Unit = rlspb.RateLimitUnit_UNKNOWN
	m2.Set(t, "envoy-ratelimit", "3", bad)
	if at := m2.NACKs(t, 4); at[3].Sub(at[1]) < 30*time.Millisecond {
		t.Errorf("the second and fourth NACKs of version 3 %s apart; want the waits of 20 and 40 ms, jittered (30 ms at least)", at[3].Sub(at[1]))
	}
	if got := call(); got.GetOverallCode() != pb.RateLimitResponse_OK || limit(got) != 10 {
		t.Errorf("after the refused version: %v; want version 2 deciding", got)
	}
	fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
	for name, want := range map[string]float64{"sluice_config_reload_failures_total": 1, "sluice_config_reload_failing": 1} {
		if v, ok := metricstest.Sample(fams, name, map[string]string{"config": "rls"}); !ok || v != want {
			t.Errorf("%s{config=rls} = %v, %v; want %v", name, v, ok, want)
		}
	}
	for want, n := range map[string]int{"rls config applied from xDS": 2, "xDS stream broken": -1,
		"xDS version refused": 1, "sent the refused version again": 1} {
		if got := strings.Count(s.logs.String(), want); got == 0 || n > 0 && got != n {
			t.Errorf("the log says %q %d times; want %d:\n%s", want, got, n, s.logs)
		}
	}
}
