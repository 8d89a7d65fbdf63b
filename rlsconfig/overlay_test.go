package rlsconfig

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluice-rl/sluice/engine"
)

// shopYAML is the configuration the overlay tables are laid on.
const shopYAML = `domain: shop
descriptors:
  - key: client_ip
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /checkout
    rate_limit: {unit: second, requests_per_unit: 5, name: checkout}
  - key: path
    value: /cart
    rate_limit: {unit: second, requests_per_unit: 50, name: checkout}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: tenant
    descriptors:
      - key: plan
        value: gold
        rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: log
    rate_limit: {unit: second, requests_per_unit: 200000}
`

func shop(t *testing.T) *Config {
	t.Helper()
	c, err := Parse(File{Name: "shop.yaml", Data: []byte(shopYAML)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func lookup(t *testing.T, c *Config, entries ...Entry) Rule {
	t.Helper()
	r, ok := c.Lookup("shop", entries)
	if !ok {
		t.Fatalf("no rule for %v", entries)
	}
	return r
}

// TestWithOverlay: each way of selecting rules, the precedence of path
// over name over domain, the fields given and the defaults of those not
// given, and the configuration left as it was.
func TestWithOverlay(t *testing.T) {
	ip, checkout, cart, free := Entry{"client_ip", "192.0.2.1"}, Entry{"path", "/checkout"}, Entry{"path", "/cart"}, Entry{"path", "/free"}
	gold := []Entry{{"tenant", "t1"}, {"plan", "gold"}}
	lim := func(a engine.Algorithm, rate int64, period time.Duration, burst int64) engine.Limit {
		return engine.Limit{Algorithm: a, Rate: rate, Period: period, Burst: burst}
	}
	type want struct {
		entries []Entry
		limit   engine.Limit
		unit    Unit
	}
	for _, tc := range []struct {
		name    string
		overlay string
		changed int
		want    []want
	}{
		{"the whole domain a sliding window", "rules:\n  - domain: shop\n    algorithm: sliding_window\n", 5, []want{
			{[]Entry{ip}, lim(engine.SlidingWindow, 10, time.Minute, 0), UnitMinute},
			{gold, lim(engine.SlidingWindow, 1000, time.Hour, 0), UnitHour},
		}},
		{"a path: GCRA's burst defaults to one unit's requests", `rules:
  - domain: shop
    descriptors: [{key: tenant}, {key: plan, value: gold}]
    algorithm: gcra
`, 1, []want{
			{gold, lim(engine.GCRA, 1000, time.Hour, 999), UnitHour},
			{[]Entry{ip}, lim(engine.FixedWindow, 10, time.Minute, 0), UnitMinute},
		}},
		{"a period replaces the unit; the rate is per period", `rules:
  - domain: shop
    descriptors: [{key: client_ip}]
    period: 90s
`, 1, []want{{[]Entry{ip}, lim(engine.FixedWindow, 10, 90*time.Second, 0), UnitHour}}},
		{"by name, every rule of that name", `rules:
  - domain: shop
    name: checkout
    algorithm: token_bucket
    capacity: 7
`, 2, []want{
			{[]Entry{checkout}, lim(engine.TokenBucket, 5, time.Second, 7), UnitSecond},
			{[]Entry{cart}, lim(engine.TokenBucket, 50, time.Second, 7), UnitSecond},
		}},
		{"path over name over domain", `rules:
  - domain: shop
    algorithm: sliding_window
    precision: 4
  - domain: shop
    name: checkout
    algorithm: leaky_bucket
  - domain: shop
    descriptors: [{key: path, value: /checkout}]
    algorithm: gcra
    burst: 2
`, 5, []want{
			{[]Entry{checkout}, lim(engine.GCRA, 5, time.Second, 2), UnitSecond},
			{[]Entry{cart}, lim(engine.LeakyBucket, 50, time.Second, 50), UnitSecond},
			{[]Entry{ip}, engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Minute, Precision: 4}, UnitMinute},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := shop(t)
			c, res := lay(t, base, tc.overlay)
			if res.Rules != tc.changed || len(res.Unmatched) != 0 || len(res.Refused) != 0 {
				t.Fatalf("result %+v; want %d rules changed, nothing unmatched or refused", res, tc.changed)
			}
			for _, w := range tc.want {
				r := lookup(t, c, w.entries...)
				if r.Limit != w.limit || r.Unit != w.unit {
					t.Errorf("%v: %+v %v; want %+v %v", w.entries, r.Limit, r.Unit, w.limit, w.unit)
				}
				changed := w.limit.Algorithm != engine.FixedWindow || w.limit.Period != lookup(t, base, w.entries...).Limit.Period
				if r.Own != changed || strings.Contains(r.Source, "overlay.yaml:") != changed {
					t.Errorf("%v: Own %v, Source %q; changed: %v", w.entries, r.Own, r.Source, changed)
				}
				if b := lookup(t, base, w.entries...); b.Limit.Algorithm != engine.FixedWindow || b.Own {
					t.Errorf("the base changed: %+v", b)
				}
			}
			if r := lookup(t, c, free); !r.Unlimited {
				t.Errorf("the unlimited rule: %+v", r)
			}
			if c.Digest() == base.Digest() {
				t.Error("the overlaid configuration has the base's digest")
			}
		})
	}
}

// TestWithOverlayRefusesAndUnmatched: a rule the overlay cannot be laid on
// stays as configured and is named with both lines; a rule of the overlay
// that selects nothing is named.
func TestWithOverlayRefusesAndUnmatched(t *testing.T) {
	for _, tc := range []struct {
		name, overlay, refused, unmatched string
	}{
		{"no burst on a sliding window", "rules:\n  - domain: shop\n    descriptors: [{key: client_ip}]\n    algorithm: sliding_window\n    burst: 3\n",
			`overlay.yaml:5: rules[0].burst: on rule shop.client_ip (shop.yaml:4): 3 the sliding_window algorithm takes no burst`, ""},
		{"the rule's rate too large for a sliding log", "rules:\n  - domain: shop\n    descriptors: [{key: log}]\n    algorithm: sliding_log\n",
			`overlay.yaml:2: rules[0].limit: on rule shop.log (shop.yaml:20): the rule's limit 200000 must be between 1 and 100000`, ""},
		{"an unlimited rule by its path", "rules:\n  - domain: shop\n    descriptors: [{key: path, value: /free}]\n    algorithm: gcra\n",
			`overlay.yaml:2: rules[0]: on rule shop.path_/free (shop.yaml:13): the rule is unlimited`, ""},
		{"a path the configuration lacks", "rules:\n  - domain: shop\n    descriptors: [{key: tenant}]\n    algorithm: gcra\n",
			"", "overlay.yaml:2: the rule shop.tenant"},
		{"a domain the configuration lacks", "rules:\n  - domain: shoes\n    algorithm: gcra\n", "", "overlay.yaml:2: every rule of domain shoes"},
		{"a name no rule has", "rules:\n  - domain: shop\n    name: nope\n    algorithm: gcra\n", "", `overlay.yaml:2: the rules named "nope" in domain shop`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := shop(t)
			c, res := lay(t, base, tc.overlay)
			if res.Rules != 0 {
				t.Errorf("%d rules changed", res.Rules)
			}
			switch {
			case tc.refused != "":
				if len(res.Refused) != 1 || !strings.HasPrefix(res.Refused[0].Error(), tc.refused) {
					t.Fatalf("refused %v; want %s", res.Refused, tc.refused)
				}
				var e *Error
				if !errors.As(res.Refused[0], &e) || e.File != "overlay.yaml" {
					t.Errorf("refusal of type %T, file %v", res.Refused[0], e)
				}
			default:
				if len(res.Unmatched) != 1 || !strings.HasPrefix(res.Unmatched[0], tc.unmatched) {
					t.Fatalf("unmatched %q; want %s", res.Unmatched, tc.unmatched)
				}
			}
			if r := lookup(t, c, Entry{"client_ip", "x"}); r.Limit.Algorithm != engine.FixedWindow || r.Own {
				t.Errorf("a rule changed: %+v", r)
			}
		})
	}
}

// TestParseOverlayErrors: every mistake names its file, line and field.
func TestParseOverlayErrors(t *testing.T) {
	for _, tc := range []struct{ overlay, want string }{
		{"", "o.yaml:1: empty overlay: expected a top-level key \"rules\""},
		{"- a", "o.yaml:1: expected a mapping with the key \"rules\""},
		{"rule: []", "o.yaml:1: unknown key \"rule\": expected \"rules\""},
		{"rules: []\nrules: []", "o.yaml:2: key \"rules\" given twice"},
		{"rules: 3", "o.yaml:1: \"rules\" must be a list"},
		{"rules: [3]", "o.yaml:1: rules[0]: expected a mapping of fields"},
		{"rules:\n  - algorithm: gcra\n", "o.yaml:2: rules[0].domain: missing"},
		{"rules:\n  - domain: d\n", "o.yaml:2: rules[0]: gives nothing to change"},
		{"rules:\n  - domain: d\n    burts: 3\n", "o.yaml:3: rules[0].burts: unknown field: expected one of domain, descriptors"},
		{"rules:\n  - domain: d\n    requests_per_unit: 3\n", "o.yaml:3: rules[0].requests_per_unit: the rule's rate is the configuration's own"},
		{"rules:\n  - domain: d\n    limit: 3\n", "o.yaml:3: rules[0].limit: the rule's rate is the configuration's own"},
		{"rules:\n  - domain: d\n    algorithm: gcra\n    algorithm: gcra\n", "o.yaml:4: rules[0].algorithm: given twice"},
		{"rules:\n  - domain: d\n    algorithm: slidin\n", `o.yaml:3: rules[0].algorithm: "slidin" must be one of fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra`},
		{"rules:\n  - domain: d\n    period: 10\n", `o.yaml:3: rules[0].period: "10" needs a unit`},
		{"rules:\n  - domain: d\n    burst: 1.5\n", `o.yaml:3: rules[0].burst: "1.5" is not a whole number`},
		{"rules:\n  - domain: d\n    burst: 1\n    capacity: 1\n", "o.yaml:4: rules[0].capacity: is another name for burst"},
		{"rules:\n  - domain: d\n    precision: 0\n", "o.yaml:3: rules[0].precision: 0 must be between 1 and 100"},
		{"rules:\n  - domain: d\n    on_failure: maybe\n", `o.yaml:3: rules[0].on_failure: "maybe" must be allow, deny or local`},
		{"rules:\n  - domain: d\n    refusal_takes_nothing: yes\n", `o.yaml:3: rules[0].refusal_takes_nothing: "yes" must be true or false`},
		{"rules:\n  - domain: d\n    algorithm: [gcra]\n", "o.yaml:3: rules[0].algorithm: expected a single value"},
		{"rules:\n  - domain: d\n    name: n\n    descriptors: [{key: k}]\n    algorithm: gcra\n", "o.yaml:3: rules[0].name: give descriptors or name, not both"},
		{"rules:\n  - domain: d\n    descriptors: []\n    algorithm: gcra\n", "o.yaml:3: rules[0].descriptors: expected a list"},
		{"rules:\n  - domain: d\n    descriptors: [{value: v}]\n    algorithm: gcra\n", "o.yaml:3: rules[0].descriptors[0].key: missing"},
		{"rules:\n  - domain: d\n    descriptors: [{key: k, rate_limit: {}}]\n    algorithm: gcra\n", "o.yaml:3: rules[0].descriptors[0].rate_limit: unknown field"},
		{"rules:\n  - domain: d\n    algorithm: gcra\n  - domain: d\n    period: 1s\n", "o.yaml:4: rules[1]: selects what rules[0] selects (every rule of domain d)"},
		{"rules:\n  - {domain: d, name: n, period: 1s}\n  - {domain: d, name: n, algorithm: gcra}\n", "o.yaml:3: rules[1]: selects what rules[0] selects"},
		{"rules: [{domain: d, period: 1s}]\n\tx", "o.yaml:2: found character that cannot start any token"},
	} {
		_, err := ParseOverlay("o.yaml", []byte(tc.overlay))
		var e *Error
		if !errors.As(err, &e) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %s", tc.overlay, err, tc.want)
		}
	}
}

