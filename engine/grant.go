package engine

import (
	"strconv"
	"time"
)

// Owned quota: a grant moves units of a key's budget to a holder (a
// sidecar's grant layer, a reservation), who spends them later without
// asking the store; a refund gives back what the holder did not spend.
// The store keeps no record of a grant: the units are in the key's state
// as any take's are, and what keeps the fleet exact is when the holder
// may spend them (Decision.Hold, Limit.Spendable) and how much a refund
// may give back (refund), both derived from the grant's Anchor alone.
//
// Why this is exact, per algorithm:
//
//	fixed window,
//	sliding window: the granted units are in the (sub-)window's count
//	                from the grant on, spent only while that (sub-)window
//	                is current (Hold ends with it), and given back only
//	                while it still is (refund checks Anchor, its end): the
//	                count is never below what the fleet admitted in it.
//	token bucket,
//	GCRA:           a held unit counts as taken. The bucket counts
//	                ceil((TAT(t)-t)/interval) units taken at t (it admits
//	                capacity less that many), and a grant's units lapse at
//	                the refill rate: at t at most ceil((Anchor-t)/interval)
//	                of them may be spent. Each grant of k units moved the
//	                TAT over a span of k intervals ending at its Anchor
//	                (rounded down to whole µs), and those spans do not
//	                overlap, so the units all holders may spend at t sum
//	                to at most ceil((TAT(t)-t)/interval): the level plus
//	                the units held is at most the capacity. This holds as
//	                long as the TAT never falls below a grant's Anchor,
//	                which only a refund or a reset makes it do: a bucket
//	                refund moves the TAT back by the units refunded, so it
//	                can break the bound for another holder whose grant
//	                came later by at most the units refunded (the hot-key
//	                grants of one sidecar refund their own, latest, grant).
//
// The sliding log and the leaky bucket take no grant: the log keeps a
// time per admitted request, and the leaky bucket a place in its queue
// per request, which units spent later would falsify.

// owned reports whether alg offers grants and refunds.
func owned(alg Algorithm) bool {
	switch alg {
	case FixedWindow, SlidingWindow, TokenBucket, GCRA:
		return true
	}
	return false
}

// validateOwned checks a Grant or a Refund: one of them, neither peeking
// nor charging, of a cost of at least 1, on limits that offer them, and a
// refund with its grant's anchors.
func (r *Request) validateOwned() error {
	mode := "grant"
	if r.Refund {
		mode = "refund"
	}
	limitOK := func(l Limit) error {
		if !owned(l.Algorithm) {
			return &ParamError{Param: mode, Value: "on " + l.Algorithm.String(),
				Reason: "offered for fixed_window, sliding_window, token_bucket and gcra only: units spent later would falsify the sliding log's times and the leaky bucket's queue"}
		}
		return nil
	}
	if err := r.eachLimit(limitOK); err != nil {
		return err
	}
	switch {
	case r.Grant && r.Refund:
		return &ParamError{Param: "grant", Value: "with refund", Reason: "a request grants or refunds, not both"}
	case r.Peek:
		return &ParamError{Param: mode, Value: "with peek", Reason: "a peek never takes or gives back"}
	case r.Charge:
		return &ParamError{Param: mode, Value: "with charge", Reason: "a charge is taken whatever is left; a grant only when it fits"}
	case r.Cost < 1:
		return &ParamError{Param: "cost", Value: strconv.FormatInt(r.Cost, 10), Reason: "a " + mode + " must be of at least 1"}
	}
	if !r.Refund {
		return nil
	}
	if r.Anchor <= 0 {
		return &ParamError{Param: "anchor", Value: strconv.FormatInt(r.Anchor, 10),
			Reason: "a refund names its grant by the grant's anchor, above 0"}
	}
	if r.Multi() {
		if r.Detail == nil {
			return &ParamError{Param: "detail", Value: "none",
				Reason: "a multi-limit refund reads each limit's anchor from the grant's detail"}
		}
		for j := range r.Detail {
			if r.Detail[j].Anchor <= 0 {
				return &ParamError{Param: "anchor", Value: strconv.FormatInt(r.Detail[j].Anchor, 10),
					Reason: "limit " + strconv.Quote(r.Limits[j].Name) + "'s anchor in the detail must be its grant's, above 0"}
			}
		}
	}
	return nil
}

