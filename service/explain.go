package service

import (
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
}

// Explain is request i's explanation, once the batch is decided, or the
// error it met instead (as Result).
func (b *Batch) Explain(i int) (Explanation, error) {
	d, err := b.Result(i)
	if err != nil {
		return Explanation{}, err
	}
	s, req, res, m := b.s, &b.reqs[i], &b.res[i], &b.meta[i]
	e := Explanation{Door: b.Door, Key: req.Key[m.prefix:], Stored: req.Key, Cost: req.Cost, Peek: req.Peek,
		Charge: req.Charge, Allowed: d.Allowed, Shadowed: m.shadowed, Path: s.PathName(res.Path),
		OnFailure: req.OnFailure.String(), At: res.At, Digest: m.digest}
	if m.byPolicy {
		e.Policy = m.policy
		if s.digest != nil {
			e.Digest = s.digest()
		}
	} else if m.policy != Inline {
		e.Rule = m.policy
	}
	e.Why = s.why(res.Path, req.OnFailure)
	if req.Multi() {
		e.Limits = make([]LimitExplanation, len(req.Limits))
		for j, l := range req.Limits {
			e.Limits[j] = explainLimit(l.Name, l.Limit, &req.Detail[j])
		}
		e.Bound = req.Limits[engine.Binding(req.Detail)].Name
		return e, nil
	}
	// One limit: its own decision is the store's, before shadow mode
	// answered a refusal as an admission.
	own := *d
	if m.shadowed {
		own.Allowed = false
	}
	e.Bound = firstOf(e.Policy, e.Rule, req.Limit.Algorithm.String())
	e.Limits = []LimitExplanation{explainLimit(e.Bound, req.Limit, &own)}
	return e, nil
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
	lim, rem := strconv.FormatInt(d.Limit, 10), d.Remaining
	reset := strconv.FormatInt(ceilMillis(d.ResetAfter.Microseconds()), 10) + "ms"
	switch a {
	case engine.TokenBucket:
		return "tokens " + strconv.FormatInt(rem, 10) + " of " + lim + ", full in " + reset
	case engine.LeakyBucket:
		return "queued " + strconv.FormatInt(d.Limit-rem, 10) + " of " + lim + ", drained in " + reset
	case engine.GCRA:
		return "TAT now+" + reset
	default:
		return "used " + strconv.FormatInt(d.Limit-rem, 10) + " of " + lim + ", back to full in " + reset
	}
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
