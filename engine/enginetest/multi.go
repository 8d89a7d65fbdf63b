package enginetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// multiModel is the simplest statement of a multi-limit decision: each
// limit is a single-limit key of its own, decided by engine.Step (whose
// decisions the conformance tables pin) on a state of its own, looked at
// one by one; only if every one admits is each charged. A charge (a cost
// known after the work) is taken by each, whatever the others. It keeps state as
// the stores do: written only when Step says so, and read as new once it
// expires.
type multiModel struct {
	now    func() time.Time
	states map[string]*modelState
}

type modelState struct {
	st      engine.State
	expires int64 // µs since the epoch
}

func (m multiModel) one(t *testing.T, key string, l engine.Limit, cost int64, peek, charge bool) engine.Decision {
	t.Helper()
	now := m.now().UnixMicro()
	r := engine.Request{Key: key, Limit: l, Cost: cost, Peek: peek, Charge: charge}
	if err := r.Validate(); err != nil {
		t.Fatalf("model: %v", err)
	}
	at := l.Algorithm.Short() + ":" + key // a store keeps each algorithm's state apart
	s := m.states[at]
	if s == nil || now >= s.expires {
		s = &modelState{}
	}
	d, out := engine.Step(&s.st, now, &r)
	if out.Write {
		s.expires = out.Expires
		m.states[at] = s
	}
	return d
}

func (m multiModel) decide(t *testing.T, key string, ls []engine.NamedLimit, cost int64, peek, charge bool) (engine.Decision, []engine.Decision) {
	parts := make([]engine.Decision, len(ls))
	all := true
	for j, l := range ls {
		if charge {
			parts[j] = m.one(t, key+"/"+l.Name, l.Limit, cost, false, true)
		} else {
			parts[j] = m.one(t, key+"/"+l.Name, l.Limit, cost, true, false)
		}
		all = all && parts[j].Allowed
	}
	for j, l := range ls {
		switch {
		case charge:
		case !all && parts[j].Allowed:
			parts[j] = m.one(t, key+"/"+l.Name, l.Limit, 0, true, false) // what it has, untouched
		case all && !peek:
			parts[j] = m.one(t, key+"/"+l.Name, l.Limit, cost, false, false)
		}
	}
	// The reply: refused, the longest retry-after among the refusals;
	// admitted, the least remaining; the first of equals either way.
	best := -1
	for j, p := range parts {
		switch {
		case best < 0:
			best = j
		case !all && !p.Allowed && (parts[best].Allowed || p.RetryAfter > parts[best].RetryAfter):
			best = j
		case all && p.Remaining < parts[best].Remaining:
			best = j
		}
	}
	d := parts[best]
	d.Delay = 0
	for _, p := range parts {
		if all && p.Delay > d.Delay {
			d.Delay = p.Delay
		}
	}
	return d, parts
}

// MultiProperty decides random sequences of multi-limit requests (two or
// three limits of any algorithms, mixed costs and peeks, a few keys, the
// clock moving by small and large steps) on the store open makes and on
// the model, and fails where their replies, or any limit's own reply,
// differ; and after every refusal it checks that no limit's state moved:
// a look at cost 0 before and after must read the same. A fifth of the
// requests are charges, when no limit is a sliding log (which takes none).
func MultiProperty(t *testing.T, open Opener, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 16))
	clock := NewClock(Epoch)
	store := open(t, clock.Now)
	model := multiModel{now: clock.Now, states: map[string]*modelState{}}
	periods := []time.Duration{10 * time.Millisecond, time.Second, time.Minute, 24 * time.Hour}
	var ls []engine.NamedLimit
	for k := range 2 + rng.IntN(2) {
		l := engine.Limit{Algorithm: engine.Algorithms[rng.IntN(len(engine.Algorithms))],
			Rate: 1 + rng.Int64N(8), Period: periods[rng.IntN(len(periods))]}
		switch l.Algorithm {
		case engine.TokenBucket, engine.LeakyBucket:
			l.Burst = 1 + rng.Int64N(6)
		case engine.GCRA:
			l.Burst = rng.Int64N(6)
		}
		ls = append(ls, engine.NamedLimit{Name: fmt.Sprintf("l%d", k), Limit: l})
	}
	capacity := (&engine.Request{Limits: ls}).Capacity()
	chargeable := !slices.ContainsFunc(ls, func(l engine.NamedLimit) bool { return l.Limit.Algorithm == engine.SlidingLog })
	decide := func(key string, cost int64, peek, charge bool) (engine.Decision, []engine.Decision) {
		t.Helper()
		r := engine.Request{Key: key, Limits: ls, Cost: cost, Peek: peek, Charge: charge, Detail: make([]engine.Decision, len(ls))}
		res := make([]engine.Result, 1)
		if err := engine.Wait(store, []engine.Request{r}, res, time.Time{}); err != nil || res[0].Err != nil {
			t.Fatalf("seed %d: %v %v", seed, err, res[0].Err)
		}
		return res[0].Decision, r.Detail
	}
	for i := range steps {
		switch rng.IntN(4) {
		case 0:
		case 1:
			clock.Advance(time.Duration(rng.Int64N(50)) * time.Millisecond)
		case 2:
			clock.Advance(time.Duration(rng.Int64N(int64(2 * time.Second))))
		default:
			clock.Advance(time.Microsecond)
		}
		key := fmt.Sprintf("prop:%d:%d", seed, rng.IntN(2))
		cost, peek := rng.Int64N(capacity+1), rng.IntN(5) == 0
		charge := chargeable && rng.IntN(5) == 0
		if charge {
			cost, peek = rng.Int64N(3*capacity+2), false
		}
		_, before := decide(key, 0, true, false)
		got, gotParts := decide(key, cost, peek, charge)
		want, wantParts := model.decide(t, key, ls, cost, peek, charge)
		if got != want {
			t.Fatalf("seed %d step %d %+v cost %d peek %v charge %v:\nstore %s\nmodel %s", seed, i, ls, cost, peek, charge, Format(got), Format(want))
		}
		for j := range ls {
			if gotParts[j] != wantParts[j] {
				t.Fatalf("seed %d step %d, limit %s %+v cost %d peek %v:\nstore %s\nmodel %s", seed, i, ls[j].Name, ls[j].Limit, cost, peek,
					Format(gotParts[j]), Format(wantParts[j]))
			}
		}
		if !got.Allowed && !charge {
			if _, after := decide(key, 0, true, false); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("seed %d step %d: a refusal changed a limit:\nbefore %v\nafter  %v", seed, i, before, after)
			}
		}
	}
}
