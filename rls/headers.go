package rls

import (
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-rl/sluice/internal/ratefields"
	"github.com/sluice-rl/sluice/internal/rlsopts"
	"github.com/sluice-rl/sluice/rlsconfig"
)

// The peer's header names (its LIMIT_*_HEADER defaults) and the IETF
// httpapi draft's.
const (
	hdrLimit      = "RateLimit-Limit"
	hdrRemaining  = "RateLimit-Remaining"
	hdrReset      = "RateLimit-Reset"
	hdrPolicy     = "RateLimit-Policy"
	hdrRateLimit  = "RateLimit"
	hdrRetryAfter = "Retry-After"
)

// responseHeaders are the headers Envoy is asked to add, from the picked
// descriptor: the peer's three, and the draft's structured fields with
// Retry-After when the call is over its limit.
func (s *Server) responseHeaders(h *headerPick, over bool) []*core.HeaderValue {
	st, r := h.st, h.rule
	reset := st.GetDurationUntilReset().GetSeconds()
	var out []*core.HeaderValue
	if s.headers == rlsopts.HeadersPeer || s.headers == rlsopts.HeadersBoth {
		out = append(out,
			&core.HeaderValue{Key: hdrLimit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
			&core.HeaderValue{Key: hdrRemaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			&core.HeaderValue{Key: hdrReset, Value: strconv.FormatInt(reset, 10)})
	}
	if s.headers == rlsopts.HeadersDraft || s.headers == rlsopts.HeadersBoth {
		name := policyName(r)
		out = append(out,
			// The sustained rate as q over w and a bucket's or GCRA's burst as
			// sluice-burst, as the HTTP check says it: for the peer's own
			// rules (fixed windows of whole units) that is requests_per_unit
			// over the unit, as before; a rule with Sluice's fields may admit
			// a burst above its rate, or have a period of no whole seconds.
			&core.HeaderValue{Key: hdrPolicy, Value: string(ratefields.AppendLimitPolicy(nil, name, r.Limit))},
			&core.HeaderValue{Key: hdrRateLimit, Value: string(ratefields.AppendRateLimit(nil, name, int64(st.LimitRemaining), reset))})
		if over {
			out = append(out, &core.HeaderValue{Key: hdrRetryAfter, Value: strconv.FormatInt(max(ratefields.Seconds(h.retry), 1), 10)})
		}
	}
	return out
}

// policyName is the name a rule goes by in the draft's fields: its
// configured name, or else its descriptor's.
func policyName(r *rlsconfig.Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.Label
}
