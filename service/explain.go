package service

import (
	"context"
	"strconv"

	"github.com/sluice-rl/sluice/engine"
)

// Explanation says why a decision came out as it did, one type for every
// door: the service builds it from what the decision carries (the request
// as resolved, each limit's own decision, the path), and a door only
// encodes it (RL.EXPLAIN's JSON, the HTTP check's header, the gRPC door's
// response metadata). Its JSON names are the documented format
// (docs/operating.md, "Why was this refused?").
type Explanation struct {
	// Door is the door the request came through (Batch.Door).
	Door string `json:"door,omitempty"`
	// Policy names the policy the request was decided by; Rule, the
	// door's own rule (an Envoy rate-limit config's domain and descriptor
	// path) for an inline request that has one. Neither, for a plain
	// inline request.
	Policy string `json:"policy,omitempty"`
	Rule   string `json:"rule,omitempty"`
	// Key is the client's key, without the policy's prefix; Stored, the
	// key the state is kept under.
	Key    string `json:"key"`
	Stored string `json:"stored_key"`
	Cost   int64  `json:"cost"`
	Peek   bool   `json:"peek,omitempty"`
	Charge bool   `json:"charge,omitempty"`
	// Allowed is the answer the caller got; Shadowed, that it was refused
	// and answered as allowed because the policy runs in shadow mode.
	Allowed  bool `json:"allowed"`
	Shadowed bool `json:"shadowed,omitempty"`
	// Bound names the limit the answer came from: under several limits,
	// the one that refused (the longest wait) or, when all admitted, the
	// one with the least left.
	Bound string `json:"bound"`
	// Limits holds each limit's own decision, in the policy's order.
	Limits []LimitExplanation `json:"limits"`
	// Path is what decided (redis, memory, deny_cache, local_fallback,
	// fail_open, fail_closed: Service.PathName), OnFailure the failure
	// mode the request carried ("default": the sidecar's), and Why the
	// path in a sentence.
	Path      string `json:"path"`
	OnFailure string `json:"on_failure"`
	Why       string `json:"why"`
	// Digest identifies the configuration the request was resolved by:
	// the policies file's (Config.Digest) or the door's own rules'
	// (Request.Digest). Empty for a plain inline request.
	Digest string `json:"digest,omitempty"`
	// At is when the store decided, in µs since the epoch, when it says
	// (the in-memory store); else zero.
	At int64 `json:"at_us,omitempty"`
}

// LimitExplanation is one limit's rule and its own decision, with the
// state the decision leaves as the algorithm sees it (State).
type LimitExplanation struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Rate      int64  `json:"rate"`
	Burst     int64  `json:"burst,omitempty"`
	Period    string `json:"period"`
	Precision int64  `json:"precision,omitempty"`

	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMs int64 `json:"retry_after_ms"`
	ResetAfterMs int64 `json:"reset_after_ms"`
	DelayMs      int64 `json:"delay_ms,omitempty"`
	// State is the key's state after the decision in the algorithm's own
	// terms (for a peek, which changes nothing, the state the decision
	// would leave), derived from the decision: "used 7 of 10, window resets in 420ms" for the
	// windows, "tokens 3 of 10" for the token bucket, "queued 2 of 5" for
	// the leaky bucket, "TAT now+1500ms" for GCRA.
	State string `json:"state"`
	// Held is the state the store held for the limit, read back from it
	// once the decision was made (Batch.ExplainHeld: RL.EXPLAIN, whose
	// peek changes nothing, so it is the state before the decision as
	// well as after); nil where nothing was read.
	Held *HeldState `json:"held,omitempty"`
}

// HeldState is a limit's state as the store holds it: the values under
// the names the Lua scripts give them (lua/*.lua's "State:" lines), so
// that they read as redis-cli shows the key, and what they mean to the
// algorithm at the store's clock.
type HeldState struct {
	// Key is where the store keeps the state: on Redis, the key redis-cli
	// reads.
	Key string `json:"key"`
	// At is the store's clock when it was read, µs since the epoch: on
	// Redis, its TIME, read in the same script as the key.
	At int64 `json:"at_us"`
	// Values are the state's numbers: w (window start, µs) and n (count)
	// for the fixed window; w (sub-window start), n (precision) and Counts
	// (the ring of sub-window counts, fields "0" to n) for the sliding
	// window; z (µs; with f and d when z is f/d µs past it) for the
	// buckets and GCRA; total and entries for the sliding log; count for
	// the peer window. Empty when the store holds no state for the key.
	Values map[string]int64 `json:"values,omitempty"`
	Counts []int64          `json:"counts,omitempty"`
	// State is what the values mean to the algorithm at At, in the terms
	// LimitExplanation.State uses ("used 7 of 10, back to full in
	// 420ms"): a look at cost 0 through the same step the stores decide
	// with.
	State string `json:"state,omitempty"`
	// Error says why the state could not be read; the rest of the
	// explanation stands.
	Error string `json:"error,omitempty"`
}

