package rlsconfig

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// per is a rate_limit of n per unit u.
func per(n uint32, u rlspb.RateLimitUnit) *rlspb.RateLimitPolicy {
	return &rlspb.RateLimitPolicy{RequestsPerUnit: n, Unit: u}
}

// A resource and the YAML file that says the same thing resolve every
// request alike: the same rules, names, modes, metadata and keys.
func TestFromXDSMatchesYAML(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"team": "shop"})
	if err != nil {
		t.Fatal(err)
	}
	rc := &rlspb.RateLimitConfig{Name: "shop-limits", Domain: "shop", Descriptors: []*rlspb.RateLimitDescriptor{
		{Key: "client_ip", RateLimit: per(10, rlspb.RateLimitUnit_MINUTE), DetailedMetric: true},
		{Key: "client_ip", Value: "203.0.113.9", RateLimit: per(0, rlspb.RateLimitUnit_SECOND)},
		{Key: "route", Value: "/a", Descriptors: []*rlspb.RateLimitDescriptor{
			{Key: "user", RateLimit: &rlspb.RateLimitPolicy{RequestsPerUnit: 5, Unit: rlspb.RateLimitUnit_WEEK, Name: "wk"},
				ShadowMode: true, QuotaMode: true, Metadata: md},
			{Key: "vip", RateLimit: &rlspb.RateLimitPolicy{Unlimited: true, Replaces: []*rlspb.RateLimitReplace{{Name: "wk"}}}},
		}},
		{Key: "open"},
	}}
	fromYAML, err := parse(t, `
domain: shop
descriptors:
  - key: client_ip
    rate_limit: {unit: minute, requests_per_unit: 10}
    detailed_metric: true
  - key: client_ip
    value: 203.0.113.9
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: route
    value: /a
    descriptors:
      - key: user
        rate_limit: {unit: week, requests_per_unit: 5, name: wk}
        shadow_mode: true
        quota_mode: true
        metadata: {team: shop}
      - key: vip
        rate_limit: {unlimited: true, replaces: [{name: wk}]}
  - key: open
`)
	if err != nil {
		t.Fatal(err)
	}
	fromXDS, err := FromXDS(rc)
	if err != nil {
		t.Fatal(err)
	}
	if got := fromXDS.Domains(); !reflect.DeepEqual(got, []string{"shop"}) {
		t.Fatalf("domains %v", got)
	}
	if got := fromXDS.Files(); !reflect.DeepEqual(got, []string{"shop-limits"}) {
		t.Errorf("files %v, want the resource's name", got)
	}
	requests := [][]Entry{
		{{"client_ip", "192.0.2.1"}},
		{{"client_ip", "203.0.113.9"}},
		{{"route", "/a"}, {"user", "bob"}},
		{{"route", "/a"}, {"vip", "x"}},
		{{"route", "/b"}, {"user", "bob"}},
		{{"open", "x"}},
	}
	for _, es := range requests {
		want, wantOK := fromYAML.Lookup("shop", es)
		got, gotOK := fromXDS.Lookup("shop", es)
		want.Source, got.Source = "", "" // a file's line, a resource's name
		if gotOK != wantOK || !reflect.DeepEqual(got, want) {
			t.Errorf("Lookup %v:\n xds  %+v %v\n yaml %+v %v", es, got, gotOK, want, wantOK)
		}
	}
	again, err := FromXDS(proto.Clone(rc).(*rlspb.RateLimitConfig))
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest() != fromXDS.Digest() {
		t.Error("the same resource has two digests")
	}
	// Two resources have one digest in either order: the snapshot cache
	// sends them in a map's order.
	other := &rlspb.RateLimitConfig{Name: "media", Domain: "media", Descriptors: []*rlspb.RateLimitDescriptor{
		{Key: "bucket", RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_MINUTE, RequestsPerUnit: 7}}}}
	ab, errA := FromXDS(rc, other)
	ba, errB := FromXDS(other, rc)
	if errA != nil || errB != nil || ab.Digest() != ba.Digest() || !slices.Equal(ab.Files(), ba.Files()) {
		t.Errorf("the same two resources in two orders: digests %s and %s, resources %v and %v (%v, %v)",
			ab.Digest(), ba.Digest(), ab.Files(), ba.Files(), errA, errB)
	}
	rc.Descriptors[0].RateLimit.RequestsPerUnit = 11
	if changed, _ := FromXDS(rc); changed.Digest() == fromXDS.Digest() {
		t.Error("a changed resource keeps its digest")
	}
}

