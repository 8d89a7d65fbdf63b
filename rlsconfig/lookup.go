package rlsconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Entry is one key/value pair of a request's descriptor, in request order.
type Entry struct {
	Key, Value string
}

// Rule is what applies to one descriptor of a request: a configured
// rate_limit, or a limit Envoy sent with the descriptor.
type Rule struct {
	// Key is the state to count under: the domain, each entry of the
	// request's descriptor (the concrete value, or the wildcard pattern of
	// an entry matched under share_threshold) and the period. It does not
	// depend on which rule matched, as the peer's cache key does not, and
	// holds the period but not the rate: a changed unit starts a new count,
	// a raised or lowered limit keeps the count already used, as with the
	// peer. A key that would pass MaxKeyLen is shortened to a digest.
	Key string
	// Limit is what the store decides with. Rate 0 means every request is
	// over the limit: see RefusesAll. Unset for an unlimited rule.
	Limit engine.Limit
	// RequestsPerUnit and Unit are what the response's current_limit
	// reports. For a Sluice period, Unit is the shortest unit at least as
	// long as the period, and RequestsPerUnit the requests per period: a
	// client that paces itself by them is never refused.
	RequestsPerUnit uint32
	Unit            Unit
	Name            string   // current_limit's name; what replaces refers to
	Unlimited       bool     // OK without asking the store
	Shadow          bool     // decide and count, but answer OK
	Quota           bool     // quota_mode: over limit only when every quota rule of the request is
	Replaces        []string // names of the rules this one replaces in the same request
	// OnFailure is the rule's on_failure; FailDefault defers to the door's.
	OnFailure engine.FailureMode
	// RefusalTakesNothing is Sluice's own rule for a hit over the limit:
	// refused and not counted. Without it (refusal_takes_nothing: false,
	// the default) a hit is counted as the peer's INCRBY counts it, even
	// over the limit (a charge, engine.Request's Charge), which is what
	// costs charged at stream end rely on. A sliding log, which cannot
	// count past its limit, always takes nothing.
	RefusalTakesNothing bool
	// Metadata is the descriptor's metadata, which the peer returns as
	// response dynamic metadata for the descriptors that passed. Shared:
	// read only.
	Metadata map[string]any
	// StatsKey is the name the peer gives this rule's statistics
	// (domain.key_value.key …), shaped by detailed_metric, value_to_metric
	// and share_threshold as there.
	StatsKey string
	// Label names the rule in Sluice's metrics: the peer's statistics name
	// of the configured descriptor (domain and each composite key on the
	// way to it), which, unlike StatsKey, never holds a request's value,
	// so that the number of series is bounded by the configuration. A
	// limit Envoy sent is labelled domain + OverrideLabel.
	Label string
	// Source is where the rule is defined, as file:line; empty for a limit
	// Envoy sent.
	Source string
	// Own says the rule names one of Sluice's own counting fields
	// (algorithm, period, burst): it counts in Sluice's keys even where
	// the door counts the others in the peer's (PeerKeys).
	Own bool
	// shared is, per entry, the wildcard pattern the entry is counted
	// under (share_threshold), or "": nil when none is. The peer's key
	// holds it in place of the value, as Key does.
	shared []string
}

// OverrideLabel ends the Label of every limit Envoy sent with a
// descriptor: their keys come from requests, so they share one series per
// domain.
const OverrideLabel = ".envoy_limit"

// RefusesAll reports whether every request is over the limit without
// asking the store: requests_per_unit 0.
func (r *Rule) RefusesAll() bool { return !r.Unlimited && r.Limit.Rate == 0 }

// MaxKeyLen bounds Rule.Key, leaving room within engine.MaxKeyLen for the
// prefix a door adds.
const MaxKeyLen = 512

