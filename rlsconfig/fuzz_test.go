package rlsconfig

import (
	"os"
	"path/filepath"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzLoad feeds the loader arbitrary bytes: it must return a Config or an
// *Error, never panic or run away, and a loaded Config must answer lookups.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/examples/*.yaml")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "~", "- a", "domain: d", "domain: [a]", "domain: {a: b}",
		"domain: d\ndescriptors:\n  - key: k\n    value: '*'\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - &a {key: k, <<: *a}\n",
		"domain: d\ndescriptors:\n  - key: k\n    <<: [{value: v}, {value: w}]\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: gcra, period: 1ms, requests_per_unit: 4294967295}\n",
		"domain: d\ndescriptors:\n  - key: k\n    metadata: {? [a]: b}\n",
		"!!int domain: d",
		"domain: !!float 1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(File{Name: "f.yaml", Data: data})
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, d := range c.Domains() {
			for _, entries := range [][]Entry{
				{{"k", "v"}}, {{"k", ""}}, {{"k", "v"}, {"k", "v"}}, {{"*", "*"}}, {{"", ""}},
			} {
				ms, err := c.Resolve(d, []Descriptor{{Entries: entries}, {Entries: entries, Override: &Override{RequestsPerUnit: 1, Unit: UnitMinute}}})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range ms {
					r := m.Rule
					if m.Found && !r.Unlimited && (r.Key == "" || len(r.Key) > MaxKeyLen) {
						t.Fatalf("rule without a proper key: %+v", r)
					}
					if m.Found && !r.Unlimited && !r.RefusesAll() {
						if err := r.Limit.Validate(); err != nil {
							t.Fatalf("loaded an invalid limit: %v", err)
						}
					}
				}
			}
		}
	})
}

// FuzzParseOverlay feeds the overlay's parser arbitrary bytes: it must
// return an Overlay or an *Error, never panic; a parsed overlay laid on a
// configuration must change it only into rules whose limits are valid,
// and refuse or leave unmatched the rest, each with an *Error or a line.
func FuzzParseOverlay(f *testing.F) {
	for _, s := range []string{
		"", "~", "rules:", "rules: []", "rules: [{domain: shop, algorithm: gcra}]",
		"rules:\n  - domain: shop\n    algorithm: sliding_window\n    precision: 7\n",
		"rules:\n  - domain: shop\n    descriptors: [{key: path, value: /checkout}]\n    algorithm: token_bucket\n    capacity: 1_000\n",
		"rules:\n  - domain: shop\n    name: checkout\n    period: 1ms\n    on_failure: deny\n    refusal_takes_nothing: true\n",
		"rules:\n  - domain: shop\n    descriptors: [{key: log}]\n    algorithm: sliding_log\n",
		"rules:\n  - domain: shop\n    descriptors: [{key: tenant}, {key: plan, value: gold}]\n    algorithm: gcra\n    burst: 999999999999\n    period: 3650d\n",
		"rules: [{domain: shop, algorithm: gcra}, {domain: shop, name: checkout, algorithm: leaky}]",
		"rules: &a [*a]", "rules: [{<<: {domain: shop}, algorithm: gcra}]", "rules: [{domain: !!binary aGk=, period: 1s}]",
	} {
		f.Add([]byte(s))
	}
	base, err := Parse(File{Name: "shop.yaml", Data: []byte(shopYAML)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := ParseOverlay("o.yaml", data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		c, res := base.WithOverlay(o)
		for _, err := range res.Refused {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("refusal of type %T: %v", err, err)
			}
		}
		for _, entries := range [][]Entry{{{"client_ip", "x"}}, {{"path", "/checkout"}}, {{"path", "/free"}},
			{{"tenant", "t"}, {"plan", "gold"}}, {{"log", "x"}}} {
			r, ok := c.Lookup("shop", entries)
			if !ok {
				t.Fatalf("%v lost its rule", entries)
			}
			if !r.Unlimited && !r.RefusesAll() {
				if err := r.Limit.Validate(); err != nil {
					t.Fatalf("%v: laid an invalid limit: %v", entries, err)
				}
			}
		}
	})
}

// FuzzFromXDS feeds FromXDS whatever a management server could send as a
// RateLimitConfig (any bytes that unmarshal as one), beside a valid
// resource: it must load or refuse, never panic; what it loads must have
// valid limits and one digest in either order of the two.
func FuzzFromXDS(f *testing.F) {
	valid := &rlspb.RateLimitConfig{Name: "media", Domain: "media", Descriptors: []*rlspb.RateLimitDescriptor{
		{Key: "bucket", RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_MINUTE, RequestsPerUnit: 7}}}}
	for _, rc := range []*rlspb.RateLimitConfig{
		{},
		{Name: "shop", Domain: "shop", Descriptors: []*rlspb.RateLimitDescriptor{
			{Key: "client_ip", RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_SECOND, RequestsPerUnit: 2}},
			{Key: "path", Value: "/checkout", ShadowMode: true, Descriptors: []*rlspb.RateLimitDescriptor{
				{Key: "user", RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_HOUR, RequestsPerUnit: 4294967295, Name: "n", Replaces: []*rlspb.RateLimitReplace{{Name: "n"}}}}}},
			{Key: "free", RateLimit: &rlspb.RateLimitPolicy{Unlimited: true}}}},
		{Domain: "media", Descriptors: []*rlspb.RateLimitDescriptor{{Key: "bucket"}}},
		{Domain: "d", Descriptors: []*rlspb.RateLimitDescriptor{{Key: "k", RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_UNKNOWN}}}},
	} {
		b, err := proto.Marshal(rc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rc := &rlspb.RateLimitConfig{}
		if proto.Unmarshal(data, rc) != nil {
			return
		}
		c, err := FromXDS(rc, valid)
		if err != nil {
			return
		}
		again, err := FromXDS(valid, rc)
		if err != nil || again.Digest() != c.Digest() {
			t.Fatalf("in the other order: %v, digest %s against %s", err, again.Digest(), c.Digest())
		}
		for _, d := range c.Domains() {
			for _, entries := range [][]Entry{{{"k", "v"}}, {{"bucket", "b"}}, {{"client_ip", "x"}}, {{"", ""}}} {
				r, ok := c.Lookup(d, entries)
				if ok && !r.Unlimited && !r.RefusesAll() {
					if err := r.Limit.Validate(); err != nil {
						t.Fatalf("loaded an invalid limit: %v", err)
					}
				}
			}
		}
	})
}
