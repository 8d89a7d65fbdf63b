package rlsconfig

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

func loadExamples(t *testing.T) *Config {
	t.Helper()
	c, err := Load("testdata/examples")
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) > 0 {
		t.Fatalf("warnings: %v", w)
	}
	return c
}

// e builds entries from key, value pairs.
func e(kv ...string) []Entry {
	out := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

func TestLookup(t *testing.T) {
	c := loadExamples(t)
	fixed := func(rate int64, period time.Duration) engine.Limit {
		return engine.Limit{Algorithm: engine.FixedWindow, Rate: rate, Period: period}
	}
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name    string
		domain  string
		entries []Entry
		found   bool
		want    Rule // compared except Metadata, Replaces, Source, Label (TestLabel) and the shared patterns (TestPeerKeys)
	}{
		// Matching order: exact value, then wildcard, then the key alone.
		{name: "key alone: each value its own count", domain: "shop", entries: e("client_ip", "192.0.2.1"), found: true,
			want: Rule{Key: "shop|client_ip=192.0.2.1@1s", Limit: fixed(10, time.Second), RequestsPerUnit: 10, Unit: UnitSecond, StatsKey: "shop.client_ip"}},
		{name: "key alone, another value", domain: "shop", entries: e("client_ip", "192.0.2.2"), found: true,
			want: Rule{Key: "shop|client_ip=192.0.2.2@1s", Limit: fixed(10, time.Second), RequestsPerUnit: 10, Unit: UnitSecond, StatsKey: "shop.client_ip"}},
		{name: "exact value before key alone: 0 refuses all", domain: "shop", entries: e("client_ip", "203.0.113.9"), found: true,
			want: Rule{Key: "shop|client_ip=203.0.113.9@1s", Limit: fixed(0, time.Second), RequestsPerUnit: 0, Unit: UnitSecond, StatsKey: "shop.client_ip_203.0.113.9"}},
		{name: "exact value without a rate_limit is whitelisted", domain: "shop", entries: e("client_ip", "198.51.100.1")},
		{name: "nested key alone", domain: "shop", entries: e("plan", "free", "customer", "c1"), found: true,
			want: Rule{Key: "shop|plan=free|customer=c1@86400s", Limit: fixed(3, day), RequestsPerUnit: 3, Unit: UnitDay, StatsKey: "shop.plan_free.customer"}},
		{name: "descriptor ends at a placeholder", domain: "shop", entries: e("plan", "free")},
		{name: "nested key at the top level", domain: "shop", entries: e("customer", "c1")},
		{name: "other value of the placeholder", domain: "shop", entries: e("plan", "paid", "customer", "c1")},
		{name: "limit at the first level", domain: "shop", entries: e("region", "eu"), found: true,
			want: Rule{Key: "shop|region=eu@3600s", Limit: fixed(50, time.Hour), RequestsPerUnit: 50, Unit: UnitHour, StatsKey: "shop.region_eu"}},
		{name: "limit one level deeper", domain: "shop", entries: e("region", "eu", "zone", "eu-1"), found: true,
			want: Rule{Key: "shop|region=eu|zone=eu-1@3600s", Limit: fixed(5, time.Hour), RequestsPerUnit: 5, Unit: UnitHour, StatsKey: "shop.region_eu.zone_eu-1"}},
		{name: "deeper value not configured", domain: "shop", entries: e("region", "eu", "zone", "eu-2")},
		{name: "descriptor longer than the configuration", domain: "shop", entries: e("client_ip", "192.0.2.1", "extra", "x")},
		{name: "unlimited", domain: "shop", entries: e("health", "probe"), found: true,
			want: Rule{Unlimited: true, StatsKey: "shop.health"}},
		{name: "quota mode, week", domain: "shop", entries: e("partner", "acme"), found: true,
			want: Rule{Key: "shop|partner=acme@604800s", Limit: fixed(1000, 7*day), RequestsPerUnit: 1000, Unit: UnitWeek, Quota: true, StatsKey: "shop.partner"}},
		{name: "unknown domain", domain: "nope", entries: e("client_ip", "192.0.2.1")},
		{name: "no entries", domain: "shop", entries: nil},

		// Wildcards.
		{name: "trailing wildcard, each value its own count", domain: "media", entries: e("path", "/img/a.png"), found: true,
			want: Rule{Key: "media|path=/img/a.png@60s", Limit: fixed(20, time.Minute), RequestsPerUnit: 20, Unit: UnitMinute, StatsKey: "media.path_/img/*"}},
		{name: "wildcard matches the empty run", domain: "media", entries: e("path", "/img/"), found: true,
			want: Rule{Key: "media|path=/img/@60s", Limit: fixed(20, time.Minute), RequestsPerUnit: 20, Unit: UnitMinute, StatsKey: "media.path_/img/*"}},
		{name: "exact value before a matching wildcard", domain: "media", entries: e("path", "/img/logo.png"), found: true,
			want: Rule{Key: "media|path=/img/logo.png@60s", Limit: fixed(1000, time.Minute), RequestsPerUnit: 1000, Unit: UnitMinute, StatsKey: "media.path_/img/logo.png"}},
		{name: "several wildcards", domain: "media", entries: e("path", "/v2/items/42/edit"), found: true,
			want: Rule{Key: "media|path=/v2/items/42/edit@60s", Limit: fixed(4, time.Minute), RequestsPerUnit: 4, Unit: UnitMinute, StatsKey: "media.path_/v*/items/*/edit"}},
		{name: "wildcard suffix must match", domain: "media", entries: e("path", "/v2/items/42/view")},
		{name: "wildcard prefix must match", domain: "media", entries: e("path", "/video/img/x")},
		{name: "share_threshold: one count for all matches", domain: "media", entries: e("bucket", "exports/a.csv"), found: true,
			want: Rule{Key: "media|bucket~exports/*@3600s", Limit: fixed(10, time.Hour), RequestsPerUnit: 10, Unit: UnitHour, StatsKey: "media.bucket_exports/*"}},
		{name: "share_threshold: another match, same count", domain: "media", entries: e("bucket", "exports/b.csv"), found: true,
			want: Rule{Key: "media|bucket~exports/*@3600s", Limit: fixed(10, time.Hour), RequestsPerUnit: 10, Unit: UnitHour, StatsKey: "media.bucket_exports/*"}},
		{name: "share_threshold at a placeholder level", domain: "media", entries: e("tenant", "t-1", "action", "read"), found: true,
			want: Rule{Key: "media|tenant~t-*|action=read@60s", Limit: fixed(6, time.Minute), RequestsPerUnit: 6, Unit: UnitMinute, StatsKey: "media.tenant_t-*.action"}},
		{name: "shadow mode", domain: "media", entries: e("beta", "u1"), found: true,
			want: Rule{Key: "media|beta=u1@1s", Limit: fixed(1, time.Second), RequestsPerUnit: 1, Unit: UnitSecond, Shadow: true, StatsKey: "media.beta"}},

		// Sluice's own fields.
		{name: "GCRA over 30s: current_limit says per minute", domain: "sluice", entries: e("api_key", "k1"), found: true,
			want: Rule{Key: "sluice|api_key=k1@30s", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 60, Period: 30 * time.Second, Burst: 9},
				RequestsPerUnit: 60, Unit: UnitMinute, OnFailure: engine.FailLocal, StatsKey: "sluice.api_key", Own: true}},
		{name: "token bucket as deep as a unit's requests", domain: "sluice", entries: e("upload", "u"), found: true,
			want: Rule{Key: "sluice|upload=u@60s", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 12, Period: time.Minute, Burst: 12},
				RequestsPerUnit: 12, Unit: UnitMinute, StatsKey: "sluice.upload", Own: true}},
		{name: "90m: current_limit says per day", domain: "sluice", entries: e("slow", "s"), found: true,
			want: Rule{Key: "sluice|slow=s@5400s", Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 100, Period: 90 * time.Minute},
				RequestsPerUnit: 100, Unit: UnitDay, OnFailure: engine.FailClosed, StatsKey: "sluice.slow", Own: true}},

		// Names of the peer's statistics.
		{name: "value_to_metric", domain: "stats", entries: e("route", "api", "method", "GET"), found: true,
			want: Rule{Key: "stats|route=api|method=GET@60s", Limit: fixed(60, time.Minute), RequestsPerUnit: 60, Unit: UnitMinute, StatsKey: "stats.route_api.method"}},
		{name: "detailed_metric", domain: "stats", entries: e("caller", "bob"), found: true,
			want: Rule{Key: "stats|caller=bob@60s", Limit: fixed(10, time.Minute), RequestsPerUnit: 10, Unit: UnitMinute, StatsKey: "stats.caller_bob"}},
		{name: "value_to_metric under share_threshold keeps the pattern", domain: "stats", entries: e("area", "zone-3", "op", "get"), found: true,
			want: Rule{Key: "stats|area~zone-*|op=get@60s", Limit: fixed(7, time.Minute), RequestsPerUnit: 7, Unit: UnitMinute, StatsKey: "stats.area_zone-*.op"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := c.Lookup(tc.domain, tc.entries)
			if ok != tc.found {
				t.Fatalf("found %v, want %v (%+v)", ok, tc.found, r)
			}
			r.Metadata, r.Replaces, r.Source, r.Label, r.shared = nil, nil, "", "", nil
			if !reflect.DeepEqual(r, tc.want) {
				t.Fatalf("rule\n got %+v\nwant %+v", r, tc.want)
			}
			if ok && r.RefusesAll() != (!r.Unlimited && r.Limit.Rate == 0) {
				t.Fatal("RefusesAll disagrees")
			}
		})
	}
}

