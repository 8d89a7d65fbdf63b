package rls

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec this one falls back to
	"google.golang.org/grpc/mem"
)

// codec reads RateLimitRequest and writes RateLimitResponse with wire.go's
// functions, and everything else (health, reflection, and any message
// those functions leave to protobuf) with grpc's own proto codec. It is
// this server's codec only (grpc.ForceServerCodecV2), not the process's.
type codec struct {
	proto encoding.CodecV2
	caps  func([]byte) error // Server.overCaps
}

func newCodec(caps func([]byte) error) *codec {
	return &codec{proto: encoding.GetCodecV2("proto"), caps: caps}
}

func (c *codec) Name() string { return "proto" }

// Marshal writes a response; a pooled reply goes back to its pool once
// written, since grpc keeps only the bytes (this server has no stats
// handler or binary log that would look at the message afterwards).
func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	var m *pb.RateLimitResponse
	rep, _ := v.(*reply)
	switch t := v.(type) {
	case *reply:
		m = &t.resp
	case *pb.RateLimitResponse:
		m = t
	default:
		return c.proto.Marshal(v)
	}
	defer rep.release()
	// Into one of grpc's pooled buffers, at least as large as grpc pools
	// (poolingMin): a response is a few dozen bytes, below that size, and
	// grpc's own codec makes a slice for each, with the interface that
	// holds it; here only the one-element BufferSlice is made.
	size := responseSize(m)
	pool := mem.DefaultBufferPool()
	buf := pool.Get(max(size, poolingMin))
	if b, ok := appendResponse((*buf)[:0], m); ok && len(b) == size {
		*buf = b
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
	}
	pool.Put(buf)
	return c.proto.Marshal(m)
}

// poolingMin is the least capacity mem.NewBuffer gives back to its pool
// when freed (one past grpc's buffer pooling threshold): a smaller one would be
// taken from the pool and never returned.
const poolingMin = 1<<10 + 1

// Unmarshal reads a request into a pooled request (the handler's) or a
// RateLimitRequest, and anything else, or a request wire.go leaves to
// protobuf, with protobuf. A request over the caps is not read: the
// pooled one says why in refused, for the handler to answer with (an
// error from here would reach the client as INTERNAL).
func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch t := v.(type) {
	case *request:
		b := bytesOf(data)
		if t.refused = c.caps(b); t.refused != nil {
			return nil
		}
		return t.read(b)
	case *pb.RateLimitRequest:
		b := bytesOf(data)
		if err := c.caps(b); err != nil {
			return err
		}
		var r request
		if !r.decode(b) {
			return c.proto.Unmarshal(data, t)
		}
		t.Reset()
		t.Domain, t.Descriptors, t.HitsAddend = r.msg.Domain, r.msg.Descriptors, r.msg.HitsAddend
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// bytesOf is data in one slice: its one buffer's, or else a copy.
func bytesOf(data mem.BufferSlice) []byte {
	if len(data) == 1 {
		return data[0].ReadOnlyData()
	}
	return data.Materialize()
}
