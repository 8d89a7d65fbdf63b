package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

func TestLoadExample(t *testing.T) {
	set, err := Load(filepath.Join("testdata", "policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]engine.Policy{
		"api":      {Name: "api", Prefix: "api:", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 100, Period: time.Minute, Burst: 20}},
		"login":    {Name: "login", Prefix: "login:", Limit: engine.Limit{Algorithm: engine.SlidingLog, Rate: 5, Period: 15 * time.Minute}},
		"search":   {Name: "search", Prefix: "search:", Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 1000, Period: time.Hour}},
		"reports":  {Name: "reports", Prefix: "reports:", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: 24 * time.Hour}},
		"uploads":  {Name: "uploads", Prefix: "up/", OnFailure: engine.FailClosed, Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 50}},
		"webhooks": {Name: "webhooks", Prefix: "webhooks:", Limit: engine.Limit{Algorithm: engine.LeakyBucket, Rate: 5, Period: time.Second, Burst: 20}},
	}
	if set.Len() != len(want) {
		t.Errorf("Len = %d, want %d (%v)", set.Len(), len(want), set.Names())
	}
	for name, w := range want {
		got, ok := set.Lookup(name)
		if !ok || !reflect.DeepEqual(got, w) {
			t.Errorf("Lookup(%q) = %+v, %v; want %+v", name, got, ok, w)
		}
	}
	if _, ok := set.Lookup("nosuch"); ok {
		t.Error("Lookup(nosuch) found something")
	}
	var nilSet *Set
	if _, ok := nilSet.Lookup("api"); ok {
		t.Error("a nil Set found something")
	}
}

