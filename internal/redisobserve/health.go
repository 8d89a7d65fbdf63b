package redisobserve

import (
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// Reachability. The Observer keeps whether the upstream can be used now,
// since when, and why not: from the store's checks (Check, at start and
// while no round trip answers) and from the outcomes a caller reports (Observe:
// the breaker that opens and closes on round trips). INFO and the
// metrics show it; readiness follows it with --upstream-required. Each
// change is one log line; a failure that repeats with the same cause is
// counted, and said again at most once a warnEvery (warner).

// Reach is the upstream's state as the Observer last saw it.
type Reach struct {
	// Known is false until the first outcome.
	Known bool
	// Up is true while the upstream answers.
	Up bool
	// Since is when Up last changed (or the first outcome).
	Since time.Time
	// Cause and Err are the last failure's, kept after recovery.
	Cause Cause
	Err   string
	// Failures counts the failures seen, by cause, since start.
	Failures map[Cause]uint64
}

type reach struct {
	up atomic.Bool // the fast path of a healthy store: nothing to record
	mu sync.Mutex
	st Reach // guarded by mu
}

// Observe records an outcome of the upstream that a caller saw: nil when
// it answered, else why it failed (the breaker's opening cause). It is
// cheap while the upstream is up and answers, and never blocks on Redis.
func (o *Observer) Observe(err error) {
	if err == nil && o.reach.up.Load() {
		return
	}
	if err != nil {
		if _, ok := err.(*Error); !ok {
			err = &Error{Cause: CauseOf(err), Err: err}
		}
	}
	o.observe(err)
}

// observe records an outcome whose error, if any, is an *Error, and logs
// what changed.
func (o *Observer) observe(err error) {
	now := o.now()
	r := &o.reach
	r.mu.Lock()
	was := r.st
	if r.st.Failures == nil {
		r.st.Failures = map[Cause]uint64{}
	}
	if err == nil {
		if !was.Known || !was.Up {
			r.st.Known, r.st.Up, r.st.Since = true, true, now
			r.up.Store(true)
		}
		r.mu.Unlock()
		if was.Known && !was.Up {
			o.log.Info("the upstream Redis answers again", "was_down_for", now.Sub(was.Since).Round(time.Millisecond),
				"last_cause", string(was.Cause))
		}
		return
	}
	cause := CauseOf(err)
	r.st.Failures[cause]++
	r.st.Cause, r.st.Err = cause, err.Error()
	if !was.Known || was.Up {
		r.st.Known, r.st.Up, r.st.Since = true, false, now
		r.up.Store(false)
	}
	r.mu.Unlock()
	if !was.Known || was.Up || was.Cause != cause {
		// A new failure, or a new cause: said at once.
		o.warner.force(string(cause))
	}
	o.warner.warn(string(cause), "the upstream Redis cannot be used: "+cause.Hint()+"; each request gets its failure mode's answer until it can",
		"cause", string(cause), "err", err.Error())
}

// Reach returns the upstream's state.
func (o *Observer) Reach() Reach {
	o.reach.mu.Lock()
	defer o.reach.mu.Unlock()
	st := o.reach.st
	st.Failures = maps.Clone(o.reach.st.Failures)
	if st.Failures == nil {
		st.Failures = map[Cause]uint64{}
	}
	return st
}

// warnEvery is how often a warning that repeats with the same key is
// logged again, with the count of those not logged.
const warnEvery = 30 * time.Second

// warner logs warnings at most once a warnEvery per key (a cause, a
// go-redis message's format), each with how many repeats it stands for:
// a wrong Sentinel address made go-redis log 142 lines in 10 seconds.
type warner struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	keys  map[string]*warning // guarded by mu
}

type warning struct {
	last    time.Time // when it was last logged; zero: to be logged at once
	skipped uint64    // repeats since
}

func newWarner(log *slog.Logger, every time.Duration, now func() time.Time) *warner {
	if now == nil {
		now = time.Now
	}
	return &warner{log: log, every: every, now: now, keys: map[string]*warning{}}
}

// warn logs msg with args unless key was logged less than every ago;
// then it only counts it. A line after a pause carries "repeats": the
// warnings of the same key not logged since the last line.
func (w *warner) warn(key, msg string, args ...any) {
	now := w.now()
	w.mu.Lock()
	k := w.keys[key]
	if k == nil {
		k = &warning{}
		w.keys[key] = k
	}
	if !k.last.IsZero() && now.Sub(k.last) < w.every {
		k.skipped++
		w.mu.Unlock()
		return
	}
	skipped := k.skipped
	k.last, k.skipped = now, 0
	w.mu.Unlock()
	if skipped > 0 {
		args = append(args, "repeats", skipped)
	}
	w.log.Warn(msg, args...)
}

// force has key's next warning logged at once, with the count so far.
func (w *warner) force(key string) {
	w.mu.Lock()
	if k := w.keys[key]; k != nil {
		k.last = time.Time{}
	}
	w.mu.Unlock()
}