func TestLookupDetails(t *testing.T) {
	c := loadExamples(t)
	r, _ := c.Lookup("shop", e("partner", "acme"))
	if want := map[string]any{"tier": map[string]any{"level": "gold"}}; !reflect.DeepEqual(r.Metadata, want) {
		t.Fatalf("metadata %v, want %v", r.Metadata, want)
	}
	if !strings.HasSuffix(r.Source, "shop.yaml:47") {
		t.Fatalf("source %q", r.Source)
	}
	if r, _ := c.Lookup("shop", e("client_ip", "203.0.113.9")); !r.RefusesAll() {
		t.Fatal("requests_per_unit 0 does not refuse all")
	}
	if r, _ := c.Lookup("shop", e("client_ip", "192.0.2.1")); r.RefusesAll() {
		t.Fatal("a limit of 10 refuses all")
	}
}

// TestLookupJoinsKeyAndValue pins a peer quirk: it matches on key and
// value joined by '_', so a wildcard on one key can match another key.
func TestLookupJoinsKeyAndValue(t *testing.T) {
	c, err := parse(t, `
domain: d
descriptors:
  - key: user
    value: a*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: x
    value: y_z
    rate_limit: {unit: second, requests_per_unit: 2}
`)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := c.Lookup("d", e("user_admin", "root")); !ok || r.RequestsPerUnit != 1 {
		t.Fatalf("user_admin=root: %v %+v", ok, r)
	}
	if r, ok := c.Lookup("d", e("x_y", "z")); !ok || r.RequestsPerUnit != 2 {
		t.Fatalf("x_y=z: %v %+v", ok, r)
	}
	// The state keys still tell the two apart.
	a, _ := c.Lookup("d", e("x_y", "z"))
	b, _ := c.Lookup("d", e("x", "y_z"))
	if a.Key == b.Key {
		t.Fatalf("one key for two descriptors: %s", a.Key)
	}
}