// Each failure mode gets its own fixture and its exact message: the file,
// the line, the policy and the field.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty file", "", `p.yaml:1: empty file: expected a top-level key "policies"`},
		{"not yaml", "policies: [\n", `p.yaml:1: did not find expected node content`},
		{"top level is a list", "- a\n", `p.yaml:1: expected a mapping with the key "policies"`},
		{"unknown top-level key", "policy:\n  a: {}\n", `p.yaml:1: unknown key "policy": expected "policies"`},
		{"policies is a list", "policies:\n  - api\n", `p.yaml:2: "policies" must map policy names to policies`},
		{"policy is a string", "policies:\n  api: gcra\n", `p.yaml:2: policy "api": expected a mapping of fields (algorithm, rate, limit, period, burst, capacity, precision, prefix, on_failure, shadow, durable, lease_ttl, limits)`},
		{"bad name", "policies:\n  \"a b\":\n    algorithm: gcra\n", `p.yaml:2: policy "a b": a name must be 1 to 128 letters, digits or _ - . :`},
		{"defined twice", "policies:\n  a: {algorithm: fixed, limit: 1, period: 1s}\n  a: {algorithm: fixed, limit: 1, period: 1s}\n",
			`p.yaml:3: policy "a": defined twice`},
		{"unknown field", "policies:\n  api:\n    algorithm: gcra\n    rate: 10\n    period: 1s\n    burts: 5\n",
			`p.yaml:6: policy "api": field burts: unknown field: expected one of algorithm, rate, limit, period, burst, capacity, precision, prefix, on_failure, shadow, durable, lease_ttl, limits`},
		{"field twice", "policies:\n  api:\n    rate: 10\n    rate: 11\n", `p.yaml:4: policy "api": field rate: given twice`},
		{"field is a list", "policies:\n  api:\n    rate: [1]\n", `p.yaml:3: policy "api": field rate: expected a single value`},
		{"rate and limit", "policies:\n  api:\n    algorithm: fixed\n    rate: 10\n    limit: 10\n    period: 1s\n",
			`p.yaml:5: policy "api": field limit: is another name for rate: give one of them`},
		{"missing algorithm", "policies:\n  api:\n    rate: 10\n", `p.yaml:2: policy "api": field algorithm: missing: give one of fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket, gcra, concurrency`},
		{"unknown algorithm", "policies:\n  api:\n    algorithm: bucket\n", `p.yaml:3: policy "api": field algorithm: "bucket" must be one of fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra, concurrency`},
		{"rate not a number", "policies:\n  api:\n    algorithm: gcra\n    rate: lots\n", `p.yaml:4: policy "api": field rate: "lots" is not a whole number`},
		{"rate a fraction", "policies:\n  api:\n    algorithm: gcra\n    rate: 1.5\n", `p.yaml:4: policy "api": field rate: "1.5" is not a whole number`},
		{"missing rate", "policies:\n  api:\n    algorithm: gcra\n    period: 1s\n", `p.yaml:2: policy "api": field rate: missing: how many units a period admits (rate, or limit)`},
		{"missing period", "policies:\n  api:\n    algorithm: gcra\n    rate: 1\n", `p.yaml:2: policy "api": field period: missing: give a duration such as 1s, 1m, 1h or 1d`},
		{"bare period", "policies:\n  api:\n    algorithm: gcra\n    rate: 1\n    period: 60\n",
			`p.yaml:5: policy "api": field period: "60" needs a unit: did you mean 60s (seconds) or 60ms (milliseconds)?`},
		{"bad period", "policies:\n  api:\n    algorithm: gcra\n    rate: 1\n    period: soon\n",
			`p.yaml:5: policy "api": field period: "soon" must be a duration with a unit, such as 500ms, 1s, 1m, 1h, 1d or 1h30m`},
		{"period too short", "policies:\n  api:\n    algorithm: gcra\n    rate: 1\n    period: 1us\n",
			`p.yaml:5: policy "api": field period: "1us" must be between 1ms and 3650d`},
		{"rate zero", "policies:\n  api:\n    algorithm: fixed\n    limit: 0\n    period: 1s\n",
			`p.yaml:4: policy "api": field limit: 0 must be between 1 and 1000000000000`},
		{"burst on a window", "policies:\n  api:\n    algorithm: fixed\n    limit: 5\n    period: 1s\n    burst: 2\n",
			`p.yaml:6: policy "api": field burst: 2 the fixed_window algorithm takes no burst`},
		{"token bucket without capacity", "policies:\n  up:\n    algorithm: token\n    rate: 5\n    period: 1s\n",
			`p.yaml:2: policy "up": field capacity: missing: it must be between 1 and 1000000000000`},
		{"capacity under its other name", "policies:\n  up:\n    algorithm: token\n    rate: 5\n    period: 1s\n    burst: -1\n",
			`p.yaml:6: policy "up": field burst: -1 must be between 1 and 1000000000000`},
		{"bad on_failure", "policies:\n  api:\n    algorithm: gcra\n    rate: 1\n    period: 1s\n    on_failure: maybe\n",
			`p.yaml:6: policy "api": field on_failure: "maybe" must be allow, deny or local`},
		{"policies twice", "policies:\n  a: {algorithm: fixed, limit: 1, period: 1s}\npolicies:\n  b: {algorithm: fixed, limit: 1, period: 1s}\n",
			`p.yaml:3: key "policies" given twice: the second would silently replace the first`},
		{"same prefix given twice", "policies:\n  a:\n    algorithm: fixed\n    limit: 1\n    period: 1s\n    prefix: \"x:\"\n  b:\n    algorithm: fixed\n    limit: 2\n    period: 1s\n    prefix: \"x:\"\n",
			`p.yaml:11: policy "b": field prefix: "x:" is also the prefix of policy "a" (line 6): the two would share state`},
		{"prefix equal to another's default", "policies:\n  a: {algorithm: fixed, limit: 1, period: 1s}\n  b: {algorithm: fixed, limit: 2, period: 1s, prefix: \"a:\"}\n",
			`p.yaml:3: policy "b": field prefix: "a:" is also the prefix of policy "a" (line 2): the two would share state`},
		// Issue 28's probes: a default prefix that starts another's.
		{"name with a colon under another's default", "policies:\n  t: {algorithm: fixed, limit: 2, period: 1h}\n  \"t:u\": {algorithm: fixed, limit: 2, period: 1h}\n",
			`p.yaml:3: policy "t:u": field prefix: "t:u:" and "t:", the prefix of policy "t" (line 2), could address the same state: key "u:x" of policy "t" is key "x" of policy "t:u" (t:u:x); give one a prefix that does not start the other`},
		{"given prefix that starts another's", "policies:\n  a: {algorithm: fixed, limit: 2, period: 1h, prefix: xy}\n  b: {algorithm: fixed, limit: 2, period: 1h, prefix: x}\n",
			`p.yaml:3: policy "b": field prefix: "x" and "xy", the prefix of policy "a" (line 2), could address the same state: key "yx" of policy "b" is key "x" of policy "a" (xyx); give one a prefix that does not start the other`},
		{"the earliest meeting in the file is blamed", "policies:\n  a: {algorithm: fixed, limit: 2, period: 1h, prefix: p}\n  b: {algorithm: fixed, limit: 2, period: 1h, prefix: q}\n  c: {algorithm: fixed, limit: 2, period: 1h, prefix: qq}\n  d: {algorithm: fixed, limit: 2, period: 1h, prefix: pp}\n",
			`p.yaml:4: policy "c": field prefix: "qq" and "q", the prefix of policy "b" (line 3), could address the same state: key "qx" of policy "b" is key "x" of policy "c" (qqx); give one a prefix that does not start the other`},
		{"empty name", "policies:\n  \"\": {algorithm: fixed, limit: 2, period: 1h}\n", `p.yaml:2: a name must be 1 to 128 letters, digits or _ - . :`},
		{"empty prefix", "policies:\n  a:\n    algorithm: fixed\n    limit: 1\n    period: 1s\n    prefix: \"\"\n",
			`p.yaml:6: policy "a": field prefix: must not be empty: the policy's keys would be the keys of inline commands (RL.GCRA key …)`},
		{"rate too fast", "policies:\n  api:\n    algorithm: gcra\n    rate: 2000000\n    period: 1s\n",
			`p.yaml:4: policy "api": field rate: 2000000 more than one per microsecond over period 1s`},
		{"precision zero", "policies:\n  s:\n    algorithm: sliding\n    limit: 5\n    period: 1s\n    precision: 0\n",
			`p.yaml:6: policy "s": field precision: 0 must be between 1 and 100`},
		{"precision too fine", "policies:\n  s:\n    algorithm: sliding\n    limit: 5\n    period: 1s\n    precision: 101\n",
			`p.yaml:6: policy "s": field precision: 101 must be between 1 and 100`},
		{"precision not dividing the period", "policies:\n  s:\n    algorithm: sliding\n    limit: 5\n    period: 1s\n    precision: 3\n",
			`p.yaml:6: policy "s": field precision: 3 must split period 1s into sub-windows of whole microseconds`},
		{"precision on a bucket", "policies:\n  t:\n    algorithm: token\n    rate: 5\n    capacity: 5\n    period: 1s\n    precision: 4\n",
			`p.yaml:7: policy "t": field precision: 4 the token_bucket algorithm takes no precision`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantParseError(t, tc.yaml, tc.want)
		})
	}
}

