package chain

import (
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// The local share: what FailLocal enforces in one sidecar of a fleet.
//
// While the shared store cannot answer, each sidecar decides its FailLocal
// requests alone, from its in-memory store. Given the whole limit, a fleet
// of N sidecars admits up to N times the limit. Given its share, 1/N of
// it (GuardConfig.Sidecars: the live sidecars the shared store last told
// of), the fleet admits at most about the limit:
//
//   - a capacity (a window's limit, a bucket's capacity, GCRA's burst
//     plus one) becomes floor(capacity/N), never below 1: the N shares
//     hold at most the capacity, or N units where the capacity is below
//     N, that is at most N-1 over it;
//   - a bucket's refill (token and leaky bucket, GCRA) is divided
//     exactly: the same rate over a period N times as long, so the N
//     shares refill at the limit's rate, no more. Where that period would
//     pass engine.MaxPeriod the rate is divided instead, rounded down and
//     never below 1.
//
// Over an outage of length T a token bucket's fleet then admits at most
// capacity + rate×T (plus the rounding above), against N times that with
// the whole limit. What the share cannot know is where the load goes: a
// key hot on one sidecar alone gets 1/N of its limit there, and the
// sidecars that came or went since the count was learned are not counted
// (docs/operating.md, "When Redis is away").
//
// The scaled limit keeps the key's local state (the in-memory store keeps
// state by key and algorithm, whatever the parameters, as Redis does), so
// the same count carries on whether N changes or not.

// LocalShare says what FailLocal enforces now: each limit divided among
// the fleet's live sidecars (fleet, GuardConfig.Sidecars set) or the whole
// limit, and how many sidecars it is divided among (1 for the whole).
func (c *Chain) LocalShare() (fleet bool, sidecars int64) {
	return c.guard.sidecars != nil, c.guard.share()
}

// share is how many sidecars the fleet's limits are divided among now: at
// least 1; 1 without a Sidecars function (the whole limit).
func (g *Guard) share() int64 {
	if g.sidecars == nil {
		return 1
	}
	return max(1, int64(g.sidecars()))
}

// decideLocal decides the one request of reqs by the local store, with its
// limits scaled to this sidecar's share. A request that costs more than
// its scaled capacity could never be admitted here: it is refused, to be
// retried when the breaker next probes the shared store, as FailClosed's
// refusals are (a charge is taken whatever it costs, as the store takes
// it).
//
// The scaled limits stand in the caller's request while the local store
// decides it, and the request is given back as it came: reqs belong to
// the guard until done (engine.Store), and a single limit costs no
// allocation that way. A multi-limit request's limits are the policy's,
// shared and read only: they are copied, scaled.
func (g *Guard) decideLocal(reqs []engine.Request, res []engine.Result) {
	r := &reqs[0]
	n := g.share()
	if n == 1 {
		g.decideLocally(reqs, res)
		return
	}
	limit, limits := r.Limit, r.Limits
	if r.Multi() {
		scaled := make([]engine.NamedLimit, len(limits))
		for j, l := range limits {
			scaled[j] = engine.NamedLimit{Name: l.Name, Limit: shareLimit(l.Limit, n)}
		}
		r.Limits = scaled
	} else {
		r.Limit = shareLimit(limit, n)
	}
	if c := r.Capacity(); !r.Charge && r.Cost > c {
		res[0] = engine.Result{Path: engine.PathLocal, Decision: failDecision(c, false, 0, g.probeEvery)}
		for j := range r.Detail {
			r.Detail[j] = failDecision(r.Limits[j].Limit.Capacity(), false, 0, g.probeEvery)
		}
	} else {
		g.decideLocally(reqs, res)
	}
	r.Limit, r.Limits = limit, limits
}

// ChargeLocal takes r's cost from this sidecar's local share of r's
// limits, as a charge (taken whatever is left), when r's failure mode is
// FailLocal: the grant layer's units admitted from grants while the
// shared store was away (GrantsConfig.Away), so that what this sidecar
// admits in an outage, from its grants first and then locally, stays
// within its share. The grants' units were taken from the shared budget
// before the outage; without this the share would admit its whole
// capacity on top of them.
func (g *Guard) ChargeLocal(r engine.Request) {
	if g.mode(&r) != engine.FailLocal || r.Cost < 1 {
		return
	}
	r.Charge, r.Peek, r.Grant, r.Refund, r.Detail = true, false, false, false, nil
	var res [1]engine.Result
	g.decideLocal([]engine.Request{r}, res[:])
}

// decideLocally has the local store decide reqs as they stand.
func (g *Guard) decideLocally(reqs []engine.Request, res []engine.Result) {
	// The local store answers before Submit returns and never fails as a
	// batch (GuardConfig.Local): nothing to wait for.
	g.local.Submit(reqs, res, time.Time{}, ignore)
	res[0].Path = engine.PathLocal
}

// shareLimit is l scaled to one of n sidecars' share (see the comment at
// the top of share.go): capacities divided and rounded down, never below
// 1; a bucket's refill divided exactly where its period allows. n of 1 or
// less gives l itself. l must be valid; the share is then valid too.
func shareLimit(l engine.Limit, n int64) engine.Limit {
	if n <= 1 {
		return l
	}
	s := l
	switch l.Algorithm {
	case engine.TokenBucket, engine.LeakyBucket:
		s.Burst = max(1, l.Burst/n)
	case engine.GCRA:
		s.Burst = max(1, (l.Burst+1)/n) - 1 // GCRA's capacity is its burst plus one
	default: // the windows: their limit is their capacity
		s.Rate = max(1, l.Rate/n)
		return s
	}
	if l.Period <= engine.MaxPeriod/time.Duration(n) {
		s.Period = l.Period * time.Duration(n)
	} else {
		s.Rate = max(1, l.Rate/n)
	}
	// A capacity that takes longer than MaxPeriod to refill is invalid:
	// rounding can put a slow bucket's share just past it, where a
	// smaller capacity is the share's, not a refusal of every request.
	if most := engine.MaxPeriod.Microseconds() / (s.Period.Microseconds() / s.Rate); s.Capacity() > most {
		s.Burst = most
		if s.Algorithm == engine.GCRA {
			s.Burst = most - 1
		}
	}
	return s
}

// shareCount is a concurrency limit's share: rounded down, never below 1.
func shareCount(limit, n int64) int64 {
	if n <= 1 {
		return limit
	}
	return max(1, limit/n)
}