// grantAnchor is the Anchor of a grant that st, just written by its take,
// now holds: the fixed window's end, the current sub-window's end, the
// bucket's theoretical time in whole µs rounded down (rounded up, a unit
// could be spent for a fraction of a µs after the bucket refilled it).
func grantAnchor(st *State, l Limit) int64 {
	switch l.Algorithm {
	case FixedWindow:
		return st.A + l.periodMicros()
	case SlidingWindow:
		return st.A + l.periodMicros()/l.precision()
	default:
		return st.A
	}
}

// Spendable is how many of a grant's units its holder may still spend
// elapsed after the grant's decision, left of them unspent, where hold is
// the decision's Hold under limit l: left while elapsed < hold, then
// none, for the windows; for the buckets, min(left,
// ceil((hold-elapsed)/interval)), the units the bucket has not refilled
// since (see the exactness argument above). elapsed must be measured from
// a time no later than the store's decision (the request's sending), so
// that it is never shorter than the store's. For a multi-limit grant the
// units spendable are the least of its limits' (Decision.Detail).
func (l Limit) Spendable(hold, elapsed time.Duration, left int64) int64 {
	if left <= 0 || elapsed >= hold {
		return 0
	}
	switch l.Algorithm {
	case TokenBucket, GCRA, LeakyBucket:
		e := l.emission()
		q, r := mulDiv(int64(hold-elapsed), e.d, e.p*int64(time.Microsecond))
		if r > 0 {
			q++
		}
		return min(left, q)
	}
	return left
}

// refund gives back r.Cost units of the grant named by r.Anchor, as far
// as that stays exact:
//
//	fixed window:   off the window's count while the window the grant
//	                took from (it ends at Anchor) is the current one;
//	                after it, nothing: the next window starts afresh
//	sliding window: off the current sub-window's count while it is the
//	                one the grant took from (it ends at Anchor); after
//	                it, nothing: the units are in an older sub-window's
//	                count, which the holder could have spent them in
//	token bucket,
//	GCRA:           the theoretical time moves back by k intervals, k =
//	                min(Cost, ceil((Anchor-now)/interval)), the units the
//	                bucket has not refilled since the grant, and never
//	                before now (never past full)
//
// It is never refused: the decision is a look at the key after it, with
// Allowed true.
func refund(st *State, now int64, r *Request) (Decision, Outcome) {
	l := r.Limit
	var out Outcome
	switch l.Algorithm {
	case FixedWindow:
		p := l.periodMicros()
		w := windowStart(now, p, st.A)
		if st.A == w && r.Anchor == w+p && st.B > 0 {
			st.B = max(st.B-r.Cost, 0)
			out = Outcome{Write: true, Expires: w + p}
		}
	case SlidingWindow:
		n := l.precision()
		s := l.periodMicros() / n
		if stored := st.B == n && int64(len(st.Log)) == n+1; stored {
			w := max(windowStart(now, s, 0), st.A)
			counts, _ := slidingCounts(st, w, now, s, n, stored)
			if r.Anchor == w+s && counts[0] > 0 {
				counts[0] = max(counts[0]-r.Cost, 0)
				writeSliding(st, &counts, w, s, n, stored)
				out = Outcome{Write: true, Expires: w + (n+1)*s}
			}
		}
	default:
		e := l.emission()
		z := e.rescale(instant{st.A, st.B}, st.C)
		at := instant{now, 0}
		if r.Anchor > now && less(at, z) {
			k := min(r.Cost, e.fitUp(instant{r.Anchor - now, 0}))
			to := e.sub(z, e.times(k))
			if less(to, at) {
				to = at
			}
			st.A, st.B, st.C = to.us, to.f, e.d
			// A bucket given back to full ends at now; it is still
			// written to end after now, as every write does, so that a
			// store deciding a key's run of requests at one instant
			// (memstore's decide, the batch script) keeps it as one
			// deciding them one by one does, also when the clock then
			// steps back.
			out = Outcome{Write: true, Expires: max(to.ceil(), now+1)}
		}
	}
	d, _ := step(st, now, &Request{Key: r.Key, Limit: l, Peek: true})
	d.Allowed, d.RetryAfter = true, 0
	return d, out
}
