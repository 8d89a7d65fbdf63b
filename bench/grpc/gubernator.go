package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Gubernator is called through its own gRPC API, V1.GetRateLimits, with
// one RateLimitReq per call. Its generated Go package would bring its
// module's dependencies (Kubernetes, etcd, memberlist, ...) into Sluice's
// go.mod, so the few fields the benchmark needs are written and read here
// with protowire, by their numbers in its gubernator.proto (package
// pb.gubernator).
const guberMethod = "/pb.gubernator.V1/GetRateLimits"

// Field numbers in gubernator.proto.
const (
	guberReqRequests = 1 // GetRateLimitsReq.requests, repeated RateLimitReq

	guberName      = 1 // RateLimitReq.name, string
	guberUniqueKey = 2 // RateLimitReq.unique_key, string
	guberHits      = 3 // RateLimitReq.hits, int64
	guberLimit     = 4 // RateLimitReq.limit, int64
	guberDuration  = 5 // RateLimitReq.duration, int64 milliseconds
	guberAlgorithm = 6 // RateLimitReq.algorithm, enum Algorithm

	guberRespResponses = 1 // GetRateLimitsResp.responses, repeated RateLimitResp

	guberStatus    = 1 // RateLimitResp.status, enum Status
	guberRespLimit = 2 // RateLimitResp.limit, int64
	guberRemaining = 3 // RateLimitResp.remaining, int64
	guberError     = 5 // RateLimitResp.error, string
)

// Enum values in gubernator.proto.
const (
	guberTokenBucket = 0 // Algorithm.TOKEN_BUCKET
	guberUnderLimit  = 0 // Status.UNDER_LIMIT
)

// guberRule is the benchmark's one limit in gubernator's terms. Its
// TOKEN_BUCKET is a fixed window that starts at a key's first hit: the
// key holds limit hits, all given back at once duration after it was
// created (algorithms.go, tokenBucket), the nearest it has to the
// others' fixed window. A proto3 enum's zero is not sent by protoc's
// code; it is sent here, which decodes the same, so that the test sees
// every field the call sets.
type guberRule struct {
	name     string
	hits     int64
	limit    int64
	duration time.Duration
}

// The fixed window of benchYAML: an hour, a limit no caller reaches.
var benchGuberRule = guberRule{name: "bench_client", hits: 1, limit: 1_000_000_000, duration: time.Hour}

// appendGuberReq appends to b a GetRateLimitsReq of one RateLimitReq: r
// for key.
func appendGuberReq(b []byte, r guberRule, key string) []byte {
	ms := uint64(r.duration.Milliseconds())
	n := protowire.SizeTag(guberName) + protowire.SizeBytes(len(r.name)) +
		protowire.SizeTag(guberUniqueKey) + protowire.SizeBytes(len(key)) +
		protowire.SizeTag(guberHits) + protowire.SizeVarint(uint64(r.hits)) +
		protowire.SizeTag(guberLimit) + protowire.SizeVarint(uint64(r.limit)) +
		protowire.SizeTag(guberDuration) + protowire.SizeVarint(ms) +
		protowire.SizeTag(guberAlgorithm) + protowire.SizeVarint(guberTokenBucket)
	b = protowire.AppendTag(b, guberReqRequests, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, guberName, protowire.BytesType)
	b = protowire.AppendString(b, r.name)
	b = protowire.AppendTag(b, guberUniqueKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, guberHits, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(r.hits))
	b = protowire.AppendTag(b, guberLimit, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(r.limit))
	b = protowire.AppendTag(b, guberDuration, protowire.VarintType)
	b = protowire.AppendVarint(b, ms)
	b = protowire.AppendTag(b, guberAlgorithm, protowire.VarintType)
	return protowire.AppendVarint(b, guberTokenBucket)
}

// checkGuberResp checks a GetRateLimitsResp to one call of r: exactly one
// response, no error, UNDER_LIMIT, r's limit echoed and the hits taken
// from it. A request that gubernator read wrongly (a field under the
// wrong number, a limit of 0) comes back with another limit or over it,
// so a wrong call cannot pass for a fast one.
func checkGuberResp(b []byte, r guberRule) error {
	var n int
	err := eachField(b, "GetRateLimitsResp", func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != guberRespResponses || typ != protowire.BytesType {
			return nil
		}
		n++
		one, _ := protowire.ConsumeBytes(v)
		return checkGuberOne(one, r)
	})
	if err == nil && n != 1 {
		err = fmt.Errorf("GetRateLimitsResp: %d responses to one request", n)
	}
	return err
}

