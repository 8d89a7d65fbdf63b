package xds

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/service"
)

// wait bounds every wait on the management server: a broken client fails
// the test in this long, not at the test binary's timeout.
const wait = 10 * time.Second

// mgmt is a real go-control-plane management server: its snapshot cache
// and its ADS server, with the requests it receives on a channel.
type mgmt struct {
	cache    cachev3.SnapshotCache
	srv      *grpc.Server
	addr     string
	requests chan *discoveryv3.DiscoveryRequest
	opened   chan metadata.MD // each stream's incoming metadata
}

// serve starts a management server on addr ("127.0.0.1:0" for a free
// port) with cache; tlsCfg, if set, secures it.
func serve(t *testing.T, addr string, cache cachev3.SnapshotCache, tlsCfg *tls.Config) *mgmt {
	t.Helper()
	m := &mgmt{cache: cache, requests: make(chan *discoveryv3.DiscoveryRequest, 1000), opened: make(chan metadata.MD, 100)}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			m.opened <- md
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			m.requests <- proto.Clone(req).(*discoveryv3.DiscoveryRequest)
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	m.srv = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(m.srv, serverv3.NewServer(ctx, cache, cb))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m.addr = ln.Addr().String()
	go m.srv.Serve(ln)
	t.Cleanup(func() { m.srv.Stop(); cancel() })
	return m
}

// set makes resources the snapshot of node at version.
func (m *mgmt) set(t *testing.T, node, version string, rcs ...*rlspb.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(rcs))
	for i, rc := range rcs {
		res[i] = rc
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// next is the first request the server receives from now that ok accepts.
func (m *mgmt) next(t *testing.T, what string, ok func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case req := <-m.requests:
			if ok(req) {
				return req
			}
		case <-deadline:
			t.Fatalf("the management server saw no %s in %s", what, wait)
		}
	}
}

// acked waits for the client's ACK of version.
func (m *mgmt) acked(t *testing.T, version string) *discoveryv3.DiscoveryRequest {
	t.Helper()
	return m.next(t, "ACK of version "+version, func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetVersionInfo() == version && r.GetErrorDetail() == nil
	})
}

func limits(domain, key string, n uint32) *rlspb.RateLimitConfig {
	return &rlspb.RateLimitConfig{Name: domain + "-limits", Domain: domain, Descriptors: []*rlspb.RateLimitDescriptor{
		{Key: key, RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_MINUTE, RequestsPerUnit: n}}}}
}

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
	mem, err := engine.NewMemoryStore(engine.MemoryConfig{})
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
	m := serve(t, "127.0.0.1:0", cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), nil)
	m.set(t, "sluice-1", "1", limits("shop", "client_ip", 2))
	c, door := start(t, Config{Server: m.addr, NodeID: "sluice-1", NodeMetadata: map[string]string{"cluster": "eg"},
		Headers: map[string]string{"x-tenant": "t1"}, RetryInterval: 10 * time.Millisecond})

	first := m.next(t, "first request", func(*discoveryv3.DiscoveryRequest) bool { return true })
	if first.GetNode().GetId() != "sluice-1" || first.GetNode().GetMetadata().GetFields()["cluster"].GetStringValue() != "eg" {
		t.Errorf("node %v; want id sluice-1 and metadata cluster=eg", first.GetNode())
	}
	if first.GetTypeUrl() != resource.RateLimitConfigType || TypeURL != resource.RateLimitConfigType {
		t.Errorf("asked for %q", first.GetTypeUrl())
	}
	select {
	case md := <-m.opened:
		if got := md.Get("x-tenant"); len(got) != 1 || got[0] != "t1" {
			t.Errorf("stream metadata %v; want x-tenant: t1", md)
		}
	case <-time.After(wait):
		t.Fatal("no stream opened")
	}
	m.acked(t, "1")
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

	m.set(t, "sluice-1", "2", limits("shop", "client_ip", 5), limits("media", "bucket", 7))
	m.acked(t, "2")
	if got := ask(t, door, "shop", "client_ip", "192.0.2.1"); got.GetOverallCode() != pb.RateLimitResponse_OK || limitOf(got) != 5 {
		t.Fatalf("after version 2: %v; want OK, the third of 5", got)
	}
	if got := limitOf(ask(t, door, "media", "bucket", "b")); got != 7 {
		t.Fatalf("media's limit %d; want 7 from version 2", got)
	}

	bad := limits("media", "bucket", 9)
	bad.Descriptors[0].RateLimit.Unit = rlspb.RateLimitUnit_UNKNOWN
	m.set(t, "sluice-1", "3", limits("shop", "client_ip", 1), bad)
	nack := m.next(t, "NACK of version 3", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, `RateLimitConfig "media-limits": descriptors[0].rate_limit.unit: invalid rate limit unit 'UNKNOWN'`) {
		t.Errorf("NACK says %q", msg)
	}
	if nack.GetVersionInfo() != "2" {
		t.Errorf("NACK names version %q as in use; want 2", nack.GetVersionInfo())
	}
	if got := limitOf(ask(t, door, "shop", "client_ip", "192.0.2.1")); got != 5 {
		t.Errorf("after the refused version, shop's limit is %d; want 5 from version 2", got)
	}
}

