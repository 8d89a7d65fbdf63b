package rls

import (
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/rlsopts"
)

// This file reads RateLimitRequest and writes RateLimitResponse without
// protobuf's reflection, for the fields Envoy sends and this door answers
// with. go-control-plane's generated marshallers (vtprotobuf) are built
// only under its vtprotobuf build tag, and it has no generated
// unmarshaller: protobuf's table-driven reflection was a tenth of the
// door's CPU and most of its allocations after grpc-go's own.
//
// Whatever these functions do not know (another field, a wrong wire type,
// a malformed message, a string that is not UTF-8) they leave to protobuf
// itself, which then reads, writes or rejects it as it always has: the
// fast path never answers differently, and the tests hold it to that
// (proto.Equal after decoding, byte equality after encoding, and a fuzz
// target between the two).

// request is a RateLimitRequest read by decode, with the arrays its
// descriptors and entries are carved from, kept between calls.
type request struct {
	msg  pb.RateLimitRequest
	ds   []rlv3.RateLimitDescriptor
	dp   []*rlv3.RateLimitDescriptor
	es   []rlv3.RateLimitDescriptor_Entry
	ep   []*rlv3.RateLimitDescriptor_Entry
	over []rlv3.RateLimitDescriptor_RateLimitOverride
	hits []wrapperspb.UInt64Value
	// refused is why the call is refused before it was decoded (over the
	// caps): the codec's answer to grpc-go's handler.
	refused error
}

// The most descriptors and entries a pooled request keeps arrays for: a
// call larger (under caps raised by the flags) gets arrays of its own,
// dropped after it, so that a few large calls do not leave every pooled
// request holding their size.
const (
	keptDescriptors = rlsopts.DefaultMaxDescriptors
	keptEntries     = 4 * rlsopts.DefaultMaxDescriptors
)

// reset drops the last request's strings and pointers, keeping the arrays
// up to the kept sizes; the message is reset whole, since protobuf may
// have read the last one (and kept fields unknown to it).
func (r *request) reset() {
	r.msg.Reset()
	r.refused = nil
	clear(r.ds)
	clear(r.dp)
	clear(r.es)
	clear(r.ep)
	clear(r.over)
	clear(r.hits)
	r.ds, r.dp, r.es, r.ep, r.over, r.hits = r.ds[:0], r.dp[:0], r.es[:0], r.ep[:0], r.over[:0], r.hits[:0]
	if cap(r.ds) > keptDescriptors {
		r.ds, r.dp, r.over, r.hits = nil, nil, nil, nil
	}
	if cap(r.es) > keptEntries {
		r.es, r.ep = nil, nil
	}
}

// read reads b into r.msg, with decode or else protobuf; its caller has
// checked the caps (overCaps).
func (r *request) read(b []byte) error {
	if r.decode(b) {
		return nil
	}
	r.reset()
	return proto.Unmarshal(b, &r.msg)
}

// Field numbers, from envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto.
const (
	reqDomain, reqDescriptors, reqHitsAddend                  = 1, 2, 3
	descEntries, descLimit, descHitsAddend, descIsNegative    = 1, 2, 3, 4
	entryKey, entryValue                                      = 1, 2
	overrideRequestsPerUnit, overrideUnit                     = 1, 2
	wrapperValue                                              = 1
	respOverallCode, respStatuses, respResponseHeaders        = 1, 2, 3
	respRequestHeaders                                        = 4
	statusCode, statusCurrentLimit, statusRemaining, statusDu = 1, 2, 3, 4
	limitRequestsPerUnit, limitUnit, limitName                = 1, 2, 3
	durationSeconds, durationNanos                            = 1, 2
	headerKey, headerValue                                    = 1, 2
)

// field is one field read from b at i: its number and type, its value (a
// varint's, or the bounds of a length-delimited one), and where the next
// field starts. ok is false on anything malformed, and on the types this
// file never reads (fixed32, fixed64, groups).
func field(b []byte, i int) (num protowire.Number, typ protowire.Type, v uint64, start, end, next int, ok bool) {
	num, typ, n := protowire.ConsumeTag(b[i:])
	if n < 0 {
		return 0, 0, 0, 0, 0, 0, false
	}
	i += n
	switch typ {
	case protowire.VarintType:
		v, n = protowire.ConsumeVarint(b[i:])
		if n < 0 {
			return 0, 0, 0, 0, 0, 0, false
		}
		return num, typ, v, i, i + n, i + n, true
	case protowire.BytesType:
		l, n := protowire.ConsumeVarint(b[i:])
		if n < 0 || l > uint64(len(b)-i-n) {
			return 0, 0, 0, 0, 0, 0, false
		}
		start = i + n
		return num, typ, 0, start, start + int(l), start + int(l), true
	}
	return 0, 0, 0, 0, 0, 0, false
}

