package chain

import "strconv"

// INFO's fields for the chain, beside the counts they show: each is a
// section's fields in INFO's order, as name-value pairs, so that the RESP
// door prints them without knowing the chain.

// InfoUpstream is the chain's part of INFO's Upstream section: the round
// trip's timeout, the breaker, the default failure mode, and the share of
// each limit that FailLocal enforces. The section
// starts with the store's own fields (its kind, its addresses).
func (c *Chain) InfoUpstream() [][2]string {
	g := c.guard.Stats()
	open := "0"
	if g.BreakerOpen {
		open = "1"
	}
	// The share FailLocal enforces (share.go): fleet, 1/n of each limit,
	// or whole.
	share := "whole"
	fleet, n := c.LocalShare()
	if fleet {
		share = "fleet"
	}
	return [][2]string{{"upstream_timeout_ms", strconv.FormatInt(c.timeout.Milliseconds(), 10)},
		{"breaker_open", open}, {"fallback_decisions", u(g.Fallbacks)}, {"fallback_decisions_unreplicated", u(g.Unreplicated)},
		{"on_upstream_failure", c.guard.def.String()}, {"local_share", share}, {"local_share_sidecars", strconv.FormatInt(n, 10)}}
}

// InfoBatcher is INFO's Batcher section: the round trips and their sizes.
func (c *Chain) InfoBatcher() [][2]string {
	b := c.batcher.Stats()
	avg := "0"
	if b.Batches > 0 {
		avg = strconv.FormatFloat(float64(b.Decisions)/float64(b.Batches), 'f', 2, 64)
	}
	return [][2]string{{"batches", u(b.Batches)}, {"batched_decisions", u(b.Decisions)}, {"avg_batch_size", avg},
		{"batch_max", strconv.Itoa(c.batcher.maxBatch)}, {"batch_inflight", strconv.Itoa(c.batcher.inFlight)}}
}

// InfoDenyCache is INFO's Denycache section.
func (c *Chain) InfoDenyCache() [][2]string {
	d := c.deny.Stats()
	return [][2]string{{"deny_cache_hits", u(d.Hits)}, {"deny_cache_misses", u(d.Misses)},
		{"deny_cache_evictions", u(d.Evictions)}, {"deny_cache_entries", strconv.Itoa(d.Entries)},
		{"deny_cache_size", strconv.Itoa(c.denyCap)}}
}

func u(n uint64) string { return strconv.FormatUint(n, 10) }

// InfoGrants is INFO's Grants section: whether grants are on, the grants
// held now and the units they may still spend, the decisions made from
// them, the grants asked for and taken, the units given back, and the
// units admitted from grants while Redis was away, charged to the local
// share.
func (c *Chain) InfoGrants() [][2]string {
	on, s := "0", c.GrantStats()
	if c.grants != nil {
		on = "1"
	}
	return [][2]string{{"grants", on}, {"grants_held", strconv.Itoa(s.Held)},
		{"grant_units_outstanding", strconv.FormatInt(s.Outstanding, 10)}, {"grant_decisions", u(s.Decisions)},
		{"grants_asked", u(s.Asked)}, {"grants_taken", u(s.Taken)}, {"grant_units_given_back", u(s.GivenBack)},
		{"grants_revoked", u(s.Revoked)},
		{"grant_keys", strconv.Itoa(s.Keys)}, {"grant_units_charged_locally", u(s.ChargedLocal)}}
}
