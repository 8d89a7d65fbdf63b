package rlsconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// parse loads one file named x.yaml.
func parse(t *testing.T, src string) (*Config, error) {
	t.Helper()
	return Parse(File{Name: "x.yaml", Data: []byte(strings.TrimLeft(src, "\n"))})
}

// TestLoadErrors holds one file per way the peer refuses a file (and per
// way Sluice refuses its own fields), with the exact error.
func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"empty file", ``, "x.yaml:1: config file cannot have empty domain"},
		{"no domain", `
descriptors:
  - key: a
`, "x.yaml:1: config file cannot have empty domain"},
		{"empty domain", `
domain: ""
`, "x.yaml:1: config file cannot have empty domain"},
		{"bad yaml", `
domain: d
descriptors: '''
`, "x.yaml:2: error loading config file: found unexpected end of stream"},
		{"top level is a list", `
- domain: d
`, "x.yaml:1: error loading config file: cannot unmarshal !!seq into a mapping: a file is a mapping with domain and descriptors"},
		{"misspelled top-level key", `
domian: d
`, "x.yaml:1: config error, unknown key 'domian'"},
		{"misspelled rate_limit", `
domain: d
descriptors:
  - key: k
    value: v
    ratelimit:
      unit: day
      requests_per_unit: 5
`, "x.yaml:5: config error, unknown key 'ratelimit'"},
		{"misspelled requests_per_unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: day
      requestsperunit: 5
`, "x.yaml:6: config error, unknown key 'requestsperunit'"},
		{"unknown key in replaces", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: day
      requests_per_unit: 5
      replaces:
        - nmae: other
`, "x.yaml:8: config error, unknown key 'nmae'"},
		{"float key", `
0.25: d
`, "x.yaml:1: config error, key is not of type string: 0.25"},
		{"bool key in YAML 1.1", `
domain: d
descriptors:
  - key: k
    yes: 1
`, "x.yaml:4: config error, key is not of type string: true"},
		{"null key", `
~: d
`, "x.yaml:1: config error, key is not of type string: <nil>"},
		{"list of strings", `
domain: d
descriptors:
  - a
  - b
`, "x.yaml:3: config error, yaml file contains list of type other than map: a"},
		{"list holding a list", `
domain: d
descriptors:
  - [a, 1]
`, "x.yaml:3: config error, yaml file contains list of type other than map: [a 1]"},
		{"float value", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1.5
`, "x.yaml:6: error checking config: 1.5 of requests_per_unit is not a string, an integer or a bool"},
		{"float value even in a string field", `
domain: d
descriptors:
  - key: version
    value: 1.5
`, "x.yaml:4: error checking config: 1.5 of value is not a string, an integer or a bool"},
		{"bad unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: fortnight
      requests_per_unit: 5
`, "x.yaml:5: invalid rate limit unit 'fortnight'"},
		{"plural unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: seconds
      requests_per_unit: 5
`, "x.yaml:5: invalid rate limit unit 'seconds'"},
		{"unit unknown", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: unknown
      requests_per_unit: 5
`, "x.yaml:5: invalid rate limit unit 'unknown'"},
		{"no unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      requests_per_unit: 5
`, "x.yaml:4: invalid rate limit unit ''"},
		{"unlimited with a unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      unit: day
      requests_per_unit: 25
`, "x.yaml:6: should not specify rate limit unit when unlimited"},
		{"duplicate key and value", `
domain: d
descriptors:
  - key: k
    value: v
  - key: k
    value: v
`, "x.yaml:5: duplicate descriptor composite key 'd.k_v'"},
		{"duplicate key alone, nested", `
domain: d
descriptors:
  - key: k
    value: v
    descriptors:
      - key: sub
      - key: sub
`, "x.yaml:7: duplicate descriptor composite key 'd.k_v.sub'"},
		{"key_value meets key alone", `
domain: d
descriptors:
  - key: a
    value: b
  - key: a_b
`, "x.yaml:5: duplicate descriptor composite key 'd.a_b'"},
		{"empty key", `
domain: d
descriptors:
  - value: v
`, "x.yaml:3: descriptor has empty key"},
		{"replaces itself", `
domain: d
descriptors:
  - key: k
    rate_limit:
      name: self
      replaces:
        - name: self
      unit: second
      requests_per_unit: 5
`, "x.yaml:7: replaces should not contain name of same descriptor"},
		{"empty replaces entry", `
domain: d
descriptors:
  - key: k
    rate_limit:
      name: self
      replaces:
        - name:
      unit: second
      requests_per_unit: 5
`, "x.yaml:7: should not have an empty replaces entry"},
		{"share_threshold without a wildcard", `
domain: d
descriptors:
  - key: files
    value: files/a
    share_threshold: true
`, "x.yaml:5: share_threshold can only be used with wildcard values (containing '*'), but found key 'files_files/a'"},
		{"negative requests_per_unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: -1
`, "x.yaml:6: error loading config file: cannot unmarshal !!int `-1` into requests_per_unit, a uint32"},
		{"requests_per_unit past uint32", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 4294967296
`, "x.yaml:6: error loading config file: cannot unmarshal !!int `4294967296` into requests_per_unit, a uint32"},
		{"quoted requests_per_unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: "5"
`, "x.yaml:6: error loading config file: cannot unmarshal !!str `5` into requests_per_unit, a uint32"},
		{"integer for a bool", `
domain: d
descriptors:
  - key: k
    shadow_mode: 1
`, "x.yaml:4: error loading config file: cannot unmarshal !!int `1` into shadow_mode, a bool"},
		{"descriptors not a list", `
domain: d
descriptors: foo
`, "x.yaml:2: error loading config file: cannot unmarshal !!str `foo` into a list of descriptors"},
		{"metadata not a mapping", `
domain: d
descriptors:
  - key: k
    metadata: 5
`, "x.yaml:4: error loading config file: cannot unmarshal !!int `5` into metadata, a mapping"},
		{"alias bomb", `
domain: d
replaces: &a [{name: x}, {name: x}, {name: x}, {name: x}, {name: x}, {name: x}, {name: x}, {name: x}]
name: &b [{replaces: *a}, {replaces: *a}, {replaces: *a}, {replaces: *a}, {replaces: *a}, {replaces: *a}, {replaces: *a}, {replaces: *a}]
unit: &c [{replaces: *b}, {replaces: *b}, {replaces: *b}, {replaces: *b}, {replaces: *b}, {replaces: *b}, {replaces: *b}, {replaces: *b}]
key: &d [{replaces: *c}, {replaces: *c}, {replaces: *c}, {replaces: *c}, {replaces: *c}, {replaces: *c}, {replaces: *c}, {replaces: *c}]
value: &e [{replaces: *d}, {replaces: *d}, {replaces: *d}, {replaces: *d}, {replaces: *d}, {replaces: *d}, {replaces: *d}, {replaces: *d}]
descriptors: [{replaces: *e}, {replaces: *e}, {replaces: *e}, {replaces: *e}, {replaces: *e}, {replaces: *e}, {replaces: *e}, {replaces: *e}]
`, "x.yaml:4: error loading config file: the file expands to too many nodes (aliases): its aliases stand for more than 1048576"},
		{"alias bomb in metadata", `
domain: d
descriptors:
  - key: k
    metadata:
      a: &a [x, x, x, x, x, x, x, x, x, x]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
      g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
`, "x.yaml:6: error loading config file: the file expands to too many nodes (aliases): its aliases stand for more than 1048576"},

		// Found while fuzzing: an alias inside the mapping it names recursed
		// a million frames deep before the node budget stopped it.
		{"self-merge", "&a {<<: *a}", "x.yaml:1: error loading config file: nested too deeply (an alias inside what it names?)"},
		{"descriptor nested in itself", `
domain: d
descriptors:
  - &a {key: k, descriptors: [*a]}
`, "x.yaml:3: error loading config file: nested too deeply (an alias inside what it names?)"},

		// Sluice's own fields.
		{"algorithm outside rate_limit", `
domain: d
descriptors:
  - key: k
    algorithm: gcra
`, "x.yaml:4: config error, unknown key 'algorithm': Sluice's algorithm belongs inside rate_limit"},
		{"unknown algorithm", `
domain: d
descriptors:
  - key: k
    rate_limit:
      algorithm: leaky
      unit: second
      requests_per_unit: 5
  - key: j
    rate_limit:
      algorithm: hourglass
      unit: second
      requests_per_unit: 5
`, `x.yaml:10: invalid algorithm "hourglass": must be one of fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra`},
		{"period and unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      period: 30s
      requests_per_unit: 5
`, "x.yaml:6: give unit or Sluice's period, not both"},
		{"period without a unit suffix", `
domain: d
descriptors:
  - key: k
    rate_limit:
      period: 30
      requests_per_unit: 5
`, "x.yaml:5: invalid period '30': needs a unit: did you mean 30s (seconds) or 30ms (milliseconds)?"},
		{"period too short", `
domain: d
descriptors:
  - key: k
    rate_limit:
      period: 10us
      requests_per_unit: 5
`, "x.yaml:5: invalid period '10us': must be between 1ms and 3650d"},
		{"period when unlimited", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      period: 30s
`, "x.yaml:6: should not specify rate limit period when unlimited"},
		{"burst on a window", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 5
      burst: 3
`, "x.yaml:7: invalid burst 3: the fixed_window algorithm takes no burst"},
		{"negative burst", `
domain: d
descriptors:
  - key: k
    rate_limit:
      algorithm: token_bucket
      unit: minute
      requests_per_unit: 5
      burst: -3
`, `x.yaml:8: burst "-3" must be a whole number, 0 or more`},
		{"sliding log past its bound", `
domain: d
descriptors:
  - key: k
    rate_limit:
      algorithm: sliding_log
      unit: minute
      requests_per_unit: 200000
`, "x.yaml:4: invalid limit 200000: must be between 1 and 100000"},
		{"bad on_failure", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 5
      on_failure: shrug
`, `x.yaml:7: invalid on_failure "shrug": must be allow, deny or local`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(t, tc.src)
			if err == nil {
				t.Fatalf("loaded %v; want error %q", c.Domains(), tc.want)
			}
			if err.Error() != tc.want {
				t.Fatalf("error:\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

// TestLoadAccepts holds files the peer loads although they look wrong:
// Sluice must load them too, the same way.
func TestLoadAccepts(t *testing.T) {
	for _, tc := range []struct {
		name, src    string
		entries      []Entry
		want         Rule // the fields compared: Limit, RequestsPerUnit, Unit, Shadow, Unlimited, Name
		found        bool
		wantWarnings []string
	}{
		{name: "unit in any case", src: `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: MiNuTe, requests_per_unit: 5}