// TestOverlayOverXDS: a rule from xDS, which has no field for an
// algorithm, gets the overlay's as a rule from a file does.
func TestOverlayOverXDS(t *testing.T) {
	base, err := FromXDS(&rlspb.RateLimitConfig{Name: "ai-gateway-quota", Domain: "ai-gateway-quota", Descriptors: []*rlspb.RateLimitDescriptor{
		{Key: "backend_name", Value: "default/llm", Descriptors: []*rlspb.RateLimitDescriptor{
			{Key: "model_name_override", Value: "gpt-4", QuotaMode: true, RateLimit: &rlspb.RateLimitPolicy{Unit: rlspb.RateLimitUnit_HOUR, RequestsPerUnit: 10000}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := ParseOverlay("o.yaml", []byte("rules:\n  - domain: ai-gateway-quota\n    algorithm: sliding_window\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, res := base.WithOverlay(o)
	r, ok := c.Lookup("ai-gateway-quota", []Entry{{"backend_name", "default/llm"}, {"model_name_override", "gpt-4"}})
	if !ok || res.Rules != 1 || r.Limit != (engine.Limit{Algorithm: engine.SlidingWindow, Rate: 10000, Period: time.Hour}) || !r.Quota || !r.Own {
		t.Fatalf("%+v %v %+v", r, ok, res)
	}
}

// TestOverlayWatcher: the overlay laid on a watched directory follows a
// change of either; a broken overlay, or one a rule refuses, keeps the
// one in use and says so in its status, and the base's changes still
// take the overlay in use.
func TestOverlayWatcher(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "shop.yaml"), shopYAML)
	rules, _ := startWatcher(t, dir)
	path := filepath.Join(t.TempDir(), "overlay.yaml")
	writeFile(t, path, "rules:\n  - domain: shop\n    algorithm: sliding_window\n")
	var logs syncBuffer
	w, err := NewOverlayWatcher(OverlayWatchConfig{Path: path, Base: rules.Current, Debounce: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, w.Run)

	ip := Entry{"client_ip", "192.0.2.1"}
	algorithm := func() engine.Algorithm { return lookup(t, w.Current(), ip).Limit.Algorithm }
	eventually(t, "the first overlay", func() bool { return algorithm() == engine.SlidingWindow })

	replaceFile(t, path, "rules:\n  - domain: shop\n    algorithm: gcra\n")
	eventually(t, "the overlay's update", func() bool { return algorithm() == engine.GCRA })
	loaded := w.Status().Loaded

	for _, bad := range []string{
		"rules:\n  - domain: shop\n    algorithm: sliding_windw\n",                              // does not parse
		"rules:\n  - domain: shop\n    algorithm: sliding_window\n    burst: 4\n",               // refused by every rule
		"rules:\n  - domain: shop\n    descriptors: [{key: log}]\n    algorithm: sliding_log\n", // refused by one
	} {
		replaceFile(t, path, bad)
		eventually(t, "the refusal of "+bad, func() bool { st := w.Status(); return st.Failing && strings.Contains(st.LastError, "overlay.yaml:") })
		if got := algorithm(); got != engine.GCRA {
			t.Fatalf("after %q: %v; want the overlay in use kept", bad, got)
		}
		if !w.Status().Loaded.Equal(loaded) {
			t.Errorf("the load time moved on a refusal")
		}
		replaceFile(t, path, "rules:\n  - domain: shop\n    algorithm: gcra\n")
		eventually(t, "the content in use again", func() bool { return !w.Status().Failing })
	}
	if info := fields(w.Info()); info["rls_overlay_reload_failures"] != "3" || info["rls_overlay_rules_changed"] != "5" || info["rls_overlay_file"] != path {
		t.Errorf("INFO %v", info)
	}
	if !strings.Contains(logs.String(), "rls overlay not reloaded: keeping the one in use") {
		t.Errorf("no refusal logged:\n%s", logs.String())
	}

	// A new base: the overlay in use is laid on it, and a rule of it that
	// selects no rule any more is counted and logged.
	writeFile(t, path, "rules:\n  - {domain: shop, algorithm: gcra}\n  - {domain: shop, descriptors: [{key: tenant}, {key: plan, value: gold}], period: 2h}\n")
	eventually(t, "the two-rule overlay", func() bool { return w.Overlay().Len() == 2 })
	replaceFile(t, filepath.Join(dir, "shop.yaml"), "domain: shop\ndescriptors:\n  - key: client_ip\n    rate_limit: {unit: second, requests_per_unit: 3}\n")
	eventually(t, "the base's update", func() bool {
		r := lookup(t, w.Current(), ip)
		return r.Limit == engine.Limit{Algorithm: engine.GCRA, Rate: 3, Period: time.Second, Burst: 2}
	})
	if info := fields(w.Info()); info["rls_overlay_unmatched"] != "1" {
		t.Errorf("INFO %v; want one rule unmatched", info)
	}
	if !strings.Contains(logs.String(), "select no rule of the configuration in use") {
		t.Errorf("the unmatched rule is not logged:\n%s", logs.String())
	}
}

// TestNewOverlayWatcherRefuses: at start-up a broken overlay, or one the
// configuration refuses, is an error.
func TestNewOverlayWatcherRefuses(t *testing.T) {
	base := shop(t)
	path := filepath.Join(t.TempDir(), "o.yaml")
	for _, tc := range []struct{ overlay, want string }{
		{"rules: [{domain: shop}]", "rules[0]: gives nothing to change"},
		{"rules: [{domain: shop, algorithm: sliding_log}]", "the overlay cannot be laid on the configuration in use"},
	} {
		writeFile(t, path, tc.overlay)
		_, err := NewOverlayWatcher(OverlayWatchConfig{Path: path, Base: func() *Config { return base }})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %s", tc.overlay, err, tc.want)
		}
	}
	if _, err := NewOverlayWatcher(OverlayWatchConfig{Path: filepath.Join(path, "none"), Base: func() *Config { return base }}); err == nil {
		t.Error("a missing file was accepted")
	}
}

// lay parses an overlay and lays it on base.
func lay(t *testing.T, base *Config, overlay string) (*Config, OverlayResult) {
	t.Helper()
	o, err := ParseOverlay("overlay.yaml", []byte(overlay))
	if err != nil {
		t.Fatal(err)
	}
	return base.WithOverlay(o)
}

func fields(kv [][2]string) map[string]string {
	m := map[string]string{}
	for _, f := range kv {
		m[f[0]] = f[1]
	}
	return m
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
