package rlsconfig

import (
	"log/slog"
	"sort"
)

// Rules lists the peer's name (domain.key_value.key …, the rule's Label)
// of every configured rate_limit, sorted: what a reload compares to say
// which rules it takes away.
func (c *Config) Rules() []string {
	if c == nil {
		return nil
	}
	var out []string
	var walk func(n *node)
	walk = func(n *node) {
		if n.rule != nil {
			out = append(out, n.path)
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, d := range c.domains {
		walk(d.root)
	}
	sort.Strings(out)
	return out
}

// Removed is what next takes away from cur: the domains cur has and next
// has not, and the rules of the domains both have that next has not. A
// reload that removes what requests were limited by lifts those limits, so
// the watchers say so at warning level (a rule of a removed domain is
// named by its domain alone).
func Removed(cur, next *Config) (domains, rules []string) {
	if cur == nil {
		return nil, nil
	}
	for _, d := range cur.Domains() {
		if !next.HasDomain(d) {
			domains = append(domains, d)
		}
	}
	have := map[string]bool{}
	for _, r := range next.Rules() {
		have[r] = true
	}
	for _, r := range cur.Rules() {
		if !have[r] && next.HasDomain(cur.domainOf(r)) {
			rules = append(rules, r)
		}
	}
	return domains, rules
}

// domainOf is the domain a rule's name starts with. Domains may hold dots,
// so the name is matched against the configured domains, longest first.
func (c *Config) domainOf(rule string) string {
	best := ""
	for d := range c.domains {
		if len(d) > len(best) && len(rule) > len(d) && rule[:len(d)] == d && rule[len(d)] == '.' {
			best = d
		}
	}
	return best
}

// WarnRemoved logs, at warning level, the domains and rules that replacing
// cur by next takes away.
func WarnRemoved(log *slog.Logger, cur, next *Config) {
	domains, rules := Removed(cur, next)
	if len(domains) > 0 {
		log.Warn("rls config: domains removed; their requests are no longer limited", "domains", domains)
	}
	if len(rules) > 0 {
		log.Warn("rls config: rules removed; their descriptors are no longer limited by them", "rules", rules)
	}
}
