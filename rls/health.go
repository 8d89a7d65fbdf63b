package rls

import (
	"context"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthNames are the services the health service knows: the server as a
// whole (""), the rate limit service by its full name, and "ratelimit",
// the name the peer's health checks ask for.
var healthNames = []string{"", pb.RateLimitService_ServiceDesc.ServiceName, "ratelimit"}

// health is grpc.health.v1 answering from the sidecar's readiness at the
// moment it is asked, as /readyz does, rather than from a status set
// earlier: readiness asks Redis while it is failing.
type health struct {
	healthpb.UnimplementedHealthServer
	s *Server
}

// watchEvery is how often Watch looks at readiness again.
const watchEvery = time.Second

func (h *health) status() healthpb.HealthCheckResponse_ServingStatus {
	if h.s.draining.Load() || h.s.ready() != nil {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

func known(name string) bool {
	for _, n := range healthNames {
		if n == name {
			return true
		}
	}
	return false
}

func (h *health) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !known(req.GetService()) {
		return nil, status.Error(codes.NotFound, "unknown service")
	}
	return &healthpb.HealthCheckResponse{Status: h.status()}, nil
}

func (h *health) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	st := h.status()
	out := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, n := range healthNames {
		out.Statuses[n] = &healthpb.HealthCheckResponse{Status: st}
	}
	return out, nil
}

// Watch sends the status, then each change, looking every watchEvery,
// until the caller goes or the server drains.
func (h *health) Watch(req *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	if !known(req.GetService()) {
		// As grpc-go's own server: an unknown service is watched as
		// SERVICE_UNKNOWN rather than refused.
		return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN})
	}
	last := healthpb.HealthCheckResponse_UNKNOWN
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		if st := h.status(); st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		if h.s.draining.Load() {
			return nil
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-t.C:
		}
	}
}
