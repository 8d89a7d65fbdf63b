package rlsconfig

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// PeerKeys has the Envoy door count as envoyproxy/ratelimit counts, in
// its keys, so that during a rolling update the peer's pods and Sluice's,
// on one Redis, enforce one limit and no count starts again. The peer's
// key for a descriptor is its CACHE_KEY_PREFIX, the domain, each entry's
// key and value (or its share_threshold pattern), each followed by '_',
// then the start of the window in Unix seconds, from the local clock:
//
//	<prefix><domain>_<key>_<value>_<key>_<value>_<window start>
//
// and it holds a plain integer, which it INCRBYs and EXPIREs for its unit
// in seconds plus a random jitter (engine.PeerWindow counts the same).
// Rules that name one of Sluice's own counting fields (Rule.Own) keep
// Sluice's keys and algorithms: the peer cannot read them.
type PeerKeys struct {
	// Prefix starts every key: the peer's CACHE_KEY_PREFIX, empty by
	// default. It is not Sluice's own key prefix, which its own keys keep.
	Prefix string
	// Jitter is the most a key's TTL is lengthened beyond its unit, in
	// whole seconds: the peer's EXPIRATION_JITTER_MAX_SECONDS. Zero: none.
	Jitter time.Duration
}

// Validate checks the jitter as engine.PeerWindow takes it.
func (p *PeerKeys) Validate() error {
	l := engine.Limit{Algorithm: engine.PeerWindow, Rate: 1, Period: time.Second, Jitter: p.Jitter}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("rlsconfig: peer keys: %w", err)
	}
	return nil
}

// Append appends the peer's key of rule r for a descriptor of domain with
// entries at now, and returns it with the limit to count it under; false,
// with dst as it was and r's own limit, when r counts in Sluice's key (r.Key):
// a rule with Sluice's own fields, and the rare descriptor whose peer key
// would be longer than a key may be (engine.MaxKeyLen), whose count is
// then not shared with the peer's pods. r must be limited (not Unlimited).
func (p *PeerKeys) Append(dst []byte, domain string, entries []Entry, r *Rule, now time.Time) ([]byte, engine.Limit, bool) {
	div := int64(r.Limit.Period / time.Second)
	if r.Own || div <= 0 || r.Limit.Period%time.Second != 0 {
		return dst, r.Limit, false
	}
	start := len(dst)
	dst = append(dst, p.Prefix...)
	dst = append(dst, domain...)
	dst = append(dst, '_')
	for i, e := range entries {
		dst = append(dst, e.Key...)
		dst = append(dst, '_')
		if r.shared != nil && r.shared[i] != "" {
			dst = append(dst, r.shared[i]...)
		} else {
			dst = append(dst, e.Value...)
		}
		dst = append(dst, '_')
	}
	dst = strconv.AppendInt(dst, now.Unix()/div*div, 10)
	if len(dst)-start > engine.MaxKeyLen {
		return dst[:start], r.Limit, false
	}
	return dst, engine.Limit{Algorithm: engine.PeerWindow, Rate: r.Limit.Rate, Period: r.Limit.Period, Jitter: p.Jitter}, true
}