`, entries: []Entry{{"k", "x"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 5, Period: time.Minute}, RequestsPerUnit: 5, Unit: UnitMinute}},
		{name: "week month year", src: `
domain: d
descriptors:
  - key: w
    rate_limit: {unit: week, requests_per_unit: 7}
  - key: m
    rate_limit: {unit: month, requests_per_unit: 30}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 365}
`, entries: []Entry{{"m", "x"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 30, Period: 30 * 24 * time.Hour}, RequestsPerUnit: 30, Unit: UnitMonth}},
		{name: "YAML 1.1 bools", src: `
domain: d
descriptors:
  - key: k
    shadow_mode: yes
    rate_limit: {unit: second, requests_per_unit: 1}
`, entries: []Entry{{"k", "v"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Second}, RequestsPerUnit: 1, Unit: UnitSecond, Shadow: true}},
		{name: "YAML 1.1 integers", src: `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 0x10}
  - key: j
    rate_limit: {unit: second, requests_per_unit: 010}
`, entries: []Entry{{"j", "v"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 8, Period: time.Second}, RequestsPerUnit: 8, Unit: UnitSecond}},
		{name: "a number or a date as a value keeps its text", src: `
domain: d
descriptors:
  - key: code
    value: 0x1F
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: day
    value: 2024-01-31
    rate_limit: {unit: second, requests_per_unit: 2}