func TestResolveReplaces(t *testing.T) {
	c := loadExamples(t)
	reads := Descriptor{Entries: e("route", "reads", "user", "u1")}
	report := Descriptor{Entries: e("route", "report", "user", "u1")}

	ms, err := c.Resolve("replace", []Descriptor{reads})
	if err != nil || !ms[0].Found || ms[0].Rule.Name != "reads_per_user" || ms[0].Rule.RequestsPerUnit != 5 {
		t.Fatalf("alone: %+v %v", ms, err)
	}
	ms, err = c.Resolve("replace", []Descriptor{reads, report})
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Found || !ms[0].Replaced {
		t.Fatalf("the named rule was not replaced: %+v", ms[0])
	}
	if !ms[1].Found || ms[1].Rule.RequestsPerUnit != 50 || !reflect.DeepEqual(ms[1].Rule.Replaces, []string{"reads_per_user"}) {
		t.Fatalf("the replacing rule: %+v", ms[1])
	}
	// Order does not matter.
	ms, _ = c.Resolve("replace", []Descriptor{report, reads})
	if !ms[0].Found || ms[1].Found || !ms[1].Replaced {
		t.Fatalf("reversed: %+v", ms)
	}
}

func TestResolveUnlimitedReplacesButIsNotReplaced(t *testing.T) {
	c, err := parse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {name: la, unlimited: true, replaces: [{name: lb}]}
  - key: b
    rate_limit: {name: lb, unit: second, requests_per_unit: 1, replaces: [{name: la}]}
`)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.Resolve("d", []Descriptor{{Entries: e("a", "1")}, {Entries: e("b", "1")}})
	if err != nil {
		t.Fatal(err)
	}
	if !ms[0].Found || !ms[0].Rule.Unlimited {
		t.Fatalf("the unlimited rule was replaced: %+v", ms[0])
	}
	if ms[1].Found || !ms[1].Replaced {
		t.Fatalf("an unlimited rule's replaces did not apply: %+v", ms[1])
	}
}

func TestOverride(t *testing.T) {
	c := loadExamples(t)
	// The override wins over the configuration, and counts under the key a
	// configured rule of the same unit uses.
	r, ok, err := c.Override("shop", e("client_ip", "192.0.2.1"), 7, UnitSecond)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	want := Rule{Key: "shop|client_ip=192.0.2.1@1s", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 7, Period: time.Second},
		RequestsPerUnit: 7, Unit: UnitSecond, StatsKey: "shop.client_ip_192.0.2.1", Label: "shop" + OverrideLabel}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("rule\n got %+v\nwant %+v", r, want)
	}
	conf, _ := c.Lookup("shop", e("client_ip", "192.0.2.1"))
	if conf.Key != r.Key {
		t.Fatalf("keys differ: %s, %s", conf.Key, r.Key)
	}
	// Even where nothing is configured, and never shadowed.
	ms, err := c.Resolve("media", []Descriptor{{Entries: e("beta", "u1"), Override: &Override{RequestsPerUnit: 3, Unit: UnitHour}}, {Entries: e("nothing", "here")}})
	if err != nil || !ms[0].Found || ms[0].Rule.Shadow || ms[0].Rule.Limit.Period != time.Hour || ms[1].Found {
		t.Fatalf("%+v %v", ms, err)
	}
	if _, ok, _ := c.Override("nope", e("a", "b"), 1, UnitSecond); ok {
		t.Fatal("an override applied in an unknown domain")
	}
	if _, _, err := c.Override("shop", e("a", "b"), 1, UnitUnknown); err == nil {
		t.Fatal("UNKNOWN unit accepted")
	}
	if _, err := c.Resolve("shop", []Descriptor{{Entries: e("a", "b"), Override: &Override{RequestsPerUnit: 1, Unit: 99}}}); err == nil {
		t.Fatal("unit 99 accepted")
	}
}

func TestStateKeyEscapesAndBounds(t *testing.T) {
	a := stateKey("d", e("k", "a|b=c"), nil, time.Second)
	b := stateKey("d", e("k", "a", "b", "c"), nil, time.Second)
	if a == b {
		t.Fatalf("collision: %s", a)
	}
	if want := "d|k=a%7Cb%3Dc@1s"; a != want {
		t.Fatalf("key %s, want %s", a, want)
	}
	long := stateKey("d", e("k", strings.Repeat("x", 2000)), nil, time.Second)
	if len(long) > MaxKeyLen || !strings.HasPrefix(long, "d|#") {
		t.Fatalf("long key %q", long)
	}
	if long2 := stateKey("d", e("k", strings.Repeat("x", 2001)), nil, time.Second); long2 == long {
		t.Fatal("two long keys collide")
	}
	if k := stateKey("d", e("k", "v"), nil, 1500*time.Millisecond); k != "d|k=v@1.5s" {
		t.Fatalf("key %s", k)
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "ba", false},
		{"*a", "ba", true}, {"*a", "ab", false},
		{"a*b", "ab", true}, {"a*b", "axxb", true}, {"a*b", "a", false}, {"a*b", "b", false},
		{"a*a", "a", false}, {"a*a", "aa", true},
		{"a*b*c", "abc", true}, {"a*b*c", "a1b2c", true}, {"a*b*c", "acb", false}, {"a*b*c", "a1c2b", false},
		{"*", "", true}, {"**", "x", true}, {"x", "x", true}, {"x", "y", false},
		{"ab*b*bc", "abbc", false}, {"ab*b*bc", "abbbc", true},
	} {
		if got := globMatch(strings.Split(tc.pattern, "*"), tc.s); got != tc.want {
			t.Errorf("%q ~ %q = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestParseUnit(t *testing.T) {
	for s, want := range map[string]Unit{"second": UnitSecond, "MINUTE": UnitMinute, "Hour": UnitHour, "day": UnitDay,
		"week": UnitWeek, "month": UnitMonth, "year": UnitYear} {
		if u, ok := ParseUnit(s); !ok || u != want {
			t.Errorf("%s: %v %v", s, u, ok)
		}
	}
	for _, s := range []string{"", "unknown", "UNKNOWN", "seconds", "min", "1m"} {
		if _, ok := ParseUnit(s); ok {
			t.Errorf("%q accepted", s)
		}
	}
	for d, want := range map[time.Duration]Unit{time.Millisecond: UnitSecond, time.Second: UnitSecond, 30 * time.Second: UnitMinute,
		time.Minute: UnitMinute, 61 * time.Second: UnitHour, 8 * 24 * time.Hour: UnitMonth, 400 * 24 * time.Hour: UnitYear} {
		if u := unitCovering(d); u != want {
			t.Errorf("covering %v: %v, want %v", d, u, want)
		}
	}
}

// TestLabel: a rule's metric label is the configured descriptor's name,
// never a request's value, whatever value_to_metric, detailed_metric or a
// key alone would put into the peer's statistics name.
func TestLabel(t *testing.T) {
	c := loadExamples(t)
	for _, tc := range []struct {
		domain  string
		entries []Entry
		want    string
	}{
		{"shop", e("client_ip", "192.0.2.1"), "shop.client_ip"},
		{"shop", e("client_ip", "203.0.113.9"), "shop.client_ip_203.0.113.9"},
		{"media", e("path", "/img/a.png"), "media.path_/img/*"},
		{"stats", e("route", "api", "method", "GET"), "stats.route.method"},
		{"stats", e("caller", "bob"), "stats.caller"},
	} {
		r, ok := c.Lookup(tc.domain, tc.entries)
		if !ok || r.Label != tc.want {
			t.Errorf("%s %v: label %q (found %v), want %q", tc.domain, tc.entries, r.Label, ok, tc.want)
		}
	}
	r, ok, err := c.Override("shop", e("client_ip", "192.0.2.1"), 5, UnitMinute)
	if err != nil || !ok || r.Label != "shop"+OverrideLabel {
		t.Errorf("override label %q, %v, %v", r.Label, ok, err)
	}
}
