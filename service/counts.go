package service

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

const numAlgorithms = int(engine.PeerWindow) + 1

// numPaths is how many engine.Paths there are: the last one's index, plus one.
const numPaths = int(engine.PathGrant) + 1

// counts holds one policy's decision counters. Fixed arrays keep recording
// to one atomic add: no map, no label strings, no allocation.
type counts [numAlgorithms][numOutcomes][numPaths]atomic.Uint64

// Inline is the policy label of decisions made by the inline commands
// (RL.GCRA, CL.THROTTLE, …) rather than through a named policy.
const Inline = "inline"

// decisions counts decisions by policy, algorithm, outcome and path. Policy
// names come from the policies file, never from a client, so the label set
// stays bounded whatever the traffic. add is safe for concurrent use and
// allocates only the first time it sees a policy.
type decisions struct {
	byPolicy registry[counts]
	inline   atomic.Pointer[counts] // byPolicy's Inline entry: most decisions, no map lookup
}

// add counts n decisions alike.
func (d *decisions) add(policy string, alg engine.Algorithm, outcome Outcome, path engine.Path, n uint64) {
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
func (d *decisions) each(f func(policy string, alg engine.Algorithm, outcome Outcome, path engine.Path, n uint64)) {
	d.byPolicy.each(func(policy string, c *counts) {
		for _, alg := range engine.Counted {
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

// ErrorKind is why a client got an error reply instead of a decision.
type ErrorKind uint8

// The error kinds.
const (
	// ErrRequest: the client's input was refused (a door's parse error,
	// an unknown policy, a parameter out of bounds).
	ErrRequest ErrorKind = iota
	// ErrStore: the store could not decide (only when the failure mode
	// does not answer instead).
	ErrStore
	numErrorKinds
)

var errorKindNames = [numErrorKinds]string{"request", "store"}

func (k ErrorKind) String() string { return errorKindNames[k] }

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

// tally counts a batch's decisions in runs of alike ones, so that a batch
// adds to the shared counters once per run rather than once per decision:
// they are contended by every door and connection.
type tally struct {
	run decided
	n   uint64
}

// decided is what the counters learn of a decision.
type decided struct {
	policy  string
	alg     engine.Algorithm
	outcome Outcome
	path    engine.Path
}

func (t *tally) add(d *decisions, one decided) {
	if t.n > 0 && one != t.run {
		t.flush(d)
	}
	t.run = one
	t.n++
}

func (t *tally) flush(d *decisions) {
	if t.n > 0 {
		d.add(t.run.policy, t.run.alg, t.run.outcome, t.run.path, t.n)
		t.n = 0
	}
}
