package rls

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/rlsopts"
)

// serveOn serves s on loopback and returns a client connection to it.
func serveOn(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	return serveOnAddr(t, serveAt(t, s))
}

// serveOnAddr is a client connection to addr, closed when the test ends.
func serveOnAddr(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serveAt serves s on loopback until the test ends, and returns its
// address.
func serveAt(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// TestTransportsAgree: the door's other services, its large calls and
// its refusals answer the same on the own transport as on grpc-go's.
func TestTransportsAgree(t *testing.T) {
	for _, tr := range []rlsopts.Transport{rlsopts.TransportOwn, rlsopts.TransportGRPCGo} {
		t.Run(tr.String(), func(t *testing.T) {
			s, _ := newAnswering(t, Config{Transport: tr})
			conn := serveOn(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			h := healthpb.NewHealthClient(conn)
			for _, name := range healthNames {
				r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
				if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
					t.Fatalf("health of %q: %v %v", name, r, err)
				}
			}
			w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("Watch: %v %v", r, err)
			}

			ref, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := ref.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
				t.Fatal(err)
			}
			r, err := ref.Recv()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, sv := range r.GetListServicesResponse().GetService() {
				names = append(names, sv.Name)
			}
			slices.Sort(names)
			if got, want := strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService grpc.health.v1.Health "+
				"grpc.reflection.v1.ServerReflection grpc.reflection.v1alpha.ServerReflection"; got != want {
				t.Fatalf("reflection lists %s, want %s", got, want)
			}
			if err := ref.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{
				FileContainingSymbol: "envoy.service.ratelimit.v3.RateLimitService"}}); err != nil {
				t.Fatal(err)
			}
			if r, err := ref.Recv(); err != nil || len(r.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
				t.Fatalf("reflection of the rate limit service: %v %v", r, err)
			}

			c := pb.NewRateLimitServiceClient(conn)
			// Larger than a frame, and than the own transport's stream
			// window: unknown values, answered OK.
			for _, n := range []int{20 << 10, 1<<20 + 100} {
				resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop",
					Descriptors: []*rlv3.RateLimitDescriptor{entry("nothing", strings.Repeat("v", n))}})
				if err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
					t.Fatalf("a call of %d bytes: %v %v", n, resp, err)
				}
			}
			_, err = c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop"})
			if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != errEmptyDescriptors {
				t.Fatalf("no descriptors: %v", err)
			}
			_, err = c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: descriptors(rlsopts.DefaultMaxDescriptors+1, 1)})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("over the cap: %v", err)
			}
		})
	}
}

// callRaw sends ShouldRateLimit for req on stream id over a raw HTTP/2
// connection with grpc-timeout timeout, and returns its grpc-status, or
// "RST" when the stream was reset.
func callRaw(t *testing.T, fr *http2.Framer, henc *hpack.Encoder, hbuf *bytes.Buffer, id uint32, timeout string, req *pb.RateLimitRequest) string {
	t.Helper()
	hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", shouldRateLimitPath}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"grpc-timeout", timeout}} {
		henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(id, true, append(body, msg...)); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("stream %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "RST"
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					return hf.Value
				}
			}
		}
	}
}

// A call whose deadline is over when it arrives (grpc-timeout 0) is
// answered DEADLINE_EXCEEDED and never decided: on either transport,
// nothing is charged.
func TestDeadlineOverNotCharged(t *testing.T) {
	for _, tr := range []rlsopts.Transport{rlsopts.TransportOwn, rlsopts.TransportGRPCGo} {
		t.Run(tr.String(), func(t *testing.T) {
			s, _ := newAnswering(t, Config{Transport: tr})
			nc, err := net.Dial("tcp", serveAt(t, s))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(nc, nc)
			fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
			fr.WriteSettings()
			var hbuf bytes.Buffer
			henc := hpack.NewEncoder(&hbuf)
			req := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{entry("user", "late")}}
			for i := range uint32(5) {
				got := callRaw(t, fr, henc, &hbuf, 2*i+1, "0n", req)
				if got != "4" && !(tr == rlsopts.TransportGRPCGo && got == "RST") {
					t.Fatalf("call %d with grpc-timeout 0n: grpc-status %s; want 4 (DEADLINE_EXCEEDED)", i, got)
				}
			}
			// Ten an hour: the first call that counts leaves nine.
			check(t, s, ok, []want{{rpu: 10, remaining: 9}}, entry("user", "late"))
		})
	}
}

// On either transport, a connection past MaxConns is closed; one that
// leaves makes room.
func TestMaxConns(t *testing.T) {
	for _, tr := range []rlsopts.Transport{rlsopts.TransportOwn, rlsopts.TransportGRPCGo} {
		t.Run(tr.String(), func(t *testing.T) {
			s, _ := newAnswering(t, Config{Transport: tr, MaxConns: 1})
			addr := serveAt(t, s)
			first, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			// Served: the server's SETTINGS come once the preface is sent.
			first.Write([]byte(http2.ClientPreface))
			first.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := http2.NewFramer(nil, first).ReadFrame(); err != nil {
				t.Fatalf("the first connection: %v", err)
			}
			second, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer second.Close()
			second.Write([]byte(http2.ClientPreface))
			second.SetReadDeadline(time.Now().Add(5 * time.Second))
			fr := http2.NewFramer(nil, second)
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						t.Fatal("the connection past the cap was served")
					}
					break // closed
				}
				if _, ok := f.(*http2.GoAwayFrame); ok {
					break
				}
			}
			first.Close()
			// Once the first is counted out, a client is served.
			conn := serveOnAddr(t, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
				t.Fatalf("after the first left: %v", err)
			}
		})
	}
}
