// Package xdstest runs a real xDS management server for tests:
// go-control-plane's snapshot cache and ADS server on a loopback port, with
// every request it receives on a channel, so that a test waits on what the
// server saw (an ACK, a NACK, a node) instead of sleeping. It also makes
// the certificates of an mTLS test. Only tests import it: the sidecar's
// binary does not carry go-control-plane's server.
package xdstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/testca"
)

// Wait bounds every wait on the server: a broken client fails its test in
// this long, not at the test binary's timeout.
const Wait = 10 * time.Second

// Server is a running management server.
type Server struct {
	Addr string // host:port
	// Requests receives every DiscoveryRequest, in order.
	Requests chan *discoveryv3.DiscoveryRequest
	// Opened receives each stream's incoming gRPC metadata.
	Opened chan metadata.MD
	cache  cachev3.SnapshotCache
	srv    *grpc.Server

	mu    sync.Mutex
	nacks []time.Time // guarded by mu: when each NACK came
}

// Start serves on addr ("127.0.0.1:0" for a free port, or the address of
// a stopped server to restart it) until the test ends; tlsCfg, if set,
// secures it.
func Start(t testing.TB, addr string, tlsCfg *tls.Config) *Server {
	t.Helper()
	s := &Server{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil),
		Requests: make(chan *discoveryv3.DiscoveryRequest, 1000), Opened: make(chan metadata.MD, 100)}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.Opened <- md
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				s.mu.Lock()
				s.nacks = append(s.nacks, time.Now())
				s.mu.Unlock()
			}
			s.Requests <- proto.Clone(req).(*discoveryv3.DiscoveryRequest)
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s.srv = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.srv, serverv3.NewServer(ctx, s.cache, cb))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Stop(); cancel() })
	return s
}

// Stop closes the listener and every stream at once.
func (s *Server) Stop() { s.srv.Stop() }

// Set makes resources the snapshot of node at version.
func (s *Server) Set(t testing.TB, node, version string, rcs ...*rlspb.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(rcs))
	for i, rc := range rcs {
		res[i] = rc
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// Next is the first request received from now on that ok accepts.
func (s *Server) Next(t testing.TB, what string, ok func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	t.Helper()
	deadline := time.After(Wait)
	for {
		select {
		case req := <-s.Requests:
			if ok(req) {
				return req
			}
		case <-deadline:
			t.Fatalf("the management server saw no %s in %s", what, Wait)
		}
	}
}

// Acked waits for a client's ACK of version.
func (s *Server) Acked(t testing.TB, version string) *discoveryv3.DiscoveryRequest {
	t.Helper()
	return s.Next(t, "ACK of version "+version, func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetVersionInfo() == version && r.GetErrorDetail() == nil
	})
}

// NACKs waits for the server's nth NACK and says when it received each
// of the first n, the earliest first.
func (s *Server) NACKs(t testing.TB, n int) []time.Time {
	t.Helper()
	for end := time.Now().Add(Wait); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		seen := slices.Clone(s.nacks)
		s.mu.Unlock()
		if len(seen) >= n {
			return seen[:n]
		}
		if time.Now().After(end) {
			t.Fatalf("the management server saw %d NACKs in %s; want %d", len(seen), Wait, n)
		}
	}
}

// Limits is a resource of one rule: key, n per minute, in domain.
func Limits(domain, key string, n uint32) *rlspb.RateLimitConfig {
	return &rlspb.RateLimitConfig{Name: domain + "-limits", Domain: domain, Descriptors: []*rlspb.RateLimitDescriptor{
		{Key: key, RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_MINUTE, RequestsPerUnit: n}}}}
}

// ServerName is the name in every certificate Certs makes.
const ServerName = "xds.test"

// Certs are a test CA, a server certificate and a client certificate it
// signed, in memory and as PEM files.
type Certs struct {
	Pool   *x509.CertPool  // the CA
	Server tls.Certificate // the management server's
	Client tls.Certificate // the node's
	// CAFile, ClientCert and ClientKey are PEM files of the CA, and of the
	// client's certificate and key.
	CAFile, ClientCert, ClientKey string
}

// NewCerts makes the certificates, writing the files to dir.
func NewCerts(t testing.TB, dir string) *Certs {
	t.Helper()
	ca := testca.New(t)
	server := ca.Issue(t, "xds-server", ServerName)
	client := ca.Issue(t, "sluice", ServerName)
	c := &Certs{Pool: ca.Pool, Server: server.TLS, Client: client.TLS, CAFile: filepath.Join(dir, "ca.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem")}
	if err := os.WriteFile(c.CAFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	client.Write(t, c.ClientCert, c.ClientKey)
	return c
}

// ServerTLS is the management server's TLS: its certificate, and a client
// certificate from the CA required.
func (c *Certs) ServerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.Server}, ClientCAs: c.Pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}
