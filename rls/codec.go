package rls

import (
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec vtCodec falls back to
	"google.golang.org/grpc/mem"
)

// vtMessage is a message with go-control-plane's generated (vtprotobuf)
// marshaller, which writes without protobuf's reflection.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict([]byte) (int, error)
}

// vtCodec marshals RateLimitResponse with its generated marshaller into a
// pooled buffer, and everything else (requests, which have no generated
// unmarshaller; health; reflection) with grpc's own proto codec. It is
// this server's codec only (grpc.ForceServerCodecV2), not the process's.
type vtCodec struct{ proto encoding.CodecV2 }

func newVTCodec() *vtCodec { return &vtCodec{proto: encoding.GetCodecV2("proto")} }

func (c *vtCodec) Name() string { return "proto" }

func (c *vtCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.proto.Marshal(v)
	}
	size := m.SizeVT()
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c *vtCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }
