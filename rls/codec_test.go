package rls

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/rlsopts"
)

// The codec writes every response byte for byte as protobuf's
// deterministic marshalling does, by itself or, for the fields it leaves
// to protobuf, through it.
func TestCodecResponse(t *testing.T) {
	big := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	for range 100 {
		big.Statuses = append(big.Statuses, &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK,
			CurrentLimit:   &pb.RateLimitResponse_RateLimit{Name: "a long enough name to pass a kilobyte", RequestsPerUnit: 1 << 31},
			LimitRemaining: 1<<32 - 1, DurationUntilReset: &durationpb.Duration{Seconds: 1 << 40}})
	}
	for _, tc := range []struct {
		name string
		m    *pb.RateLimitResponse
	}{
		{"empty", &pb.RateLimitResponse{}},
		{"statuses and headers", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{
				{Code: pb.RateLimitResponse_OVER_LIMIT, CurrentLimit: &pb.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: 5,
					Unit: pb.RateLimitResponse_RateLimit_HOUR}, DurationUntilReset: &durationpb.Duration{Seconds: 42}},
				{Code: pb.RateLimitResponse_OK, LimitRemaining: 4294967295},
				{},
				{DurationUntilReset: &durationpb.Duration{}, CurrentLimit: &pb.RateLimitResponse_RateLimit{}},
				{DurationUntilReset: &durationpb.Duration{Seconds: -3, Nanos: -5}, CurrentLimit: &pb.RateLimitResponse_RateLimit{Unit: -1}},
			},
			ResponseHeadersToAdd: []*core.HeaderValue{{Key: "RateLimit-Limit", Value: "5"}, {Key: "X"}, {Value: "v"}},
			RequestHeadersToAdd:  []*core.HeaderValue{{Key: "k", Value: "é"}}}},
		{"beyond the pooling threshold", big},
		{"left to protobuf: raw body", &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, RawBody: []byte("b")}},
		{"left to protobuf: metadata", &pb.RateLimitResponse{DynamicMetadata: &structpb.Struct{}}},
		{"left to protobuf: a status's quota", &pb.RateLimitResponse{Statuses: []*pb.RateLimitResponse_DescriptorStatus{
			{Quota: &pb.RateLimitResponse_Quota{Requests: 3}}}}},
		{"left to protobuf: a raw header", &pb.RateLimitResponse{ResponseHeadersToAdd: []*core.HeaderValue{{Key: "k", RawValue: []byte{0xff}}}}},
		{"left to protobuf: a unit multiplier", &pb.RateLimitResponse{Statuses: []*pb.RateLimitResponse_DescriptorStatus{
			{CurrentLimit: &pb.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(2)}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := newCodec(noCaps).Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Free()
			if b := got.Materialize(); !bytes.Equal(b, want) {
				t.Fatalf("codec wrote\n%x\nprotobuf writes\n%x", b, want)
			}
		})
	}
}

// requestCases are requests as Envoy sends them, and as it never does.
func requestCases(t testing.TB) map[string][]byte {
	marshal := func(m *pb.RateLimitRequest) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	one := &pb.RateLimitRequest{Domain: "shop", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client_ip", Value: "192.0.2.1"}, {Key: "path", Value: "/é"}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user"}}, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{
			RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE}, HitsAddend: wrapperspb.UInt64(0), IsNegativeHits: true},
		{},
		{HitsAddend: wrapperspb.UInt64(1 << 40), Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{}},
	}}
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	cases := map[string][]byte{
		"empty":               {},
		"envoy's":             marshal(one),
		"domain only":         marshal(&pb.RateLimitRequest{Domain: "d"}),
		"unit multiplier":     marshal(&pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{{Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{UnitMultiplier: wrapperspb.UInt32(3)}}}}),
		"unknown field":       protowire.AppendVarint(tag(marshal(one), 9, protowire.VarintType), 1),
		"invalid utf-8":       protowire.AppendBytes(tag(nil, reqDomain, protowire.BytesType), []byte{0xff}),
		"invalid utf-8 entry": protowire.AppendBytes(tag(nil, reqDescriptors, protowire.BytesType), protowire.AppendBytes(tag(nil, descEntries, protowire.BytesType), protowire.AppendBytes(tag(nil, entryKey, protowire.BytesType), []byte{0xc3}))),
		"domain as varint":    protowire.AppendVarint(tag(nil, reqDomain, protowire.VarintType), 5),
		"truncated":           marshal(one)[:20],
		"length past the end": append(tag(nil, reqDomain, protowire.BytesType), 9, 'a'),
		"fixed32":             protowire.AppendFixed32(tag(nil, 7, protowire.Fixed32Type), 1),
		"two limits, merged":  append(marshal(one), marshal(&pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{{}}})...),
	}
	dup := protowire.AppendBytes(tag(nil, descLimit, protowire.BytesType), protowire.AppendVarint(tag(nil, overrideRequestsPerUnit, protowire.VarintType), 1))
	dup = append(dup, protowire.AppendBytes(tag(nil, descLimit, protowire.BytesType), protowire.AppendVarint(tag(nil, overrideUnit, protowire.VarintType), 2))...)
	cases["one descriptor, two limits"] = protowire.AppendBytes(tag(nil, reqDescriptors, protowire.BytesType), dup)
	return cases
}