`, entries: []Entry{{"code", "0x1F"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Second}, RequestsPerUnit: 1, Unit: UnitSecond}},
		{name: "unlimited with an invalid unit", src: `
domain: d
descriptors:
  - key: k
    rate_limit: {unlimited: true, unit: fortnight, requests_per_unit: 3}
`, entries: []Entry{{"k", "v"}}, found: true, want: Rule{Unlimited: true, RequestsPerUnit: 3}},
		{name: "empty rate_limit is no limit", src: `
domain: d
descriptors:
  - key: k
    rate_limit:
`, entries: []Entry{{"k", "v"}}, found: false},
		{name: "a known key where it means nothing", src: `
domain: d
unit: second
descriptors:
  - key: k
    requests_per_unit: 99
    rate_limit: {unit: second, requests_per_unit: 1, key: ignored}
`, entries: []Entry{{"k", "v"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Second}, RequestsPerUnit: 1, Unit: UnitSecond},
			wantWarnings: []string{
				"x.yaml:2: key 'unit' means nothing in a root and is ignored, as envoyproxy/ratelimit ignores it",
				"x.yaml:5: key 'requests_per_unit' means nothing in a descriptor and is ignored, as envoyproxy/ratelimit ignores it",
				"x.yaml:6: key 'key' means nothing in a rate limit and is ignored, as envoyproxy/ratelimit ignores it",
			}},
		{name: "a key given twice: the last wins", src: `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, requests_per_unit: 2}
