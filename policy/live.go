package policy

import (
	"sync/atomic"

	"github.com/sluice-rl/sluice/engine"
)

// Live holds the current Set and lets it be replaced while connections use
// it, so that a reloaded file takes effect without a restart and without
// dropping a connection. A request sees the old set or the new, never a mix.
type Live struct {
	cur atomic.Pointer[Set]
}

var _ engine.Policies = (*Live)(nil)

// NewLive starts with s.
func NewLive(s *Set) *Live {
	l := &Live{}
	l.cur.Store(s)
	return l
}

// Lookup implements engine.Policies.
func (l *Live) Lookup(name string) (engine.Policy, bool) { return l.cur.Load().Lookup(name) }

// Replace makes s the current set.
func (l *Live) Replace(s *Set) { l.cur.Store(s) }

// Current is the set in use.
func (l *Live) Current() *Set { return l.cur.Load() }
