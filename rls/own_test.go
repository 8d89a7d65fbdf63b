package rls

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/rlsopts"
)

// serveOn serves s on loopback and returns a client connection to it.
func serveOn(t *testing.T, s *Server) *grpc.ClientConn {
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
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
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