// checkGuberOne checks one RateLimitResp; absent fields are proto3's zeros.
func checkGuberOne(b []byte, r guberRule) error {
	var status, limit, remaining uint64
	var errText string
	err := eachField(b, "RateLimitResp", func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == guberStatus && typ == protowire.VarintType:
			status, _ = protowire.ConsumeVarint(v)
		case num == guberRespLimit && typ == protowire.VarintType:
			limit, _ = protowire.ConsumeVarint(v)
		case num == guberRemaining && typ == protowire.VarintType:
			remaining, _ = protowire.ConsumeVarint(v)
		case num == guberError && typ == protowire.BytesType:
			errText, _ = protowire.ConsumeString(v)
		}
		return nil
	})
	switch rem := int64(remaining); {
	case err != nil:
		return err
	case errText != "":
		return fmt.Errorf("gubernator: %s", errText)
	case status != guberUnderLimit:
		return fmt.Errorf("gubernator: status %d, not UNDER_LIMIT (limit %d, remaining %d)", status, int64(limit), rem)
	case int64(limit) != r.limit:
		return fmt.Errorf("gubernator: limit %d in the reply, %d asked", int64(limit), r.limit)
	case rem < 0 || rem > r.limit-r.hits:
		return fmt.Errorf("gubernator: %d remaining of %d after %d hits", rem, r.limit, r.hits)
	}
	return nil
}

// eachField calls f with each field of the message msg in b: its number,
// wire type and value, as ConsumeFieldValue delimits it, so that f's
// own Consume cannot fail.
func eachField(b []byte, msg string, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%s: %w", msg, protowire.ParseError(n))
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return fmt.Errorf("%s field %d: %w", msg, num, protowire.ParseError(n))
		}
		if err := f(num, typ, b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// rawCodec hands gRPC the bytes appendGuberReq wrote and checks the reply
// as it arrives, without a copy. It keeps the name "proto" since the name
// is the call's content-subtype, which the server picks its codec by.
type rawCodec struct{}

// guberCall is one call's request and, once answered, the check of its
// reply.
type guberCall struct {
	req  []byte
	rule guberRule
	err  error // checkGuberResp's
}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	c, ok := v.(*guberCall)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(c.req)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c, ok := v.(*guberCall)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	if len(data) == 1 {
		c.err = checkGuberResp(data[0].ReadOnlyData(), c.rule)
		return nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	c.err = checkGuberResp(buf.ReadOnlyData(), c.rule)
	return nil
}

func (rawCodec) Name() string { return "proto" }

var _ encoding.CodecV2 = rawCodec{}

// guberCaller calls GetRateLimits on conn, each caller with a request
// buffer of its own reused call after call.
func guberCaller(conn *grpc.ClientConn, callers int, r guberRule) func(c int, key string) error {
	calls := make([]guberCall, callers)
	for i := range calls {
		calls[i].rule = r
	}
	codec := grpc.ForceCodecV2(rawCodec{})
	return func(c int, key string) error {
		call := &calls[c]
		call.req, call.err = appendGuberReq(call.req[:0], r, key), nil
		if err := conn.Invoke(context.Background(), guberMethod, call, call, codec); err != nil {
			return err
		}
		return call.err
	}
}

// guberEnv is the environment of a gubernator alone on loopback: gRPC
// and HTTP on the addresses given, memberlist on its own address with
// itself as the only known node (without a known node it looks for
// others; with discovery "none" it owns no key until told its peers),
// room for every key as Redis keeps them for the others, and its tracing
// off (no exporter, nothing sampled), as the peer's statistics are.
func guberEnv(grpcAddr, httpAddr, memberAddr string, keys int) []string {
	return []string{
		"GUBER_GRPC_ADDRESS=" + grpcAddr, "GUBER_HTTP_ADDRESS=" + httpAddr, "GUBER_ADVERTISE_ADDRESS=" + grpcAddr,
		"GUBER_PEER_DISCOVERY_TYPE=member-list", "GUBER_MEMBERLIST_ADDRESS=" + memberAddr,
		"GUBER_MEMBERLIST_BIND_ADDRESS=" + memberAddr, "GUBER_MEMBERLIST_KNOWN_NODES=" + memberAddr,
		"GUBER_CACHE_SIZE=" + strconv.Itoa(keys), "GUBER_LOG_LEVEL=warn",
		"OTEL_TRACES_EXPORTER=none", "OTEL_TRACES_SAMPLER=always_off",
	}
}

// waitGuber calls until a call is answered as it should be: gubernator
// listens before memberlist has made it the owner of every key, and
// answers an error until then.
func waitGuber(call func(c int, key string) error, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := call(0, "ready")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("gubernator not answering within %v", within), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