// Lookup finds the rule for one descriptor of a request to domain, as the
// peer does. At each level of the configuration, in order: the entry's key
// and value exactly, then the wildcards of that level in file order, then
// the key alone. A rule applies only at the level where the request's
// descriptor ends: a longer or shorter descriptor does not pick up the
// rule of another level. False when the domain is unknown, the descriptor
// is empty, or nothing applies.
func (c *Config) Lookup(domain string, entries []Entry) (Rule, bool) {
	if c == nil {
		return Rule{}, false
	}
	d := c.domains[domain]
	if d == nil || len(entries) == 0 {
		return Rule{}, false
	}
	level := d.root
	var (
		found  *node
		shared []string // per entry: the wildcard pattern counted under, or ""
		vtm    strings.Builder
	)
	n := len(domain)
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	vtm.Grow(n)
	vtm.WriteString(domain)
	for i, e := range entries {
		// The peer joins key and value with '_' and matches on the result,
		// so key "a" with value "b_c" and key "a_b" with value "c" meet.
		composite := e.Key + "_" + e.Value
		next := level.children[composite]
		wildKey := ""
		if next == nil {
			for _, w := range level.wild {
				if globMatch(w.parts, composite) {
					next, wildKey = level.children[w.key], w.key
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = level.children[e.Key]
		}
		if wildKey != "" && next.share {
			if shared == nil {
				shared = make([]string, len(entries))
			}
			shared[i] = strings.TrimPrefix(next.pattern, e.Key+"_")
		}
		// The peer's value_to_metric statistics name, built as it walks.
		vtm.WriteByte('.')
		vtm.WriteString(e.Key)
		if next != nil {
			v := ""
			switch {
			case wildKey != "" && shared != nil && shared[i] != "":
				v = shared[i]
			case wildKey != "" && next.valueToMetric:
				v = e.Value
			case wildKey != "":
				v = strings.TrimPrefix(wildKey, e.Key+"_")
			case byValue || next.valueToMetric:
				v = e.Value
			}
			if v != "" {
				vtm.WriteByte('_')
				vtm.WriteString(v)
			}
		}
		if next != nil && next.rule != nil && i == len(entries)-1 {
			found = next
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		level = next
	}
	if found == nil {
		return Rule{}, false
	}
	r := found.rule
	rule := Rule{
		Limit: r.limit, RequestsPerUnit: r.requestsPerUnit, Unit: r.unit, Name: r.name,
		Unlimited: r.unlimited, Shadow: r.shadow, Quota: r.quota, Replaces: r.replaces,
		OnFailure: r.onFailure, Metadata: r.metadata, Label: found.path, Source: r.source,
		Own: r.own, shared: shared,
		RefusalTakesNothing: r.takesNothing || r.limit.Algorithm == engine.SlidingLog,
	}
	if !r.unlimited {
		rule.Key = stateKey(domain, entries, shared, r.limit.Period)
	}
	switch {
	case r.detailed:
		rule.StatsKey = detailedKey(domain, entries, shared)
	default:
		rule.StatsKey = vtm.String()
	}
	return rule, true
}

// detailedKey is the peer's detailed_metric statistics name: every entry
// with its request value, or its wildcard pattern under share_threshold.
func detailedKey(domain string, entries []Entry, shared []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		switch {
		case shared != nil && shared[i] != "":
			b.WriteByte('_')
			b.WriteString(shared[i])
		case shared != nil && e.Value == "":
		default:
			// Without share_threshold the peer writes key_ even for an
			// empty value.
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// Override builds the rule for a descriptor that carries its own limit
// from Envoy (the descriptor's limit field). As with the peer it applies
// whatever the configuration says for the descriptor, with no name, no
// shadow mode and no replaces, fixed window, counted under the same key a
// configured rule of the same unit would use; and only in a configured
// domain: false for an unknown one. requestsPerUnit 0 refuses everything.
// A unit that is not one (UNKNOWN) is an error.
func (c *Config) Override(domain string, entries []Entry, requestsPerUnit uint32, unit Unit) (Rule, bool, error) {
	if !c.HasDomain(domain) {
		return Rule{}, false, nil
	}
	d := unit.Duration()
	if d == 0 {
		return Rule{}, false, fmt.Errorf("rlsconfig: the descriptor's limit has no valid unit (%v)", unit)
	}
	var b strings.Builder
	b.WriteString(domain)
	b.WriteByte('.')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return Rule{
		Key:             stateKey(domain, entries, nil, d),
		Limit:           engine.Limit{Algorithm: engine.FixedWindow, Rate: int64(requestsPerUnit), Period: d},
		RequestsPerUnit: requestsPerUnit,
		Unit:            unit,
		StatsKey:        b.String(),
		Label:           domain + OverrideLabel,
	}, true, nil
}

// Descriptor is one descriptor of a request.
type Descriptor struct {
	Entries []Entry
	// Override is the limit Envoy sent with the descriptor, or nil.
	Override *Override
}

// Override is a limit Envoy sends with a descriptor.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// Match is one descriptor's outcome: Found with the Rule that applies, or
// not found (the descriptor is OK, with no current_limit).
type Match struct {
	Rule  Rule
	Found bool
	// Replaced is set when a rule was found but another rule of the same
	// request replaces it by name: it is then not Found and not charged.
	Replaced bool
}

// Resolve finds the rules of a whole request, in descriptor order, and
// applies replaces as the peer does: the names that any found rule
// replaces (unlimited rules included) drop every other found rule of the
// request with that name, except unlimited ones. Its error is an Override
// with no valid unit.
func (c *Config) Resolve(domain string, ds []Descriptor) ([]Match, error) {
	out := make([]Match, len(ds))
	var replacing map[string]bool
	for i, d := range ds {
		if d.Override != nil {
			r, ok, err := c.Override(domain, d.Entries, d.Override.RequestsPerUnit, d.Override.Unit)
			if err != nil {
				return nil, err
			}
			out[i] = Match{Rule: r, Found: ok}
			continue
		}
		r, ok := c.Lookup(domain, d.Entries)
		out[i] = Match{Rule: r, Found: ok}
		if ok && len(r.Replaces) > 0 {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			for _, name := range r.Replaces {
				replacing[name] = true
			}
		}
	}
	if replacing == nil {
		return out, nil
	}
	for i := range out {
		m := &out[i]
		if m.Found && !m.Rule.Unlimited && m.Rule.Name != "" && replacing[m.Rule.Name] {
			m.Found, m.Replaced = false, true
		}
	}
	return out, nil
}

// globMatch reports whether s matches a pattern split at its '*'s, each of
// which matches any run of bytes, the empty one included.
func globMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(s, first) {
		return false
	}
	s = s[len(first):]
	if len(s) < len(last) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[:len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// stateKey writes domain|key=value|key~pattern…@period, escaping the
// separators, so that no two different descriptors share a key.
func stateKey(domain string, entries []Entry, shared []string, period time.Duration) string {
	var b strings.Builder
	n := len(domain) + 24 // the period, and a few escapes
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	b.Grow(n)
	escape(&b, domain)
	for i, e := range entries {
		b.WriteByte('|')
		escape(&b, e.Key)
		if shared != nil && shared[i] != "" {
			b.WriteByte('~')
			escape(&b, shared[i])
		} else {
			b.WriteByte('=')
			escape(&b, e.Value)
		}
	}
	b.WriteByte('@')
	appendPeriod(&b, period)
	k := b.String()
	if len(k) <= MaxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	b.Reset()
	escape(&b, domain)
	head := b.String()
	if len(head) > 64 {
		head = head[:64]
	}
	return head + "|#" + hex.EncodeToString(sum[:])
}

const hexDigits = "0123456789ABCDEF"

func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '|', '=', '~', '@', '#':
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		default:
			b.WriteByte(c)
		}
	}
}