`, entries: []Entry{{"k", "v"}}, found: true,
			want:         Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Second}, RequestsPerUnit: 2, Unit: UnitSecond},
			wantWarnings: []string{"x.yaml:4: key 'requests_per_unit' is given twice (also on line 4); the last one wins, as in envoyproxy/ratelimit"}},
		{name: "anchors and merge keys", src: `
domain: d
descriptors:
  - key: k
    rate_limit: &base {unit: hour, requests_per_unit: 4, name: base}
  - key: j
    rate_limit:
      <<: *base
      name: j
`, entries: []Entry{{"j", "v"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 4, Period: time.Hour}, RequestsPerUnit: 4, Unit: UnitHour, Name: "j"}},
		{name: "requests_per_unit 0", src: `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 0}
`, entries: []Entry{{"k", "v"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 0, Period: time.Second}, RequestsPerUnit: 0, Unit: UnitSecond}},
		{name: "no requests_per_unit is 0", src: `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second}
`, entries: []Entry{{"k", "v"}}, found: true,
			want: Rule{Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 0, Period: time.Second}, Unit: UnitSecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(t, tc.src)
			if err != nil {
				t.Fatal(err)
			}
			r, ok := c.Lookup("d", tc.entries)
			if ok != tc.found {
				t.Fatalf("found %v, want %v", ok, tc.found)
			}
			got := Rule{Limit: r.Limit, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit, Shadow: r.Shadow, Unlimited: r.Unlimited, Name: r.Name}
			if got.Limit != tc.want.Limit || got.RequestsPerUnit != tc.want.RequestsPerUnit || got.Unit != tc.want.Unit ||
				got.Shadow != tc.want.Shadow || got.Unlimited != tc.want.Unlimited || got.Name != tc.want.Name {
				t.Fatalf("rule %+v\nwant %+v", got, tc.want)
			}
			if w := c.Warnings(); strings.Join(w, "\n") != strings.Join(tc.wantWarnings, "\n") {
				t.Fatalf("warnings:\n%s\nwant\n%s", strings.Join(w, "\n"), strings.Join(tc.wantWarnings, "\n"))
			}
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: a\n")
	writeFile(t, filepath.Join(dir, "b.yml"), "domain: b\n")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "domain: hidden\n")
	writeFile(t, filepath.Join(dir, "notes.txt"), "not yaml: [\n")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "a,b" {
		t.Fatalf("domains %s, want a,b", got)
	}

	t.Run("same domain in two files", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "c.yaml"), "# again\ndomain: a\n")
		_, err := Load(dir)
		want := filepath.Join(dir, "c.yaml") + ":2: duplicate domain 'a' in config file (first in " + filepath.Join(dir, "a.yaml") + ":1)"
		if err == nil || err.Error() != want {
			t.Fatalf("error %v\nwant %s", err, want)
		}
	})

	t.Run("missing directory", func(t *testing.T) {
		if _, err := Load(filepath.Join(dir, "nope")); err == nil {
			t.Fatal("no error")
		}
	})

	t.Run("empty directory", func(t *testing.T) {
		c, err := Load(t.TempDir())
		if err != nil || len(c.Domains()) != 0 {
			t.Fatalf("%v, %v", c.Domains(), err)
		}
	})
}
