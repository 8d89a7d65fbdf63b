package rls

import (
	"bytes"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The generated marshaller writes what protobuf's own does, and the codec
// reads it back.
func TestVTCodec(t *testing.T) {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{
			{Code: pb.RateLimitResponse_OVER_LIMIT, CurrentLimit: &pb.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: 5,
				Unit: pb.RateLimitResponse_RateLimit_HOUR}, DurationUntilReset: &durationpb.Duration{Seconds: 42}},
			{Code: pb.RateLimitResponse_OK, LimitRemaining: 4294967295},
		},
		ResponseHeadersToAdd: []*core.HeaderValue{{Key: "RateLimit-Limit", Value: "5"}}}
	c := newVTCodec()
	got, err := c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Materialize(), want) {
		t.Fatalf("vt marshal differs:\n%x\n%x", got.Materialize(), want)
	}
	back := &pb.RateLimitResponse{}
	if err := c.Unmarshal(got, back); err != nil || !proto.Equal(back, resp) {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	got.Free()
}