// decodeBoth reads b with protobuf and with the codec (into a pooled
// request and into a message) and fails unless all agree.
func decodeBoth(t *testing.T, b []byte, r *request) {
	want := &pb.RateLimitRequest{}
	wantErr := proto.Unmarshal(b, want)
	c := newCodec(noCaps)
	r.reset()
	errPooled := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r)
	got := &pb.RateLimitRequest{Domain: "stale", HitsAddend: 9}
	errMsg := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got)
	if (wantErr == nil) != (errPooled == nil) || (wantErr == nil) != (errMsg == nil) {
		t.Fatalf("%x: protobuf says %v; the codec %v and %v", b, wantErr, errPooled, errMsg)
	}
	if wantErr != nil {
		return
	}
	if !proto.Equal(&r.msg, want) || !proto.Equal(got, want) {
		t.Fatalf("%x: protobuf reads\n%v\nthe codec\n%v\nand\n%v", b, want, &r.msg, got)
	}
}

func TestCodecRequest(t *testing.T) {
	var r request // one, reused as the handler's pool reuses it
	for name, b := range requestCases(t) {
		t.Run(name, func(t *testing.T) { decodeBoth(t, b, &r) })
	}
}

func FuzzCodecRequest(f *testing.F) {
	for _, b := range requestCases(f) {
		f.Add(b)
	}
	var r request
	f.Fuzz(func(t *testing.T, b []byte) { decodeBoth(t, b, &r) })
}

// Over gRPC, on either transport, with the pooled requests and replies
// reused across calls of different sizes, the answers are those of
// ShouldRateLimit called directly on a twin server; with
// StopWhenOverLimit too, which the own transport decides on a goroutine.
func TestOverGRPC(t *testing.T) {
	for _, tr := range []rlsopts.Transport{rlsopts.TransportOwn, rlsopts.TransportGRPCGo} {
		for _, stop := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/stop=%v", tr, stop), func(t *testing.T) {
				testOverGRPC(t, Config{Headers: rlsopts.HeadersBoth, Transport: tr, StopWhenOverLimit: stop})
			})
		}
	}
}

func testOverGRPC(t *testing.T, cfg Config) {
	direct, _ := newAnswering(t, cfg)
	served, _ := newAnswering(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = served.Serve(ln) }()
	t.Cleanup(func() { _ = served.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := pb.NewRateLimitServiceClient(conn)
	calls := [][]*rlv3.RateLimitDescriptor{
		{entry("client_ip", "a"), entry("user", "u"), entry("nothing", "here")},
		{entry("tenant", "t")},
		{entry("client_ip", "a"), entry("client_ip", "a")},
		{entry("health", "h")},
		{entry("client_ip", "a"), entry("partner", "p"), entry("beta", "b"), entry("vip", "v"), entry("tenant", "t")},
		{entry("paced", "x")},
	}
	for round := range 3 {
		for i, ds := range calls {
			req := &pb.RateLimitRequest{Domain: "shop", Descriptors: ds}
			want, err := direct.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			// Reset durations come from the real clock over gRPC's server
			// too (both pin the store's, not time.Now for the window): compare
			// what does not depend on it.
			for _, m := range []*pb.RateLimitResponse{want, got} {
				for _, st := range m.Statuses {
					st.DurationUntilReset = nil
				}
				m.ResponseHeadersToAdd = nil
			}
			if !proto.Equal(got, want) {
				t.Fatalf("round %d, call %d: over gRPC\n%v\ndirectly\n%v", round, i, got, want)
			}
		}
	}
	if _, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop"}); err == nil {
		t.Fatal("a call without descriptors was answered")
	}
}

// poolingMin must stay where grpc pools: a response buffer below it would
// be taken from the pool and never given back.
func TestPoolingMin(t *testing.T) {
	if mem.IsBelowBufferPoolingThreshold(poolingMin) {
		t.Fatalf("grpc pools no buffer of %d bytes: raise poolingMin", poolingMin)
	}
}
