package service

import (
	"sync/atomic"

	"github.com/sluice-rl/sluice/engine"
)

type atomicCount = atomic.Uint64

// CountError counts one error reply of kind. The service counts the
// errors it finds itself; a door counts those it answers before a request
// reaches the service (a frame or an argument it cannot parse).
func (s *Service) CountError(kind ErrorKind) { s.errors[kind].Add(1) }

// Totals are the service's counters summed, for INFO.
type Totals struct {
	Outcomes [numOutcomes]uint64 // by Outcome
	Paths    [8]uint64           // by engine.Path
	Errors   uint64              // error replies of every kind
}

// Totals sums the counters so far.
func (s *Service) Totals() Totals {
	var t Totals
	s.decisions.each(func(_ string, _ engine.Algorithm, o Outcome, p engine.Path, n uint64) {
		t.Outcomes[o] += n
		if int(p) < len(t.Paths) {
			t.Paths[p] += n
		}
	})
	for i := range s.errors {
		t.Errors += s.errors[i].Load()
	}
	return t
}

// EachDecision calls f with every non-zero decision counter: the policy
// (Inline for the inline commands), algorithm, outcome and path. For
// metrics, read when scraped.
func (s *Service) EachDecision(f func(policy string, alg engine.Algorithm, outcome Outcome, path engine.Path, n uint64)) {
	s.decisions.each(f)
}

// EachError calls f with each error kind's count.
func (s *Service) EachError(f func(kind ErrorKind, n uint64)) {
	for k := range numErrorKinds {
		if n := s.errors[k].Load(); n > 0 {
			f(k, n)
		}
	}
}
