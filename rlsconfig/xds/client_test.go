package xds

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rlsconfig/xds/xdstest"
	"github.com/sluice-rl/sluice/service"
)

// start runs a client until the test ends, and a gRPC door answering from
// its configuration on the in-memory store.
func start(t *testing.T, cfg Config) (*Client, *rls.Server) {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	door, err := rls.New(rls.Config{Service: svc, Rules: c.Current})
	if err != nil {
		t.Fatal(err)
	}
	return c, door
}

// ask is the door's answer for one descriptor (key, value) of domain.
func ask(t *testing.T, door *rls.Server, domain, key, value string) *pb.RateLimitResponse {
	t.Helper()
	resp, err := door.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// limitOf is the requests_per_unit the door reports, 0 when none.
func limitOf(r *pb.RateLimitResponse) uint32 {
	return r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// The life of a configuration over xDS: the first version answers calls,
// with the node's id, metadata and headers seen by the server; a second is
// applied live; a third that fails the loader's checks is NACKed with the
// reason while the second keeps answering.
func TestApplyUpdateAndRefuse(t *testing.T) {
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set(t, "sluice-1", "1", xdstest.Limits("shop", "client_ip", 2))
	c, door := start(t, Config{Server: m.Addr, NodeID: "sluice-1", NodeMetadata: map[string]string{"cluster": "eg"},
		Headers: map[string]string{"x-tenant": "t1"}, RetryInterval: 10 * time.Millisecond})

	first := m.Next(t, "first request", func(*discoveryv3.DiscoveryRequest) bool { return true })
	if first.GetNode().GetId() != "sluice-1" || first.GetNode().GetMetadata().GetFields()["cluster"].GetStringValue() != "eg" {
		t.Errorf("node %v; want id sluice-1 and metadata cluster=eg", first.GetNode())
	}
	if first.GetTypeUrl() != resource.RateLimitConfigType || TypeURL != resource.RateLimitConfigType {
		t.Errorf("asked for %q", first.GetTypeUrl())
	}
	select {
	case md := <-m.Opened:
		if got := md.Get("x-tenant"); len(got) != 1 || got[0] != "t1" {
			t.Errorf("stream metadata %v; want x-tenant: t1", md)
		}
	case <-time.After(xdstest.Wait):
		t.Fatal("no stream opened")
	}
	m.Acked(t, "1")
	select {
	case <-c.Applied():
	default:
		t.Fatal("version 1 ACKed but Applied is not closed")
	}
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := ask(t, door, "shop", "client_ip", "192.0.2.1"); got.GetOverallCode() != want || limitOf(got) != 2 {
			t.Fatalf("call %d: %v; want %v with a limit of 2", i+1, got, want)
		}
	}

	m.Set(t, "sluice-1", "2", xdstest.Limits("shop", "client_ip", 5), xdstest.Limits("media", "bucket", 7))
	m.Acked(t, "2")
	if got := ask(t, door, "shop", "client_ip", "192.0.2.1"); got.GetOverallCode() != pb.RateLimitResponse_OK || limitOf(got) != 5 {
		t.Fatalf("after version 2: %v; want OK, the third of 5", got)
	}
	if got := limitOf(ask(t, door, "media", "bucket", "b")); got != 7 {
		t.Fatalf("media's limit %d; want 7 from version 2", got)
	}

	bad := xdstest.Limits("media", "bucket", 9)
	bad.Descriptors[0].RateLimit.Unit = rlspb.RateLimitUnit_UNKNOWN
	m.Set(t, "sluice-1", "3", xdstest.Limits("shop", "client_ip", 1), bad)
	nack := m.Next(t, "NACK of version 3", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, `RateLimitConfig "media-limits": descriptors[0].rate_limit.unit: invalid rate limit unit 'UNKNOWN'`) {
		t.Errorf("NACK says %q", msg)
	}
	if nack.GetVersionInfo() != "2" {
		t.Errorf("NACK names version %q as in use; want 2", nack.GetVersionInfo())
	}
	if got := limitOf(ask(t, door, "shop", "client_ip", "192.0.2.1")); got != 5 {
		t.Errorf("after the refused version, shop's limit is %d; want 5 from version 2", got)
	}
	// The refusal is on the record, not only in the log: the version in
	// use is still 2 and the server's latest failed to load.
	info := func() map[string]string {
		m := map[string]string{}
		for _, f := range c.Info() {
			m[f[0]] = f[1]
		}
		return m
	}
	// go-control-plane's cache answers each NACK with the refused version
	// again while it is the latest: the client refuses the first resend at
	// once, then waits (10 ms here, doubling, each wait at least half its
	// nominal), and counts one failure, not one a resend. Refusing at once,
	// it NACKed a thousand times a second.
	if at := m.NACKs(t, 4); at[3].Sub(at[1]) < 15*time.Millisecond {
		t.Errorf("the second and fourth NACKs %s apart; want the waits of 10 and 20 ms, jittered (15 ms at least)", at[3].Sub(at[1]))
	}
	if st, in := c.Status(), info(); !st.Failing || st.Failures != 1 || !strings.Contains(st.LastError, "invalid rate limit unit") ||
		in["rls_xds_version"] != "2" || in["rls_config_reload_failing"] != "1" || in["rls_domains"] != "2" {
		t.Errorf("after the NACK: status %+v, INFO %v; want failing once, version 2 in use", st, in)
	}
	m.Set(t, "sluice-1", "4", xdstest.Limits("shop", "client_ip", 6))
	m.Acked(t, "4")
	if st, in := c.Status(), info(); st.Failing || st.Failures != 1 || in["rls_xds_version"] != "4" || in["rls_config_reload_failing"] != "0" {
		t.Errorf("after version 4: status %+v, INFO %v; want failing cleared (the refusals still counted), version 4 in use", st, in)
	}
}

// The server stops and comes back on the same port with a new version: the
// client reconnects, says which version it has, and applies the new one;
// meanwhile the old configuration answers.
func TestReconnect(t *testing.T) {
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set(t, "n", "1", xdstest.Limits("shop", "client_ip", 2))
	c, door := start(t, Config{Server: m.Addr, NodeID: "n", RetryInterval: 10 * time.Millisecond, MaxRetryInterval: 50 * time.Millisecond})
	m.Acked(t, "1")

	m.Stop()
	if got := limitOf(ask(t, door, "shop", "client_ip", "x")); got != 2 {
		t.Fatalf("with the server gone, shop's limit is %d; want 2", got)
	}
	m2 := xdstest.Start(t, m.Addr, nil)
	m2.Set(t, "n", "7", xdstest.Limits("shop", "client_ip", 3))
	again := m2.Next(t, "request on a new stream", func(*discoveryv3.DiscoveryRequest) bool { return true })
	if again.GetVersionInfo() != "1" || again.GetResponseNonce() != "" {
		t.Errorf("a new stream asks with version %q nonce %q; want version 1, no nonce", again.GetVersionInfo(), again.GetResponseNonce())
	}
	m2.Acked(t, "7")
	if got := limitOf(ask(t, door, "shop", "client_ip", "x")); got != 3 {
		t.Fatalf("after reconnecting, shop's limit is %d; want 3 from version 7", got)
	}
	if got := c.Current().Files(); len(got) != 1 || got[0] != "shop-limits" {
		t.Errorf("resources in use %v", got)
	}
}

// mTLS: the server asks for a client certificate from its CA; the client,
// configured from PEM files as the sidecar is, checks the server's against
// the same CA and presents its own.
func TestMutualTLS(t *testing.T) {
	certs := xdstest.NewCerts(t, t.TempDir())
	m := xdstest.Start(t, "127.0.0.1:0", certs.ServerTLS())
	m.Set(t, "n", "1", xdstest.Limits("shop", "client_ip", 4))
	tlsCfg, err := TLSFiles(certs.CAFile, certs.ClientCert, certs.ClientKey, xdstest.ServerName)
	if err != nil {
		t.Fatal(err)
	}
	_, door := start(t, Config{Server: m.Addr, NodeID: "n", RetryInterval: 10 * time.Millisecond, TLS: tlsCfg})
	m.Acked(t, "1")
	if got := limitOf(ask(t, door, "shop", "client_ip", "x")); got != 4 {
		t.Fatalf("over mTLS, shop's limit is %d; want 4", got)
	}

	// Without its certificate the node is turned away at the handshake,
	// tries again, and is turned away again: no stream, no configuration.
	hellos := make(chan struct{}, 100)
	serverTLS := certs.ServerTLS()
	serverTLS.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { hellos <- struct{}{}; return nil, nil }
	m2 := xdstest.Start(t, "127.0.0.1:0", serverTLS)
	m2.Set(t, "n", "1", xdstest.Limits("shop", "client_ip", 4))
	noCert, err := TLSFiles(certs.CAFile, "", "", xdstest.ServerName)
	if err != nil {
		t.Fatal(err)
	}
	anon, _ := start(t, Config{Server: m2.Addr, NodeID: "n", RetryInterval: 10 * time.Millisecond, TLS: noCert})
	for i := range 2 {
		select {
		case <-hellos:
		case <-time.After(xdstest.Wait):
			t.Fatalf("handshake %d never came", i+1)
		}
	}
	select {
	case md := <-m2.Opened:
		t.Fatalf("a stream opened without a client certificate: %v", md)
	case <-anon.Applied():
		t.Fatal("a configuration applied without a client certificate")
	default:
	}
}

// A response larger than MaxMessageSize breaks the stream, is never
// applied, and the client comes back for it.
func TestMaxMessageSize(t *testing.T) {
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set(t, "n", "1", xdstest.Limits("shop", "client_ip", 2))
	c, _ := start(t, Config{Server: m.Addr, NodeID: "n", RetryInterval: 10 * time.Millisecond, MaxMessageSize: 64})
	for i := range 2 {
		select {
		case <-m.Opened:
		case <-time.After(xdstest.Wait):
			t.Fatalf("stream %d never opened", i+1)
		}
	}
	select {
	case <-c.Applied():
		t.Fatal("a response over the size limit was applied")
	default:
	}
}