// StateReader reads back the state a store holds for a key, for an
// explanation (Config.States): the central Redis's (upstream.Store) and
// the in-memory store's (memstore.Store) implement it. It is asked only
// by Batch.ExplainHeld, never on the decision path, and must be safe for
// concurrent use.
type StateReader interface {
	// ReadState returns the state held for key (as stored: a policy's
	// prefix included) under l (l.Name empty for a single-limit
	// request's limit; else one limit of a multi-limit request), and the
	// store's clock when it read it, µs since the epoch. A key with no
	// live state reads as the zero State.
	ReadState(ctx context.Context, key string, l engine.NamedLimit) (engine.State, int64, error)
	// StateKey names where the store keeps that state.
	StateKey(key string, l engine.NamedLimit) string
}

// Explain is request i's explanation, once the batch is decided, or the
// error it met instead (as Result).
func (b *Batch) Explain(i int) (Explanation, error) {
	if _, err := b.Result(i); err != nil {
		return Explanation{}, err
	}
	s, req, res, m := b.s, &b.reqs[i], &b.res[i], &b.meta[i]
	br := b.Brief(i)
	e := Explanation{Door: b.Door, Key: req.Key[m.prefix:], Stored: req.Key, Cost: req.Cost, Peek: req.Peek,
		Charge: req.Charge, Allowed: res.Decision.Allowed, Shadowed: m.shadowed, Path: s.PathName(res.Path),
		OnFailure: req.OnFailure.String(), At: res.At, Digest: s.explainedDigest(m), Bound: br.Bound}
	if br.ByPolicy {
		e.Policy = br.Policy
	} else {
		e.Rule = br.Policy
	}
	e.Why = s.why(res.Path, req.OnFailure)
	if req.Multi() {
		e.Limits = make([]LimitExplanation, len(req.Limits))
		for j, l := range req.Limits {
			e.Limits[j] = explainLimit(l.Name, l.Limit, &req.Detail[j])
		}
		return e, nil
	}
	e.Limits = []LimitExplanation{explainLimit(e.Bound, req.Limit, &br.Own)}
	return e, nil
}

// ExplainHeld is Explain with each limit's state read back from the
// store (LimitExplanation.Held), when the service has a StateReader: one
// read per limit, bounded by Config.ResetTimeout, for a person asking
// why (RL.EXPLAIN), never for a plain decision. A read that fails leaves
// its error in Held.Error, not in the explanation's error.
func (b *Batch) ExplainHeld(ctx context.Context, i int) (Explanation, error) {
	e, err := b.Explain(i)
	if err != nil || b.s.states == nil {
		return e, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.s.resetTimeout)
	defer cancel()
	req := &b.reqs[i]
	for j := range e.Limits {
		l := engine.NamedLimit{Limit: req.Limit}
		if req.Multi() {
			l = req.Limits[j]
		}
		e.Limits[j].Held = held(ctx, b.s.states, req.Key, l)
	}
	return e, nil
}

// held reads key's state under l from r and says what it means.
func held(ctx context.Context, r StateReader, key string, l engine.NamedLimit) *HeldState {
	h := &HeldState{Key: r.StateKey(key, l)}
	st, at, err := r.ReadState(ctx, key, l)
	h.At = at
	if err != nil {
		h.Error = err.Error()
		return h
	}
	h.Values, h.Counts = heldValues(l.Limit.Algorithm, &st)
	// A look at cost 0: what the state leaves now, as a peek reads it.
	look := engine.Request{Key: key, Limit: l.Limit, Peek: true}
	if err := look.Validate(); err != nil {
		h.Error = err.Error()
		return h
	}
	d, _ := engine.Step(&st, at, &look)
	h.State = state(l.Limit.Algorithm, &d)
	return h
}

// heldValues names st's numbers as the scripts keep them (HeldState.Values).
func heldValues(a engine.Algorithm, st *engine.State) (map[string]int64, []int64) {
	if st.A == 0 && st.B == 0 && st.C == 0 && len(st.Log) == 0 {
		return nil, nil
	}
	switch a {
	case engine.FixedWindow:
		return map[string]int64{"w": st.A, "n": st.B}, nil
	case engine.SlidingWindow:
		return map[string]int64{"w": st.A, "n": st.B}, st.Log
	case engine.TokenBucket, engine.LeakyBucket, engine.GCRA:
		if st.B == 0 {
			return map[string]int64{"z": st.A}, nil
		}
		return map[string]int64{"z": st.A, "f": st.B, "d": st.C}, nil
	case engine.SlidingLog:
		return map[string]int64{"total": st.A, "entries": int64(len(st.Log) / 2)}, nil
	}
	return map[string]int64{"count": st.B}, nil // the peer window
}

// Brief is the part of an explanation a watcher's line shows (MONITOR, a
// trace span): the policy or rule, the limit the answer came from, and
// that limit's own decision. It is read from what the decision carries
// and allocates nothing, and a door asks for it only while someone
// watches: the plain decision path never builds it.
type Brief struct {
	// Policy names the policy (ByPolicy) or the door's rule the request
	// was decided by; empty for a plain inline request.
	Policy   string
	ByPolicy bool
	// Bound names the limit the answer came from (Explanation.Bound),
	// Limit is that limit, and Own its own decision: the store's, before
	// shadow mode answered a refusal as an admission.
	Bound string
	Limit engine.Limit
	Own   engine.Decision
	// OnFailure is the failure mode the request carried (zero: the
	// sidecar's), which decided when the path is a failure mode's.
	OnFailure engine.FailureMode
}

