package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-rl/sluice/internal/settings"
	"github.com/sluice-rl/sluice/rlsconfig/xds/xdstest"
)

// xdsSidecar is a sidecar whose gRPC door answers from the xDS server at
// addr, over mTLS with certs, on the in-memory store.
func xdsSidecar(addr string, certs *xdstest.Certs, startWithout bool) Config {
	cfg := settings.Default()
	cfg.Listen, cfg.AdminListen, cfg.GRPCListen = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.RLSXDSServer, cfg.RLSXDSNodeID, cfg.RLSXDSRetry = addr, "envoy-ratelimit", 10*time.Millisecond
	cfg.RLSXDSTLSCA, cfg.RLSXDSTLSCert, cfg.RLSXDSTLSKey = certs.CAFile, certs.ClientCert, certs.ClientKey
	cfg.RLSXDSTLSServerName, cfg.RLSXDSStartWithoutConfig = xdstest.ServerName, startWithout
	return cfg
}

// serveSidecar runs New's sidecar until the test ends, and is a client of
// its gRPC door.
func serveSidecar(t *testing.T, s *Sidecar) pb.RateLimitServiceClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(s.grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

// call asks the door for one descriptor of shop, and is its answer.
func call(t *testing.T, c pb.RateLimitServiceClient) *pb.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client_ip", Value: "192.0.2.1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The sidecar's settings take the configuration from an xDS server over
// mTLS, and New waits for the first one: the door never answers from none.
func TestRLSFromXDS(t *testing.T) {
	certs := xdstest.NewCerts(t, t.TempDir())
	m := xdstest.Start(t, "127.0.0.1:0", certs.ServerTLS())
	built := make(chan error, 1)
	var s *Sidecar
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Wait)
	defer cancel()
	go func() {
		var err error
		s, err = New(ctx, xdsSidecar(m.Addr, certs, false), quiet, nil)
		built <- err
	}()
	first := m.Next(t, "first request", func(*discoveryv3.DiscoveryRequest) bool { return true })
	if first.GetNode().GetId() != "envoy-ratelimit" {
		t.Errorf("node id %q", first.GetNode().GetId())
	}
	select {
	case err := <-built:
		t.Fatalf("New returned before any configuration came: %v", err)
	default:
	}
	m.Set(t, "envoy-ratelimit", "1", xdstest.Limits("shop", "client_ip", 1))
	select {
	case err := <-built:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(xdstest.Wait):
		t.Fatal("New still waits after the first configuration came")
	}
	door := serveSidecar(t, s)
	if got := call(t, door); got.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("first call: %v", got)
	}
	if got := call(t, door); got.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call of 1 per minute: %v", got)
	}
}

// With --rls-xds-start-without-config, New returns at once and every
// domain is unknown (OK, no limit) until the server sends one.
func TestRLSFromXDSStartWithout(t *testing.T) {
	certs := xdstest.NewCerts(t, t.TempDir())
	m := xdstest.Start(t, "127.0.0.1:0", certs.ServerTLS())
	// A sidecar that waited anyway would fail here, not hang.
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Wait)
	defer cancel()
	s, err := New(ctx, xdsSidecar(m.Addr, certs, true), quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	door := serveSidecar(t, s)
	if got := call(t, door); got.GetOverallCode() != pb.RateLimitResponse_OK || got.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("before any configuration: %v; want OK with no limit", got)
	}
	m.Set(t, "envoy-ratelimit", "1", xdstest.Limits("shop", "client_ip", 7))
	m.Acked(t, "1")
	if got := call(t, door).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != 7 {
		t.Fatalf("after version 1, the limit is %d; want 7", got)
	}
}

// With --rls-ready-with-config (the peer's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), a sidecar started without a
// configuration serves but reports not ready, over gRPC health and
// /readyz alike, until xDS has sent a domain.
func TestRLSReadyWithConfig(t *testing.T) {
	certs := xdstest.NewCerts(t, t.TempDir())
	m := xdstest.Start(t, "127.0.0.1:0", certs.ServerTLS())
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Wait)
	defer cancel()
	cfg := xdsSidecar(m.Addr, certs, true)
	cfg.RLSReadyWithConfig = true
	s, err := New(ctx, cfg, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	serveSidecar(t, s)
	conn, err := grpc.NewClient(s.grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if got := status(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before any configuration, health says %v; want NOT_SERVING", got)
	}
	if err := s.ready(); err == nil || !strings.Contains(err.Error(), "--rls-ready-with-config") {
		t.Fatalf("before any configuration, readiness %v; want the reason naming --rls-ready-with-config", err)
	}
	m.Set(t, "envoy-ratelimit", "1", xdstest.Limits("shop", "client_ip", 7))
	m.Acked(t, "1")
	if got := status(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after version 1, health says %v; want SERVING", got)
	}
}