// count is how many descriptors b holds and how many entries in all; ok
// false when b is malformed where this file reads it.
func count(b []byte) (descs, entries int, ok bool) {
	for i := 0; i < len(b); {
		num, typ, _, start, end, next, ok := field(b, i)
		if !ok {
			return 0, 0, false
		}
		if num == reqDescriptors && typ == protowire.BytesType {
			descs++
			d := b[start:end]
			for j := 0; j < len(d); {
				num, typ, _, _, _, next, ok := field(d, j)
				if !ok {
					return 0, 0, false
				}
				if num == descEntries && typ == protowire.BytesType {
					entries++
				}
				j = next
			}
		}
		i = next
	}
	return descs, entries, true
}

// decode reads b into r.msg and reports whether it could; false leaves r
// to be reset and the message to protobuf. Every string is a part of one
// copy of b, made once.
func (r *request) decode(b []byte) bool {
	nd, ne, ok := count(b)
	if !ok {
		return false
	}
	if cap(r.ds) < nd {
		r.ds, r.dp = make([]rlv3.RateLimitDescriptor, 0, nd), make([]*rlv3.RateLimitDescriptor, 0, nd)
	}
	if cap(r.es) < ne {
		r.es, r.ep = make([]rlv3.RateLimitDescriptor_Entry, 0, ne), make([]*rlv3.RateLimitDescriptor_Entry, 0, ne)
	}
	text := string(b)
	str := func(start, end int) (string, bool) {
		s := text[start:end]
		return s, utf8.ValidString(s)
	}
	m := &r.msg
	for i := 0; i < len(b); {
		num, typ, v, start, end, next, ok := field(b, i)
		if !ok {
			return false
		}
		switch {
		case num == reqDomain && typ == protowire.BytesType:
			if m.Domain, ok = str(start, end); !ok {
				return false
			}
		case num == reqHitsAddend && typ == protowire.VarintType:
			m.HitsAddend = uint32(v)
		case num == reqDescriptors && typ == protowire.BytesType:
			r.ds = r.ds[:len(r.ds)+1]
			d := &r.ds[len(r.ds)-1]
			r.dp = append(r.dp, d)
			if !r.descriptor(d, b, text, start, end) {
				return false
			}
		default:
			return false
		}
		i = next
	}
	if len(r.dp) > 0 {
		m.Descriptors = r.dp
	}
	return true
}

// descriptor reads the descriptor at b[start:end] into d.
func (r *request) descriptor(d *rlv3.RateLimitDescriptor, b []byte, text string, start, end int) bool {
	first := len(r.ep)
	for i := start; i < end; {
		num, typ, v, s, e, next, ok := field(b[:end], i)
		if !ok {
			return false
		}
		switch {
		case num == descEntries && typ == protowire.BytesType:
			r.es = r.es[:len(r.es)+1]
			en := &r.es[len(r.es)-1]
			r.ep = append(r.ep, en)
			for j := s; j < e; {
				num, typ, _, s2, e2, next, ok := field(b[:e], j)
				if !ok || typ != protowire.BytesType || !utf8.ValidString(text[s2:e2]) {
					return false
				}
				switch num {
				case entryKey:
					en.Key = text[s2:e2]
				case entryValue:
					en.Value = text[s2:e2]
				default:
					return false
				}
				j = next
			}
		case num == descLimit && typ == protowire.BytesType && d.Limit == nil:
			r.over = append(r.over, rlv3.RateLimitDescriptor_RateLimitOverride{})
			o := &r.over[len(r.over)-1]
			for j := s; j < e; {
				num, typ, v, _, _, next, ok := field(b[:e], j)
				if !ok || typ != protowire.VarintType {
					return false
				}
				switch num {
				case overrideRequestsPerUnit:
					o.RequestsPerUnit = uint32(v)
				case overrideUnit:
					o.Unit = typev3.RateLimitUnit(int32(v))
				default:
					return false
				}
				j = next
			}
			d.Limit = o
		case num == descHitsAddend && typ == protowire.BytesType && d.HitsAddend == nil:
			r.hits = append(r.hits, wrapperspb.UInt64Value{})
			h := &r.hits[len(r.hits)-1]
			for j := s; j < e; {
				num, typ, v, _, _, next, ok := field(b[:e], j)
				if !ok || num != wrapperValue || typ != protowire.VarintType {
					return false
				}
				h.Value = v
				j = next
			}
			d.HitsAddend = h
		case num == descIsNegative && typ == protowire.VarintType:
			d.IsNegativeHits = v != 0
		default:
			// A repeated message field (limit, hits_addend) is merged by
			// protobuf; so is everything this file does not read.
			return false
		}
		i = next
	}
	if len(r.ep) > first {
		d.Entries = r.ep[first:len(r.ep):len(r.ep)]
	}
	return true
}