// precision: n splits a sliding window policy into n sub-windows.
func TestParsePrecision(t *testing.T) {
	set, err := Parse("p.yaml", []byte("policies:\n  s:\n    algorithm: sliding_window\n    limit: 50\n    period: 1s\n    precision: 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := set.Lookup("s")
	want := engine.Limit{Algorithm: engine.SlidingWindow, Rate: 50, Period: time.Second, Precision: 10}
	if p.Limit != want {
		t.Errorf("limit %+v; want %+v", p.Limit, want)
	}
}

func TestParseEmptyPolicies(t *testing.T) {
	set, err := Parse("p.yaml", []byte("policies:\n"))
	if err != nil || set.Len() != 0 {
		t.Fatalf("Parse = %v, %v", set, err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "none.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("Load = %v", err)
	}
}

func TestLiveReplace(t *testing.T) {
	a, err := Parse("a.yaml", []byte("policies:\n  one: {algorithm: fixed, limit: 1, period: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b.yaml", []byte("policies:\n  two: {algorithm: fixed, limit: 2, period: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := NewLive(a)
	if _, ok := l.Lookup("one"); !ok {
		t.Error("one missing before Replace")
	}
	l.Replace(b)
	if _, ok := l.Lookup("one"); ok {
		t.Error("one still there after Replace")
	}
	if p, ok := l.Lookup("two"); !ok || p.Limit.Rate != 2 || l.Current() != b {
		t.Errorf("two = %+v, %v", p, ok)
	}
}

func TestShadow(t *testing.T) {
	set, err := Parse("p.yaml", []byte("policies:\n  api:\n    algorithm: gcra\n    rate: 1\n    period: 1s\n    shadow: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := set.Lookup("api"); !p.Shadow {
		t.Fatalf("shadow: true parsed as %+v", p)
	}
	_, err = Parse("p.yaml", []byte("policies:\n  api:\n    algorithm: gcra\n    rate: 1\n    period: 1s\n    shadow: maybe\n"))
	if err == nil || err.Error() != `p.yaml:6: policy "api": field shadow: "maybe" must be true or false` {
		t.Fatalf("shadow: maybe gave %v", err)
	}
}

// wantParseError checks that Parse refuses yaml, as p.yaml, with exactly
// want.
func wantParseError(t *testing.T, yaml, want string) {
	t.Helper()
	_, err := Parse("p.yaml", []byte(yaml))
	if err == nil {
		t.Fatal("no error")
	}
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
}

// The log lines name a few policies, not every one of thousands.
func TestLogNames(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{2, []string{"p00000", "p00001"}},
		{10, []string{"p00000", "p00001", "p00002", "p00003", "p00004", "p00005", "p00006", "p00007", "p00008", "p00009"}},
		{20000, []string{"p00000", "p00001", "p00002", "p00003", "p00004", "p00005", "p00006", "p00007", "p00008", "p00009", "… 19990 more"}},
	} {
		var yaml strings.Builder
		yaml.WriteString("policies:\n")
		for i := range tc.n {
			fmt.Fprintf(&yaml, "  p%05d: {algorithm: gcra, rate: 1, period: 1s}\n", i)
		}
		set, err := Parse("policies.yaml", []byte(yaml.String()))
		if err != nil {
			t.Fatal(err)
		}
		if got := set.LogNames(); !slices.Equal(got, tc.want) {
			t.Errorf("%d policies: LogNames = %q; want %q", tc.n, got, tc.want)
		}
	}
}

func TestDurable(t *testing.T) {
	head := "policies:\n  api:\n    algorithm: gcra\n    rate: 1\n    period: 1s\n"
	for _, tc := range []struct {
		value string
		want  engine.Durability
		err   string
	}{
		{"", engine.DurableNone, ""},
		{"    durable: true\n", engine.DurableReplica, ""},
		{"    durable: false\n", engine.DurableNone, ""},
		{"    durable: replica\n", engine.DurableReplica, ""},
		{"    durable: disk\n", engine.DurableDisk, ""},
		{"    durable: always\n", 0, `p.yaml:6: policy "api": field durable: "always" must be true, false, replica or disk`},
	} {
		set, err := Parse("p.yaml", []byte(head+tc.value))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: got %v, want %s", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.value, err)
		}
		if p, _ := set.Lookup("api"); p.Durable != tc.want {
			t.Errorf("%q: Durable %v, want %v", tc.value, p.Durable, tc.want)
		}
	}
	// A multi-limit policy is durable as a whole: one call decides it.
	set, err := Parse("p.yaml", []byte("policies:\n  api:\n    durable: true\n    limits:\n      - name: a\n        algorithm: gcra\n        rate: 1\n        period: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := set.Lookup("api"); p.Durable != engine.DurableReplica {
		t.Errorf("multi-limit: Durable %v", p.Durable)
	}
	// A concurrency policy's leases are not decisions of the batch script.
	wantParseError(t, "policies:\n  jobs:\n    algorithm: concurrency\n    limit: 1\n    lease_ttl: 1s\n    durable: true\n",
		`p.yaml:6: policy "jobs": field durable: a concurrency policy takes no durable; its fields are algorithm, limit, lease_ttl, prefix, on_failure`)
}
