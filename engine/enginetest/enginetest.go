// Package enginetest is the conformance suite every engine.Store must pass:
// the in-memory store and the Redis store run the same tables, with the clock
// pinned, and must agree decision by decision. It also generates random
// scenarios for differential tests between two stores.
//
// The tables are written once, here; a store's own test only says how to
// open it (see Run).
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Epoch is the pinned start of every case: a midnight, so windows of any
// period that divides a day begin exactly there.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a pinned clock that tests move by hand.
type Clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the pinned time; pass it as a store's clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (which may be negative: a clock stepping back).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Opener returns a store whose clock is now. It is called once per case,
// and may use t.Cleanup. Keys never repeat between cases, so one backing
// server may serve them all.
type Opener func(t *testing.T, now func() time.Time) engine.Store

// Step is one request in a case: the clock moves by Advance, then the
// request (or a reset) is made.
type Step struct {
	Advance time.Duration
	Cost    int64
	Peek    bool
	Charge  bool // a cost known after the work: taken even over the limit
	Reset   bool // reset the key instead of deciding
	// Grant takes Cost as a take does, for a holder to spend later; Refund
	// gives Cost back to the grant whose anchor is Anchor, as time since
	// Epoch (a multi-limit refund's: Anchors, one per limit).
	Grant, Refund bool
	Anchor        time.Duration
	Anchors       []time.Duration
	// Limit, when set, replaces the case's limit from this step on: the
	// same key under a lowered or raised limit.
	Limit engine.Limit
	Want  engine.Decision
	// WantDetail, when set, is each limit's own decision (a multi-limit
	// case's).
	WantDetail []engine.Decision
	// WantErr, when set, is the parameter that the request's *ParamError
	// must name; Want is then ignored.
	WantErr string
}

// Case is a limit (or a multi-limit policy's limits) and a sequence of
// steps on one key.
type Case struct {
	Name   string
	Limit  engine.Limit
	Limits []engine.NamedLimit
	Steps  []Step
}

// Run runs every case against stores made by open, twice: once with each
// request in a batch of its own, and once with the requests of the same
// instant sent together in one batch, which must decide exactly the same.
func Run(t *testing.T, open Opener) {
	RunCases(t, open, slices.Concat(Cases, ChargeCases, PeerCases))
}

// RunCases runs cases as Run runs its own: a store that grants runs
// GrantCases so (owned quota; the memory store and Redis do, and a
// wrapper once it passes grants and refunds through as they ask).
func RunCases(t *testing.T, open Opener, cases []Case) {
	for _, batched := range []bool{false, true} {
		mode := "one-by-one"
		if batched {
			mode = "batched"
		}
		for _, c := range cases {
			t.Run(mode+"/"+c.Name, func(t *testing.T) {
				clock := NewClock(Epoch)
				s := open(t, clock.Now)
				key := fmt.Sprintf("conformance:%s:%s", mode, c.Name)
				runCase(t, s, clock, key, c, batched)
			})
		}
	}
}

func runCase(t *testing.T, s engine.Store, clock *Clock, key string, c Case, batched bool) {
	ctx := context.Background()
	limits := make([]engine.Limit, len(c.Steps))
	l := c.Limit
	for i, st := range c.Steps {
		if st.Limit.Algorithm != 0 {
			l = st.Limit
		}
		limits[i] = l
	}
	for i := 0; i < len(c.Steps); {
		clock.Advance(c.Steps[i].Advance)
		if c.Steps[i].Reset {
			if err := s.Reset(ctx, key); err != nil {
				t.Fatalf("step %d: Reset: %v", i, err)
			}
			i++
			continue
		}
		// Gather the steps of this instant into one batch when batched.
		j := i + 1
		for batched && j < len(c.Steps) && c.Steps[j].Advance == 0 && !c.Steps[j].Reset {
			j++
		}
		reqs := make([]engine.Request, j-i)
		for k := range reqs {
			st := c.Steps[i+k]
			reqs[k] = engine.Request{Key: key, Limit: limits[i+k], Cost: st.Cost, Peek: st.Peek, Charge: st.Charge,
				Grant: st.Grant, Refund: st.Refund, Anchor: sinceEpoch(st.Anchor)}
			if c.Limits != nil {
				reqs[k].Limit, reqs[k].Limits = engine.Limit{}, c.Limits
				reqs[k].Detail = make([]engine.Decision, len(c.Limits))
				for n, a := range st.Anchors {
					reqs[k].Detail[n].Anchor = sinceEpoch(a)
				}
			}
		}
		res := make([]engine.Result, len(reqs))
		if err := engine.Wait(s, reqs, res, time.Time{}); err != nil {
			t.Fatalf("step %d: Submit: %v", i, err)
		}
		for k, r := range res {
			checkStep(t, i+k, c.Steps[i+k], r)
			for n, d := range c.Steps[i+k].WantDetail {
				if got := reqs[k].Detail[n]; got != d {
					t.Errorf("step %d, limit %s:\n got %s\nwant %s", i+k, c.Limits[n].Name, Format(got), Format(d))
				}
			}
		}
		i = j
	}
}

// sinceEpoch is the time d after Epoch in µs: an anchor in a case.
func sinceEpoch(d time.Duration) int64 {
	if d == 0 {
		return 0
	}
	return Epoch.Add(d).UnixMicro()
}

func checkStep(t *testing.T, i int, st Step, r engine.Result) {
	t.Helper()
	if st.WantErr != "" {
		var pe *engine.ParamError
		if !errors.As(r.Err, &pe) || pe.Param != st.WantErr || !errors.Is(r.Err, engine.ErrInvalid) {
			t.Errorf("step %d (cost %d): error %v; want a *ParamError naming %q", i, st.Cost, r.Err, st.WantErr)
		}
		return
	}
	if r.Err != nil {
		t.Errorf("step %d (cost %d): unexpected error %v", i, st.Cost, r.Err)
		return
	}
	if r.Decision != st.Want {
		t.Errorf("step %d (cost %d, peek %v, charge %v, grant %v, refund %v):\n got %s\nwant %s", i, st.Cost, st.Peek, st.Charge,
			st.Grant, st.Refund, Format(r.Decision), Format(st.Want))
	}
}

// Format prints a decision compactly, for failure messages.
func Format(d engine.Decision) string {
	var b strings.Builder
	if d.Allowed {
		b.WriteString("allowed")
	} else {
		b.WriteString("refused")
	}
	fmt.Fprintf(&b, " limit=%d remaining=%d retry=%v reset=%v", d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter)
	if d.Delay != 0 {
		fmt.Fprintf(&b, " delay=%v", d.Delay)
	}
	if d.Anchor != 0 || d.Hold != 0 {
		fmt.Fprintf(&b, " anchor=epoch+%v hold=%v", time.UnixMicro(d.Anchor).Sub(Epoch), d.Hold)
	}
	return b.String()
}