// appendResponse appends m's encoding, as protobuf's deterministic
// marshalling writes it, and reports whether it could: false when m has a
// field this door never sets (the caller then marshals with protobuf).
func appendResponse(dst []byte, m *pb.RateLimitResponse) ([]byte, bool) {
	if len(m.RawBody) > 0 || m.DynamicMetadata != nil || m.Quota != nil {
		return dst, false
	}
	if m.OverallCode != 0 {
		dst = protowire.AppendTag(dst, respOverallCode, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(int64(m.OverallCode)))
	}
	for _, st := range m.Statuses {
		if st == nil || st.Quota != nil || st.CurrentLimit != nil && st.CurrentLimit.UnitMultiplier != nil {
			return dst, false
		}
		dst = protowire.AppendTag(dst, respStatuses, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(statusSize(st)))
		if st.Code != 0 {
			dst = protowire.AppendTag(dst, statusCode, protowire.VarintType)
			dst = protowire.AppendVarint(dst, uint64(int64(st.Code)))
		}
		if l := st.CurrentLimit; l != nil {
			dst = protowire.AppendTag(dst, statusCurrentLimit, protowire.BytesType)
			dst = protowire.AppendVarint(dst, uint64(limitSize(l)))
			dst = appendVarintField(dst, limitRequestsPerUnit, uint64(l.RequestsPerUnit))
			dst = appendVarintField(dst, limitUnit, uint64(int64(l.Unit)))
			dst = appendStringField(dst, limitName, l.Name)
		}
		dst = appendVarintField(dst, statusRemaining, uint64(st.LimitRemaining))
		if d := st.DurationUntilReset; d != nil {
			dst = protowire.AppendTag(dst, statusDu, protowire.BytesType)
			dst = protowire.AppendVarint(dst, uint64(durationSize(d.Seconds, d.Nanos)))
			dst = appendVarintField(dst, durationSeconds, uint64(d.Seconds))
			dst = appendVarintField(dst, durationNanos, uint64(int64(d.Nanos)))
		}
	}
	for _, hs := range [...]struct {
		num protowire.Number
		hs  []*core.HeaderValue
	}{{respResponseHeaders, m.ResponseHeadersToAdd}, {respRequestHeaders, m.RequestHeadersToAdd}} {
		for _, h := range hs.hs {
			if h == nil || len(h.RawValue) > 0 {
				return dst, false
			}
			dst = protowire.AppendTag(dst, hs.num, protowire.BytesType)
			dst = protowire.AppendVarint(dst, uint64(stringFieldSize(headerKey, h.Key)+stringFieldSize(headerValue, h.Value)))
			dst = appendStringField(dst, headerKey, h.Key)
			dst = appendStringField(dst, headerValue, h.Value)
		}
	}
	return dst, true
}

// responseSize is appendResponse's length, for a buffer of the right size.
func responseSize(m *pb.RateLimitResponse) int {
	n := varintFieldSize(respOverallCode, uint64(int64(m.OverallCode)))
	for _, st := range m.Statuses {
		if st != nil {
			n += bytesFieldSize(respStatuses, statusSize(st))
		}
	}
	for _, h := range m.ResponseHeadersToAdd {
		if h != nil {
			n += bytesFieldSize(respResponseHeaders, stringFieldSize(headerKey, h.Key)+stringFieldSize(headerValue, h.Value))
		}
	}
	for _, h := range m.RequestHeadersToAdd {
		if h != nil {
			n += bytesFieldSize(respRequestHeaders, stringFieldSize(headerKey, h.Key)+stringFieldSize(headerValue, h.Value))
		}
	}
	return n
}

func statusSize(st *pb.RateLimitResponse_DescriptorStatus) int {
	n := varintFieldSize(statusCode, uint64(int64(st.Code))) + varintFieldSize(statusRemaining, uint64(st.LimitRemaining))
	if st.CurrentLimit != nil {
		n += bytesFieldSize(statusCurrentLimit, limitSize(st.CurrentLimit))
	}
	if d := st.DurationUntilReset; d != nil {
		n += bytesFieldSize(statusDu, durationSize(d.Seconds, d.Nanos))
	}
	return n
}

func limitSize(l *pb.RateLimitResponse_RateLimit) int {
	return varintFieldSize(limitRequestsPerUnit, uint64(l.RequestsPerUnit)) +
		varintFieldSize(limitUnit, uint64(int64(l.Unit))) + stringFieldSize(limitName, l.Name)
}

func durationSize(seconds int64, nanos int32) int {
	return varintFieldSize(durationSeconds, uint64(seconds)) + varintFieldSize(durationNanos, uint64(int64(nanos)))
}

// The size and the encoding of a proto3 scalar field, which is not
// written when it holds its zero value.

func varintFieldSize(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func bytesFieldSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func stringFieldSize(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return bytesFieldSize(num, len(s))
}

func appendVarintField(dst []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return dst
	}
	return protowire.AppendVarint(protowire.AppendTag(dst, num, protowire.VarintType), v)
}

func appendStringField(dst []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return dst
	}
	return protowire.AppendString(protowire.AppendTag(dst, num, protowire.BytesType), s)
}
