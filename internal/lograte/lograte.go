// Package lograte says a warning that repeats at most once an interval,
// with how many times it went unsaid meanwhile: under a flood, a line a
// connection would be thousands of lines a second, each a write to the
// log under its lock, from the very goroutines (an event loop among them)
// that the flood already keeps busy.
package lograte

import (
	"sync/atomic"
	"time"
)

// Limiter is one repeated warning's pace. The zero value is not ready:
// use New. Its methods are safe for concurrent use.
type Limiter struct {
	every  time.Duration
	next   atomic.Int64 // when the warning may be said again, in ns since the epoch
	unsaid atomic.Int64 // times it was not said since it last was
}

// New is a limiter that lets the warning be said once every.
func New(every time.Duration) *Limiter { return &Limiter{every: every} }

// Allow reports whether the warning may be said now; when it may, unsaid
// is how many times it was not since it last was, for the line to say.
func (l *Limiter) Allow(now time.Time) (unsaid int64, ok bool) {
	t := now.UnixNano()
	next := l.next.Load()
	if t < next || !l.next.CompareAndSwap(next, t+int64(l.every)) {
		l.unsaid.Add(1)
		return 0, false
	}
	return l.unsaid.Swap(0), true
}