// Each refusal a resource can meet names the resource and the field, with
// the YAML loader's text for the same mistake.
func TestFromXDSErrors(t *testing.T) {
	d := func(ds ...*rlspb.RateLimitDescriptor) []*rlspb.RateLimitConfig {
		return []*rlspb.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: ds}}
	}
	for _, tc := range []struct {
		name      string
		resources []*rlspb.RateLimitConfig
		yaml      string // the same mistake in a file: its message must be the same
		want      string
	}{
		{"no domain", []*rlspb.RateLimitConfig{{Name: "r"}}, "descriptors: []",
			`RateLimitConfig "r": domain: config file cannot have empty domain`},
		{"no unit", d(&rlspb.RateLimitDescriptor{Key: "a", RateLimit: per(5, rlspb.RateLimitUnit_UNKNOWN)}),
			"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: UNKNOWN, requests_per_unit: 5}",
			`RateLimitConfig "r": descriptors[0].rate_limit.unit: invalid rate limit unit 'UNKNOWN'`},
		{"unit out of range", d(&rlspb.RateLimitDescriptor{Key: "a", RateLimit: per(5, rlspb.RateLimitUnit(42))}), "",
			`RateLimitConfig "r": descriptors[0].rate_limit.unit: invalid rate limit unit '42'`},
		{"unit when unlimited", d(&rlspb.RateLimitDescriptor{Key: "a", Descriptors: []*rlspb.RateLimitDescriptor{
			{Key: "b", RateLimit: &rlspb.RateLimitPolicy{Unlimited: true, Unit: rlspb.RateLimitUnit_SECOND}}}}),
			"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unlimited: true, unit: second}",
			`RateLimitConfig "r": descriptors[0].descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited`},
		{"empty key", d(&rlspb.RateLimitDescriptor{Key: "a"}, &rlspb.RateLimitDescriptor{}),
			"domain: d\ndescriptors:\n  - key: a\n  - value: v",
			`RateLimitConfig "r": descriptors[1]: descriptor has empty key`},
		{"duplicate", d(&rlspb.RateLimitDescriptor{Key: "a_b"}, &rlspb.RateLimitDescriptor{Key: "a", Value: "b"}),
			"domain: d\ndescriptors:\n  - key: a_b\n  - key: a\n    value: b",
			`RateLimitConfig "r": descriptors[1]: duplicate descriptor composite key 'd.a_b'`},
		{"replaces itself", d(&rlspb.RateLimitDescriptor{Key: "a", RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_SECOND, Name: "n",
			Replaces: []*rlspb.RateLimitReplace{{Name: "m"}, {Name: "n"}}}}),
			"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      name: n\n      replaces: [{name: m}, {name: n}]",
			`RateLimitConfig "r": descriptors[0].rate_limit.replaces[1]: replaces should not contain name of same descriptor`},
		{"empty replaces", d(&rlspb.RateLimitDescriptor{Key: "a", RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_SECOND,
			Replaces: []*rlspb.RateLimitReplace{{}}}}),
			"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces: [{name: ''}]",
			`RateLimitConfig "r": descriptors[0].rate_limit.replaces[0]: should not have an empty replaces entry`},
		{"duplicate domain", []*rlspb.RateLimitConfig{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}}, "",
			`RateLimitConfig "b": domain: duplicate domain 'd' in config file (first in a:1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromXDS(tc.resources...)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("FromXDS: %v\nwant %s", err, tc.want)
			}
			var re *ResourceError
			if !errors.As(err, &re) {
				t.Fatalf("%T is no ResourceError", err)
			}
			if tc.yaml == "" {
				return
			}
			_, yerr := Parse(File{Name: "x.yaml", Data: []byte(tc.yaml)})
			var ye *Error
			if !errors.As(yerr, &ye) || ye.Msg != re.Msg {
				t.Errorf("the file's error %v; want the same text as %q", yerr, re.Msg)
			}
		})
	}
}

// Without resources there are no domains: every request is of an unknown
// domain, answered OK, as with an empty directory.
func TestFromXDSNone(t *testing.T) {
	c, err := FromXDS()
	if err != nil || len(c.Domains()) != 0 || c.HasDomain("d") {
		t.Fatalf("FromXDS() = %v, %v", c.Domains(), err)
	}
	if !strings.HasPrefix(c.Digest(), "e3b0") { // SHA-256 of nothing
		t.Errorf("digest %s", c.Digest())
	}
}

// BenchmarkFromXDS converts and checks 20,000 descriptors of the shape of
// a platform's generated configuration (a route value, a nested user key),
// the load the issue measures for files, in one resource.
func BenchmarkFromXDS(b *testing.B) {
	rc := &rlspb.RateLimitConfig{Name: "big", Domain: "big"}
	for i := range 20_000 {
		rc.Descriptors = append(rc.Descriptors, &rlspb.RateLimitDescriptor{Key: "route", Value: "/api/v1/resource-" + itoa(int64(i)),
			Descriptors: []*rlspb.RateLimitDescriptor{{Key: "user", RateLimit: per(100, rlspb.RateLimitUnit_MINUTE)}}})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromXDS(rc); err != nil {
			b.Fatal(err)
		}
	}
}
