package policy

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

func TestConcurrencyPolicy(t *testing.T) {
	set, err := Parse("p.yaml", []byte("policies:\n  jobs:\n    algorithm: concurrency\n    limit: 10\n    lease_ttl: 30s\n    on_failure: deny\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := set.Lookup("jobs")
	want := engine.Policy{Name: "jobs", Prefix: "jobs:", OnFailure: engine.FailClosed,
		Concurrency: engine.Concurrency{Limit: 10, TTL: 30 * time.Second}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got %+v, want %+v", p, want)
	}
}

// Each mistake in a concurrency policy is one line naming its field.
func TestConcurrencyPolicyErrors(t *testing.T) {
	const head = "policies:\n  jobs:\n    algorithm: concurrency\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"a rate field", head + "    limit: 10\n    lease_ttl: 30s\n    rate: 5\n",
			`p.yaml:6: policy "jobs": field rate: a concurrency policy takes no rate: it limits leases held at once (limit), not a rate over a period; its fields are algorithm, limit, lease_ttl, prefix, on_failure`},
		{"a period field", head + "    limit: 10\n    period: 1s\n    lease_ttl: 30s\n",
			`p.yaml:5: policy "jobs": field period: a concurrency policy takes no period: it limits leases held at once (limit), not a rate over a period; its fields are algorithm, limit, lease_ttl, prefix, on_failure`},
		{"a burst field", head + "    limit: 10\n    lease_ttl: 30s\n    burst: 2\n",
			`p.yaml:6: policy "jobs": field burst: a concurrency policy takes no burst; its fields are algorithm, limit, lease_ttl, prefix, on_failure`},
		{"shadow", head + "    limit: 10\n    lease_ttl: 30s\n    shadow: true\n",
			`p.yaml:6: policy "jobs": field shadow: a concurrency policy takes no shadow; its fields are algorithm, limit, lease_ttl, prefix, on_failure`},
		{"lease_ttl without a unit", head + "    limit: 10\n    lease_ttl: 30\n",
			`p.yaml:5: policy "jobs": field lease_ttl: "30" needs a unit: did you mean 30s (seconds) or 30ms (milliseconds)?`},
		{"missing lease_ttl", head + "    limit: 10\n",
			`p.yaml:2: policy "jobs": field lease_ttl: missing: how long a lease not released is held, such as 30s`},
		{"missing limit", head + "    lease_ttl: 30s\n",
			`p.yaml:2: policy "jobs": field limit: missing: the most leases of a key held at once`},
		{"limit zero", head + "    limit: 0\n    lease_ttl: 30s\n",
			`p.yaml:4: policy "jobs": field limit: 0 must be between 1 and 100000`},
		{"lease_ttl on a rate policy", "policies:\n  api:\n    algorithm: gcra\n    rate: 1\n    period: 1s\n    lease_ttl: 5s\n",
			`p.yaml:6: policy "api": field lease_ttl: only a concurrency policy (algorithm: concurrency) takes a lease_ttl`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantParseError(t, tc.yaml, tc.want)
		})
	}
}
