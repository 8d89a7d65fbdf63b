package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/engine"
)

// A concurrency policy counts leases in flight rather than a rate:
//
//	uploads:
//	  algorithm: concurrency
//	  limit: 10        # the most leases of a key held at once
//	  lease_ttl: 30s   # a lease not released ends by itself after this
//	  prefix: "up:"    # as for any policy; on_failure too
//
// Clients use it with RL.ACQUIRE and RL.RELEASE. The rate fields mean
// nothing here, so each is refused by name rather than ignored.

// concurrencyFields are the fields a concurrency policy takes.
var concurrencyFields = []string{"algorithm", "limit", "lease_ttl", "prefix", "on_failure"}

// isConcurrency reports whether an algorithm field names the concurrency
// limiter.
func isConcurrency(alg string) bool { return strings.EqualFold(alg, "concurrency") }

func parseConcurrency(p engine.Policy, key *yaml.Node, seen map[string]*yaml.Node,
	fail func(line int, field, msg string) error) (engine.Policy, error) {
	for _, f := range fields {
		if v := seen[f]; v != nil && !slices.Contains(concurrencyFields, f) {
			why := "a concurrency policy takes no " + f
			if f == "rate" || f == "period" {
				why += ": it limits leases held at once (limit), not a rate over a period"
			}
			return p, fail(v.Line, f, why+"; its fields are "+strings.Join(concurrencyFields, ", "))
		}
	}
	v := seen["limit"]
	if v == nil {
		return p, fail(key.Line, "limit", "missing: the most leases of a key held at once")
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(v.Value, "_", ""), 10, 64)
	if err != nil || (v.Tag != "!!int" && v.Tag != "!!str") {
		return p, fail(v.Line, "limit", fmt.Sprintf("%q is not a whole number", v.Value))
	}
	if n < 1 || n > engine.MaxLeases {
		return p, fail(v.Line, "limit", fmt.Sprintf("%d must be between 1 and %d", n, engine.MaxLeases))
	}
	t := seen["lease_ttl"]
	if t == nil {
		return p, fail(key.Line, "lease_ttl", "missing: how long a lease not released is held, such as 30s")
	}
	ttl, why := engine.ParsePeriod(t.Value)
	if why != "" {
		return p, fail(t.Line, "lease_ttl", fmt.Sprintf("%q %s", t.Value, why))
	}
	p.Concurrency = engine.Concurrency{Limit: n, TTL: ttl}
	if err := sharedFields(&p, seen, fail); err != nil {
		return p, err
	}
	return p, nil
}
