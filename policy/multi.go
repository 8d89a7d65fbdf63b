package policy

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/engine"
)

// A policy may hold several limits instead of one, each named, all of
// which must admit a request:
//
//	search:
//	  limits:
//	    - name: burst          # letters, digits, _ or -; its state's key
//	      algorithm: gcra
//	      rate: 10
//	      period: 1s
//	      burst: 5
//	    - name: daily
//	      algorithm: fixed_window
//	      limit: 1000
//	      period: 1d
//	  prefix: "s:"             # as for any policy; on_failure and shadow too
//
// Each limit takes the fields of a one-limit policy's limit (limitFields)
// and nothing else: prefix, on_failure and shadow belong to the policy.
// Rate limits only: a concurrency limit counts leases, with commands of
// its own, so it is a policy of its own.

// parseLimits reads a policy's limits: a non-empty list of at most
// engine.MaxLimits mappings, with names given once each.
func parseLimits(node *yaml.Node, fail func(line int, field, msg string) error) ([]engine.NamedLimit, error) {
	if node.Kind != yaml.SequenceNode {
		return nil, fail(node.Line, "limits", "expected a list of limits, each with a name, an algorithm and its numbers")
	}
	if len(node.Content) == 0 {
		return nil, fail(node.Line, "limits", "no limits: give at least one")
	}
	if len(node.Content) > engine.MaxLimits {
		return nil, fail(node.Content[engine.MaxLimits].Line, "limits",
			fmt.Sprintf("%d limits: a policy holds at most %d", len(node.Content), engine.MaxLimits))
	}
	allowed := append([]string{"name"}, limitFields...)
	var out []engine.NamedLimit
	names := map[string]int{} // name → line
	for i, item := range node.Content {
		where := fmt.Sprintf("limits[%d]", i)
		at := func(line int, field, msg string) error {
			if field == "" {
				return fail(line, where, msg)
			}
			return fail(line, where+"."+field, msg)
		}
		if item.Kind != yaml.MappingNode {
			return nil, at(item.Line, "", "expected a mapping of fields ("+strings.Join(allowed, ", ")+")")
		}
		seen := map[string]*yaml.Node{}
		for k := 0; k+1 < len(item.Content); k += 2 {
			f, v := item.Content[k], item.Content[k+1]
			if !slices.Contains(allowed, f.Value) {
				why := "unknown field: expected one of " + strings.Join(allowed, ", ")
				if slices.Contains(fields, f.Value) {
					why = "belongs to the policy, not to one of its limits"
				}
				return nil, at(f.Line, f.Value, why)
			}
			if _, dup := seen[f.Value]; dup {
				return nil, at(f.Line, f.Value, "given twice")
			}
			if v.Kind != yaml.ScalarNode {
				return nil, at(v.Line, f.Value, "expected a single value")
			}
			seen[f.Value] = v
		}
		if a := seen["algorithm"]; a != nil && isConcurrency(a.Value) {
			return nil, at(a.Line, "algorithm", "a concurrency limit cannot be one of a policy's limits: make it a policy of its own, used with RL.ACQUIRE")
		}
		n := seen["name"]
		if n == nil {
			return nil, at(item.Line, "name", "missing: each limit needs a name, which keys its state")
		}
		if err := engine.ValidateLimitName(n.Value); err != nil {
			return nil, at(n.Line, "name", fmt.Sprintf("%q must be 1 to %d letters, digits, _ or -", n.Value, engine.MaxLimitName))
		}
		if line, dup := names[n.Value]; dup {
			return nil, at(n.Line, "name", fmt.Sprintf("%q is also the name of the limit on line %d: each limit keeps its state under its name", n.Value, line))
		}
		names[n.Value] = n.Line
		l, err := parseLimit(item, seen, at)
		if err != nil {
			return nil, err
		}
		out = append(out, engine.NamedLimit{Name: n.Value, Limit: l})
	}
	return out, nil
}
