package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestAlsoNames: -also takes NAME=PATH, keeps the order given, and refuses a
// name already measured, since each name is a column, a key prefix in the
// one Redis, and "peer" the row the ratios divide by.
func TestAlsoNames(t *testing.T) {
	var v variants
	for _, s := range []string{"shared=/bin/a", "window=/bin/b", "grpcgo=/bin/a --grpc-transport grpc-go"} {
		if err := v.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	if got := fmt.Sprint(v); got != "[{shared /bin/a []} {window /bin/b []} {grpcgo /bin/a [--grpc-transport grpc-go]}]" {
		t.Fatalf("variants = %s", got)
	}
	for _, s := range []string{"shared=/bin/c", "peer=/bin/c", "sluice=/bin/c", "before=/bin/c", "gubernator=/bin/c", "=/bin/c", "name=", "/bin/c", "blank= "} {
		if err := v.Set(s); err == nil {
			t.Errorf("Set(%q) accepted", s)
		}
	}
}

// TestGuberReq decodes with protowire what appendGuberReq writes, by the
// field numbers and wire types of gubernator.proto, written out here
// again: a field under the wrong number or type, or a value the server
// would read otherwise, fails it.
func TestGuberReq(t *testing.T) {
	r := guberRule{name: "bench_client", hits: 1, limit: 1_000_000_000, duration: time.Hour}
	b := appendGuberReq([]byte("kept"), r, "k123456")
	if string(b[:4]) != "kept" {
		t.Fatalf("appendGuberReq changed what was before it: %q", b[:4])
	}
	// The second call into the same buffer writes the same request: each
	// caller reuses its buffer.
	if b2 := appendGuberReq(nil, r, "k123456"); !bytes.Equal(b2, b[4:]) {
		t.Fatalf("appendGuberReq appends %x, alone writes %x", b[4:], b2)
	}
	b = b[4:]

	// GetRateLimitsReq: requests = 1, one RateLimitReq and nothing else.
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		t.Fatalf("GetRateLimitsReq starts with field %d type %d (%d), want requests = 1, bytes", num, typ, n)
	}
	inner, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		t.Fatalf("GetRateLimitsReq: one request of %d bytes (%d), in %d bytes", len(inner), m, len(b))
	}

	type field struct {
		typ protowire.Type
		v   any
	}
	got := map[protowire.Number]field{}
	for len(inner) > 0 {
		num, typ, n := protowire.ConsumeTag(inner)
		if n < 0 {
			t.Fatalf("RateLimitReq: %v", protowire.ParseError(n))
		}
		inner = inner[n:]
		if _, ok := got[num]; ok {
			t.Fatalf("RateLimitReq: field %d twice", num)
		}
		switch typ {
		case protowire.BytesType:
			s, n := protowire.ConsumeString(inner)
			if n < 0 {
				t.Fatalf("RateLimitReq field %d: %v", num, protowire.ParseError(n))
			}
			got[num], inner = field{typ, s}, inner[n:]
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(inner)
			if n < 0 {
				t.Fatalf("RateLimitReq field %d: %v", num, protowire.ParseError(n))
			}
			got[num], inner = field{typ, int64(v)}, inner[n:]
		default:
			t.Fatalf("RateLimitReq field %d: wire type %d", num, typ)
		}
	}
	want := map[protowire.Number]field{
		1: {protowire.BytesType, "bench_client"},    // name
		2: {protowire.BytesType, "k123456"},         // unique_key
		3: {protowire.VarintType, int64(1)},         // hits
		4: {protowire.VarintType, int64(1e9)},       // limit
		5: {protowire.VarintType, int64(3_600_000)}, // duration, milliseconds
		6: {protowire.VarintType, int64(0)},         // algorithm: TOKEN_BUCKET
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("RateLimitReq = %v\nwant           %v", got, want)
	}
}

// TestGuberResp: a reply passes only with one response, no error,
// UNDER_LIMIT, the limit asked for and the hits taken; a reply to a call
// gubernator read wrongly fails.
func TestGuberResp(t *testing.T) {
	r := guberRule{name: "bench_client", hits: 1, limit: 1000, duration: time.Hour}
	type f struct {
		num protowire.Number
		v   any // uint64 as a varint, string as bytes
	}
	one := func(fs ...f) []byte {
		var b []byte
		for _, x := range fs {
			switch v := x.v.(type) {
			case uint64:
				b = protowire.AppendVarint(protowire.AppendTag(b, x.num, protowire.VarintType), v)
			case string:
				b = protowire.AppendString(protowire.AppendTag(b, x.num, protowire.BytesType), v)
			}
		}
		return b
	}
	resp := func(rs ...[]byte) []byte {
		var b []byte
		for _, x := range rs {
			b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), x)
		}
		return b
	}
	ok := one(f{2, uint64(1000)}, f{3, uint64(999)}, f{4, uint64(1764633600000)})
	for _, tc := range []struct {
		name string
		b    []byte
		want string // in the error; empty: passes
	}{
		{"under", resp(ok), ""},
		{"metadata skipped", resp(one(f{2, uint64(1000)}, f{3, uint64(999)}, f{6, "k=v"})), ""},
		{"no response", resp(), "0 responses"},
		{"two", resp(ok, ok), "2 responses"},
		{"error", resp(one(f{5, "unable to pick a peer"})), "unable to pick a peer"},
		{"over", resp(one(f{1, uint64(1)}, f{2, uint64(1000)})), "not UNDER_LIMIT"},
		{"limit not read", resp(one(f{3, uint64(0)})), "limit 0 in the reply"},
		{"hit not taken", resp(one(f{2, uint64(1000)}, f{3, uint64(1000)})), "1000 remaining"},
		{"truncated", resp(ok)[:5], "GetRateLimitsResp"},
	} {
		err := checkGuberResp(tc.b, r)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: checkGuberResp = %v, want %q", tc.name, err, tc.want)
		}
	}
}
