package rls

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/rlsconfig"
	"github.com/sluice-rl/sluice/service"
)

func newServer(tb testing.TB, yaml string, cfg Config) *Server {
	tb.Helper()
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: mem})
	if err != nil {
		tb.Fatal(err)
	}
	rules, err := rlsconfig.Parse(rlsconfig.File{Name: "b.yaml", Data: []byte(yaml)})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Service, cfg.Rules = svc, func() *rlsconfig.Config { return rules }
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

const benchYAML = `domain: b
descriptors:
  - key: client_ip
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// BenchmarkShouldRateLimit is the gRPC door's decision path without the
// network: one descriptor, resolved, decided on the in-memory store, and
// answered. Its allocations are the response (statuses, current_limit,
// duration) and the rule's state key.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"plain", Config{}},
		{"headers=both", Config{Headers: HeadersBoth}},
		{"stop-when-over", Config{StopWhenOverLimit: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := newServer(b, benchYAML, tc.cfg)
			req := &pb.RateLimitRequest{Domain: "b", Descriptors: []*rlv3.RateLimitDescriptor{
				{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client_ip", Value: "192.0.2.1"}}}}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWindowLeft: the rest of an epoch-aligned window, as the peer's
// CalculateReset.
func TestWindowLeft(t *testing.T) {
	now := time.Unix(1_800_000_010, 0)
	if got := windowLeft(time.Minute, now); got != 50*time.Second {
		t.Fatalf("windowLeft = %v, want 50s", got)
	}
}

// BenchmarkGRPC is a whole call over loopback TCP: the client's and the
// server's gRPC work together, with 50 callers in flight (GOMAXPROCS × the
// parallelism), on the in-memory store, on each transport. The client is
// grpc-go's on both, so the difference between the two is the server's.
func BenchmarkGRPC(b *testing.B) {
	for _, tr := range []Transport{TransportOwn, TransportGRPCGo} {
		b.Run(tr.String(), func(b *testing.B) { benchmarkGRPC(b, tr) })
	}
}

func benchmarkGRPC(b *testing.B, tr Transport) {
	s := newServer(b, benchYAML, Config{Transport: tr})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer func() { _ = s.Shutdown(context.Background()) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	req := &pb.RateLimitRequest{Domain: "b", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client_ip", Value: "192.0.2.1"}}}}}
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkHandler is what the door does for a call between grpc's
// transport and the bytes it writes: read the request into a pooled one,
// decide it on the in-memory store, write the pooled reply. Its
// allocations are Sluice's own per call, without grpc-go's.
func BenchmarkHandler(b *testing.B) {
	s := newServer(b, benchYAML, Config{})
	in, err := proto.Marshal(&pb.RateLimitRequest{Domain: "b", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client_ip", Value: "192.0.2.1"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	c := newCodec()
	// Made once, so that the allocations counted are the door's alone
	// (grpc hands the codec a BufferSlice it has already made).
	data := mem.BufferSlice{mem.SliceBuffer(in)}
	dec := func(v any) error { return c.Unmarshal(data, v) }
	b.ReportAllocs()
	for b.Loop() {
		rep, err := handleShouldRateLimit(s, context.Background(), dec, nil)
		if err != nil {
			b.Fatal(err)
		}
		out, err := c.Marshal(rep)
		if err != nil {
			b.Fatal(err)
		}
		out.Free()
	}
}
