package rls

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/internal/rlsopts"
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
		{"headers=both", Config{Headers: rlsopts.HeadersBoth}},
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

// serveBench serves the benchmark's configuration on transport tr on a
// loopback port until the benchmark ends, and returns the address.
func serveBench(b *testing.B, tr rlsopts.Transport) string {
	s := newServer(b, benchYAML, Config{Transport: tr})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	b.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return ln.Addr().String()
}

// benchRequest is the benchmarks' call: one descriptor of one entry.
func benchRequest() *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "b", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client_ip", Value: "192.0.2.1"}}}}}
}

// BenchmarkGRPC is a whole call over loopback TCP: the client's and the
// server's gRPC work together, with 50 callers in flight (GOMAXPROCS × the
// parallelism), on the in-memory store, on each transport. The client is
// grpc-go's on both, so the difference between the two is the server's.
func BenchmarkGRPC(b *testing.B) {
	for _, tr := range []rlsopts.Transport{rlsopts.TransportOwn, rlsopts.TransportGRPCGo} {
		b.Run(tr.String(), func(b *testing.B) { benchmarkGRPC(b, tr) })
	}
}

func benchmarkGRPC(b *testing.B, tr rlsopts.Transport) {
	addr := serveBench(b, tr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	req := benchRequest()
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
	in, err := proto.Marshal(benchRequest())
	if err != nil {
		b.Fatal(err)
	}
	c := newCodec(noCaps)
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

// BenchmarkServer is the server alone, on each transport, over loopback
// TCP, on the in-memory store: a client written frame by frame, which
// allocates nothing per call, sends batches of 50 calls in one write
// (HEADERS with hpack's indexed fields, as a client sends once its table
// is warm, and one DATA frame each) and counts their trailers. Its
// allocations per call are the server's: transport, door and decision.
func BenchmarkServer(b *testing.B) {
	for _, tr := range []rlsopts.Transport{rlsopts.TransportOwn, rlsopts.TransportGRPCGo} {
		b.Run(tr.String(), func(b *testing.B) { benchmarkServer(b, tr) })
	}
}

func benchmarkServer(b *testing.B, tr rlsopts.Transport) {
	nc, err := net.Dial("tcp", serveBench(b, tr))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	msg, err := proto.Marshal(benchRequest())
	if err != nil {
		b.Fatal(err)
	}
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	block := func() []byte {
		hbuf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", shouldRateLimitPath},
			{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return bytes.Clone(hbuf.Bytes())
	}
	first, warm := block(), block()
	frame := func(dst []byte, typ, flags byte, id uint32, payload []byte) []byte {
		n := len(payload)
		dst = append(dst, byte(n>>16), byte(n>>8), byte(n), typ, flags)
		dst = binary.BigEndian.AppendUint32(dst, id)
		return append(dst, payload...)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	out := []byte(http2.ClientPreface)
	out = frame(out, 0x4, 0, 0, nil)                                               // SETTINGS
	out = frame(out, 0x8, 0, 0, binary.BigEndian.AppendUint32(nil, 1<<31-1-65535)) // WINDOW_UPDATE
	if _, err := nc.Write(out); err != nil {
		b.Fatal(err)
	}
	const batch = 50
	ended := make(chan error, 1)
	var received atomic.Int64
	go func() {
		br := bufio.NewReaderSize(nc, 64<<10)
		var h [9]byte
		buf := make([]byte, 1<<16)
		n := 0
		for {
			if _, err := io.ReadFull(br, h[:]); err != nil {
				ended <- err
				return
			}
			l := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			if l > len(buf) {
				buf = make([]byte, l)
			}
			if _, err := io.ReadFull(br, buf[:l]); err != nil {
				ended <- err
				return
			}
			if h[3] == 0x0 {
				received.Add(int64(l))
			}
			if h[3] == 0x1 && h[4]&0x1 != 0 { // HEADERS with END_STREAM: a call's trailers
				if n++; n == batch {
					n = 0
					ended <- nil
				}
			}
		}
	}()
	id := uint32(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i += batch {
		out = out[:0]
		if r := received.Swap(0); r > 0 {
			out = frame(out, 0x8, 0, 0, binary.BigEndian.AppendUint32(nil, uint32(r)))
		}
		for range batch {
			hb := warm
			if id == 1 {
				hb = first
			}
			out = frame(out, 0x1, 0x4, id, hb)   // HEADERS, END_HEADERS
			out = frame(out, 0x0, 0x1, id, body) // DATA, END_STREAM
			id += 2
		}
		if _, err := nc.Write(out); err != nil {
			b.Fatal(err)
		}
		if err := <-ended; err != nil {
			b.Fatal(err)
		}
	}
}
