package telemetry

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluice-rl/sluice/engine"
)

// Outcome is what a decision told the client.
type Outcome uint8

// The outcomes. Shadow is a refusal that a shadow-mode policy turned into an
// admission: counted apart, so that operators see what enforcing would do.
const (
	Allowed Outcome = iota
	Refused
	Shadow
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "refused", "shadow"}

func (o Outcome) String() string { return outcomeNames[o] }

const numAlgorithms = int(engine.GCRA) + 1

// counts holds one policy's decision counters. Fixed arrays keep recording
// to one atomic add: no map, no label strings, no allocation.
type counts [numAlgorithms][numOutcomes][5]atomic.Uint64

// Inline is the policy label of decisions made by the inline commands
// (RL.GCRA, CL.THROTTLE, …) rather than through a named policy.
const Inline = "inline"

// Decisions counts decisions by policy, algorithm, outcome and path. Policy
// names come from the policies file, never from a client, so the label set
// stays bounded whatever the traffic. Add is safe for concurrent use and
// allocates only the first time it sees a policy.
type Decisions struct {
	byPolicy registry[counts]
	inline   atomic.Pointer[counts] // byPolicy's Inline entry: most decisions, no map lookup
}

// Add counts n decisions alike.
func (d *Decisions) Add(policy string, alg engine.Algorithm, outcome Outcome, path engine.Path, n uint64) {
	if int(alg) >= numAlgorithms || outcome >= numOutcomes || int(path) >= len(engine.Paths) {
		return
	}
	var c *counts
	if policy == Inline {
		if c = d.inline.Load(); c == nil {
			c = d.byPolicy.get(Inline)
			d.inline.Store(c)
		}
	} else {
		c = d.byPolicy.get(policy)
	}
	c[alg][outcome][path].Add(n)
}

// each calls f for every non-zero counter.
func (d *Decisions) each(f func(policy string, alg engine.Algorithm, outcome Outcome, path engine.Path, n uint64)) {
	d.byPolicy.each(func(policy string, c *counts) {
		for _, alg := range engine.Algorithms {
			for o := range numOutcomes {
				for _, p := range engine.Paths {
					if n := c[alg][o][p].Load(); n > 0 {
						f(policy, alg, o, p, n)
					}
				}
			}
		}
	})
}

// Total returns the count of one combination, for INFO and tests.
func (d *Decisions) Total(policy string, alg engine.Algorithm, outcome Outcome, path engine.Path) uint64 {
	var n uint64
	d.byPolicy.each(func(p string, c *counts) {
		if p == policy {
			n = c[alg][outcome][path].Load()
		}
	})
	return n
}

// Errors counts errors replied to clients, by kind. Kinds are a small set
// chosen by the server ("invalid_argument", "upstream", …), never input.
type Errors struct {
	byKind registry[atomic.Uint64]
}

// Record counts one error of kind.
func (e *Errors) Record(kind string) { e.byKind.get(kind).Add(1) }

func (e *Errors) each(f func(kind string, n uint64)) {
	e.byKind.each(func(k string, c *atomic.Uint64) { f(k, c.Load()) })
}

// registry maps names to counters. Reads take no lock: the map is replaced,
// never changed, when a name is added, which happens a handful of times in
// a process's life.
type registry[V any] struct {
	mu sync.Mutex // serialises adding names
	m  atomic.Pointer[map[string]*V]
}

func (r *registry[V]) get(name string) *V {
	if m := r.m.Load(); m != nil {
		if v, ok := (*m)[name]; ok {
			return v
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.m.Load()
	next := make(map[string]*V)
	if old != nil {
		if v, ok := (*old)[name]; ok {
			return v
		}
		maps.Copy(next, *old)
	}
	v := new(V)
	next[strings.Clone(name)] = v // the caller's name may alias a buffer it reuses
	r.m.Store(&next)
	return v
}

func (r *registry[V]) each(f func(string, *V)) {
	if m := r.m.Load(); m != nil {
		for k, v := range *m {
			f(k, v)
		}
	}
}
