package rlsconfig

import "github.com/sluice-rl/sluice/engine"

// EachRule calls f with every configured rule by its Label (the
// descriptor's path, as Lookup's Rule carries it), with what decides it:
// its limit, and whether it is unlimited, refuses all
// (requests_per_unit 0) or runs in shadow mode. A replay of recorded
// decisions meets the proposed configuration's rules by their labels
// (package simulate).
func (c *Config) EachRule(f func(label string, limit engine.Limit, unlimited, refusesAll, shadow bool)) {
	if c == nil {
		return
	}
	var walk func(n *node)
	walk = func(n *node) {
		if r := n.rule; r != nil {
			f(n.path, r.limit, r.unlimited, !r.unlimited && r.limit.Rate == 0, r.shadow)
		}
		for _, child := range n.children {
			walk(child)
		}
	}
	for _, d := range c.domains {
		walk(d.root)
	}
}