// Brief is request i's Brief; its Result must have been checked.
func (b *Batch) Brief(i int) Brief {
	req, m := &b.reqs[i], &b.meta[i]
	br := Brief{ByPolicy: m.byPolicy, OnFailure: req.OnFailure}
	if m.byPolicy || m.policy != Inline {
		br.Policy = m.policy
	}
	if req.Multi() {
		j := engine.Binding(req.Detail)
		br.Bound, br.Limit, br.Own = req.Limits[j].Name, req.Limits[j].Limit, req.Detail[j]
		return br
	}
	br.Limit, br.Own = req.Limit, b.res[i].Decision
	if m.shadowed {
		br.Own.Allowed = false
	}
	br.Bound = firstOf(br.Policy, req.Limit.Algorithm.String())
	return br
}

// AppendState appends the bound limit's state in the algorithm's terms,
// as LimitExplanation.State says it.
func (br *Brief) AppendState(dst []byte) []byte { return appendState(dst, br.Limit.Algorithm, &br.Own) }

// explainedDigest is Explanation.Digest for a request with meta m.
func (s *Service) explainedDigest(m *meta) string {
	if m.byPolicy {
		if s.digest != nil {
			return s.digest()
		}
		return ""
	}
	return m.digest
}

// firstOf is the first non-empty of its arguments.
func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func explainLimit(name string, l engine.Limit, d *engine.Decision) LimitExplanation {
	return LimitExplanation{Name: name, Algorithm: l.Algorithm.String(), Rate: l.Rate, Burst: l.Burst,
		Period: l.Period.String(), Precision: l.Precision,
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, RetryAfterMs: ceilMillis(d.RetryAfter.Microseconds()),
		ResetAfterMs: ceilMillis(d.ResetAfter.Microseconds()), DelayMs: ceilMillis(d.Delay.Microseconds()),
		State: state(l.Algorithm, d)}
}

// state says what the decision shows of the key's state, in the
// algorithm's terms. It reads the decision only, so it costs no round
// trip: what a window counted is its limit less what remains, a bucket's
// tokens are what remains, and GCRA's theoretical arrival time is now
// plus the time until the key is back to full.
func state(a engine.Algorithm, d *engine.Decision) string {
	var buf [64]byte
	return string(appendState(buf[:0], a, d))
}

// appendState is state, appended to dst: a MONITOR line writes it in
// place.
func appendState(dst []byte, a engine.Algorithm, d *engine.Decision) []byte {
	switch a {
	case engine.TokenBucket:
		dst = append(dst, "tokens "...)
		dst = strconv.AppendInt(dst, d.Remaining, 10)
		dst = appendOf(dst, d.Limit, ", full in ")
	case engine.LeakyBucket:
		dst = append(dst, "queued "...)
		dst = strconv.AppendInt(dst, d.Limit-d.Remaining, 10)
		dst = appendOf(dst, d.Limit, ", drained in ")
	case engine.GCRA:
		dst = append(dst, "TAT now+"...)
	default:
		dst = append(dst, "used "...)
		dst = strconv.AppendInt(dst, d.Limit-d.Remaining, 10)
		dst = appendOf(dst, d.Limit, ", back to full in ")
	}
	dst = strconv.AppendInt(dst, ceilMillis(d.ResetAfter.Microseconds()), 10)
	return append(dst, "ms"...)
}

// appendOf appends " of limit" and then.
func appendOf(dst []byte, limit int64, then string) []byte {
	dst = append(dst, " of "...)
	dst = strconv.AppendInt(dst, limit, 10)
	return append(dst, then...)
}

// ceilMillis rounds µs up to whole milliseconds, as the doors' replies
// do, so that an explanation and the reply it explains agree.
func ceilMillis(us int64) int64 {
	if us <= 0 {
		return 0
	}
	return (us + 999) / 1000
}

// why says in a sentence what the path means.
func (s *Service) why(p engine.Path, mode engine.FailureMode) string {
	switch p {
	case engine.PathStore:
		return s.storeName + " decided"
	case engine.PathDenyCache:
		return "a refusal " + s.storeName + " gave earlier, remembered and answered here until its retry_after"
	case engine.PathLocal:
		return "the store failed or was too slow; the in-memory store decided (on_failure " + mode.String() + ")"
	case engine.PathFailOpen:
		return "the store failed or was too slow; allowed by the failure mode (on_failure " + mode.String() + ")"
	case engine.PathFailClosed:
		return "the store failed or was too slow; refused by the failure mode (on_failure " + mode.String() + ")"
	case engine.PathGrant:
		return "admitted from units " + s.storeName + " granted this sidecar for a hot key, without a round trip (--grants)"
	}
	return p.String()
}
