package policy

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

func TestParseLimits(t *testing.T) {
	set, err := Parse("p.yaml", []byte(`policies:
  search:
    limits:
      - name: burst
        algorithm: gcra
        rate: 10
        period: 1s
        burst: 4
      - name: daily
        algorithm: fixed_window
        limit: 1_000
        period: 1d
    on_failure: deny
`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := set.Lookup("search")
	want := engine.Policy{Name: "search", Prefix: "search:", OnFailure: engine.FailClosed, Limits: []engine.NamedLimit{
		{Name: "burst", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 4}},
		{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1000, Period: 24 * time.Hour}},
	}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}
}

// Each mistake in a policy's limits is one line naming the file, the
// line, the policy and the limit's field.
func TestParseLimitsErrors(t *testing.T) {
	const head = "policies:\n  api:\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"no limits", head + "    limits: []\n",
			`p.yaml:3: policy "api": field limits: no limits: give at least one`},
		{"limits not a list", head + "    limits: 5\n",
			`p.yaml:3: policy "api": field limits: expected a list of limits, each with a name, an algorithm and its numbers`},
		{"limit not a mapping", head + "    limits:\n      - gcra\n",
			`p.yaml:4: policy "api": field limits[0]: expected a mapping of fields (name, algorithm, rate, limit, period, burst, capacity, precision)`},
		{"duplicate names", head + "    limits:\n      - {name: a, algorithm: fixed, limit: 1, period: 1s}\n      - {name: a, algorithm: fixed, limit: 5, period: 1m}\n",
			`p.yaml:5: policy "api": field limits[1].name: "a" is also the name of the limit on line 4: each limit keeps its state under its name`},
		{"missing name", head + "    limits:\n      - {algorithm: fixed, limit: 1, period: 1s}\n",
			`p.yaml:4: policy "api": field limits[0].name: missing: each limit needs a name, which keys its state`},
		{"bad name", head + "    limits:\n      - {name: \"a:b\", algorithm: fixed, limit: 1, period: 1s}\n",
			`p.yaml:4: policy "api": field limits[0].name: "a:b" must be 1 to 64 letters, digits, _ or -`},
		{"concurrency inside limits", head + "    limits:\n      - {name: c, algorithm: concurrency, limit: 5}\n",
			`p.yaml:4: policy "api": field limits[0].algorithm: a concurrency limit cannot be one of a policy's limits: make it a policy of its own, used with RL.ACQUIRE`},
		{"concurrency with a rate field", head + "    algorithm: concurrency\n    limit: 5\n    lease_ttl: 10s\n    rate: 3\n",
			`p.yaml:6: policy "api": field rate: a concurrency policy takes no rate: it limits leases held at once (limit), not a rate over a period; its fields are algorithm, limit, lease_ttl, prefix, on_failure`},
		{"lease_ttl without a unit", head + "    algorithm: concurrency\n    limit: 5\n    lease_ttl: 30\n",
			`p.yaml:5: policy "api": field lease_ttl: "30" needs a unit: did you mean 30s (seconds) or 30ms (milliseconds)?`},
		{"limits beside a limit", head + "    algorithm: gcra\n    limits:\n      - {name: a, algorithm: fixed, limit: 1, period: 1s}\n",
			`p.yaml:3: policy "api": field algorithm: a policy with limits gives algorithm inside each limit, not beside them`},
		{"policy field inside a limit", head + "    limits:\n      - {name: a, algorithm: fixed, limit: 1, period: 1s, prefix: x}\n",
			`p.yaml:4: policy "api": field limits[0].prefix: belongs to the policy, not to one of its limits`},
		{"unknown field inside a limit", head + "    limits:\n      - {name: a, algorithm: fixed, limit: 1, period: 1s, burts: 2}\n",
			`p.yaml:4: policy "api": field limits[0].burts: unknown field: expected one of name, algorithm, rate, limit, period, burst, capacity, precision`},
		{"bad number inside a limit", head + "    limits:\n      - name: a\n        algorithm: fixed\n        limit: 0\n        period: 1s\n",
			`p.yaml:6: policy "api": field limits[0].limit: 0 must be between 1 and 1000000000000`},
		{"missing period inside a limit", head + "    limits:\n      - name: a\n        algorithm: fixed\n        limit: 3\n",
			`p.yaml:4: policy "api": field limits[0].period: missing: give a duration such as 1s, 1m, 1h or 1d`},
		{"too many limits", head + "    limits:\n" + repeatLimits(9),
			`p.yaml:12: policy "api": field limits: 9 limits: a policy holds at most 8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantParseError(t, tc.yaml, tc.want)
		})
	}
}

func repeatLimits(n int) string {
	s := ""
	for i := range n {
		s += "      - {name: l" + string(rune('0'+i)) + ", algorithm: fixed, limit: 1, period: 1s}\n"
	}
	return s
}