// The server stops and comes back on the same port with a new version: the
// client reconnects, says which version it has, and applies the new one;
// meanwhile the old configuration answers.
func TestReconnect(t *testing.T) {
	m := serve(t, "127.0.0.1:0", cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), nil)
	m.set(t, "n", "1", limits("shop", "client_ip", 2))
	c, door := start(t, Config{Server: m.addr, NodeID: "n", RetryInterval: 10 * time.Millisecond, MaxRetryInterval: 50 * time.Millisecond})
	m.acked(t, "1")

	m.srv.Stop()
	if got := limitOf(ask(t, door, "shop", "client_ip", "x")); got != 2 {
		t.Fatalf("with the server gone, shop's limit is %d; want 2", got)
	}
	m2 := serve(t, m.addr, cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), nil)
	m2.set(t, "n", "7", limits("shop", "client_ip", 3))
	again := m2.next(t, "request on a new stream", func(*discoveryv3.DiscoveryRequest) bool { return true })
	if again.GetVersionInfo() != "1" || again.GetResponseNonce() != "" {
		t.Errorf("a new stream asks with version %q nonce %q; want version 1, no nonce", again.GetVersionInfo(), again.GetResponseNonce())
	}
	m2.acked(t, "7")
	if got := limitOf(ask(t, door, "shop", "client_ip", "x")); got != 3 {
		t.Fatalf("after reconnecting, shop's limit is %d; want 3 from version 7", got)
	}
	if got := c.Current().Files(); len(got) != 1 || got[0] != "shop-limits" {
		t.Errorf("resources in use %v", got)
	}
}

// mTLS: the server asks for a client certificate from its CA, the client
// checks the server's against the same CA and presents its own.
func TestMutualTLS(t *testing.T) {
	ca, caKey := newCert(t, "test-ca", nil, nil)
	server, _ := newCert(t, "xds-server", &ca, caKey)
	client, _ := newCert(t, "sluice", &ca, caKey)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	m := serve(t, "127.0.0.1:0", cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), &tls.Config{
		Certificates: []tls.Certificate{server}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	m.set(t, "n", "1", limits("shop", "client_ip", 4))
	_, door := start(t, Config{Server: m.addr, NodeID: "n", RetryInterval: 10 * time.Millisecond,
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}, ServerName: "xds.test", MinVersion: tls.VersionTLS12}})
	m.acked(t, "1")
	if got := limitOf(ask(t, door, "shop", "client_ip", "x")); got != 4 {
		t.Fatalf("over mTLS, shop's limit is %d; want 4", got)
	}

	// Without its certificate the node is turned away at the handshake,
	// tries again, and is turned away again: no stream, no configuration.
	hellos := make(chan struct{}, 100)
	m2 := serve(t, "127.0.0.1:0", cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), &tls.Config{
		Certificates: []tls.Certificate{server}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { hellos <- struct{}{}; return nil, nil }})
	m2.set(t, "n", "1", limits("shop", "client_ip", 4))
	anon, _ := start(t, Config{Server: m2.addr, NodeID: "n", RetryInterval: 10 * time.Millisecond,
		TLS: &tls.Config{RootCAs: pool, ServerName: "xds.test", MinVersion: tls.VersionTLS12}})
	for i := range 2 {
		select {
		case <-hellos:
		case <-time.After(wait):
			t.Fatalf("handshake %d never came", i+1)
		}
	}
	select {
	case md := <-m2.opened:
		t.Fatalf("a stream opened without a client certificate: %v", md)
	case <-anon.Applied():
		t.Fatal("a configuration applied without a client certificate")
	default:
	}
}

// newCert makes a certificate for name, signed by parent (nil: a CA).
func newCert(t *testing.T, name string, parent *tls.Certificate, parentKey *ecdsa.PrivateKey) (tls.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"xds.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature
	} else {
		signer, signerKey = parent.Leaf, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, key
}

