package engine

import "strconv"

// Several limits on one key, decided all or nothing: "10 a second and
// 1,000 a day". Checked one after another, a request refused by the second
// would already have been charged by the first, and a client that backs
// off would pay twice; so a store decides all of a request's limits in one
// atomic step (one script call on Redis, one set of locks in memory): a
// refused request takes nothing from any of them, an admitted one takes its
// cost from all.

// MaxLimits is the most limits one request (one policy) may hold: each is
// one more key a decision reads.
const MaxLimits = 8

// MaxLimitName is the longest name a limit may have, in bytes.
const MaxLimitName = 64

// NamedLimit is one limit of a multi-limit policy. Its state lives under
// its name, so that reordering a policy's limits keeps every count, and
// renaming or dropping one leaves state that simply expires.
type NamedLimit struct {
	Name  string
	Limit Limit
}

// ValidateLimitName checks a limit's name: 1 to MaxLimitName letters,
// digits, '_' or '-'. The name is part of a Redis key, after the hash
// tag's closing brace, so it must hold neither braces nor the ':' that
// separates a key's parts.
func ValidateLimitName(name string) error {
	ok := name != "" && len(name) <= MaxLimitName
	for _, r := range name {
		ok = ok && (r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}
	if !ok {
		return &ParamError{Param: "limit name", Value: strconv.Quote(name),
			Reason: "must be 1 to " + strconv.Itoa(MaxLimitName) + " letters, digits, _ or -"}
	}
	return nil
}

// Multi reports whether r is decided against several limits (Limits)
// rather than one (Limit).
func (r *Request) Multi() bool { return len(r.Limits) > 0 }

// Capacity is the most r may cost: its limit's capacity, or the least of
// its limits'.
func (r *Request) Capacity() int64 {
	if !r.Multi() {
		return r.Limit.Capacity()
	}
	c := r.Limits[0].Limit.Capacity()
	for _, l := range r.Limits[1:] {
		c = min(c, l.Limit.Capacity())
	}
	return c
}

// eachLimit calls f with each of r's limits (Limit, or each of Limits)
// until one fails, and returns its error.
func (r *Request) eachLimit(f func(Limit) error) error {
	if !r.Multi() {
		return f(r.Limit)
	}
	for _, l := range r.Limits {
		if err := f(l.Limit); err != nil {
			return err
		}
	}
	return nil
}

// HasLeaky reports whether r is decided by a leaky bucket, whose reply
// carries the delay to wait.
func (r *Request) HasLeaky() bool {
	if !r.Multi() {
		return r.Limit.Algorithm == LeakyBucket
	}
	for _, l := range r.Limits {
		if l.Limit.Algorithm == LeakyBucket {
			return true
		}
	}
	return false
}

// validateLimits checks a multi-limit request's limits: how many, their
// names, each limit.
func validateLimits(ls []NamedLimit) error {
	if len(ls) > MaxLimits {
		return &ParamError{Param: "limits", Value: strconv.Itoa(len(ls)),
			Reason: "a request holds at most " + strconv.Itoa(MaxLimits) + " limits"}
	}
	for i, l := range ls {
		if err := ValidateLimitName(l.Name); err != nil {
			return err
		}
		for _, o := range ls[:i] {
			if o.Name == l.Name {
				return &ParamError{Param: "limit name", Value: strconv.Quote(l.Name), Reason: "given twice"}
			}
		}
		if err := l.Limit.Validate(); err != nil {
			return err
		}
		if l.Limit.Algorithm == PeerWindow {
			// Its key is the peer's, whole: a limit's name has no place in it.
			return &ParamError{Param: "algorithm", Value: PeerWindow.String(), Reason: "a multi-limit request takes none"}
		}
	}
	return nil
}

// Combine is the one decision a multi-limit request replies with, from
// its limits' own decisions (parts, in the order of its limits). Refused,
// it is the refusing limit's, the one with the longest retry-after when
// several refuse (the earliest of equals): no sooner may the client retry.
// Admitted, it is the limit's with the least remaining (the earliest of
// equals): the one that binds next. The delay is the longest any leaky
// limit asks an admitted request to wait; an admitted grant's Hold is the
// shortest of its limits' (its Anchor is the binding limit's: a refund
// reads each limit's own from Detail). Both stores combine with this
// function, so that they answer alike.
func Combine(parts []Decision) Decision {
	d := parts[Binding(parts)]
	d.Delay = 0
	if d.Allowed {
		for _, p := range parts {
			d.Delay = max(d.Delay, p.Delay)
			d.Hold = min(d.Hold, p.Hold)
		}
	}
	return d
}

// Binding is the index of the part Combine takes its fields from.
func Binding(parts []Decision) int {
	best, allowed := 0, true
	for j := range parts {
		p := &parts[j]
		if !p.Allowed {
			if allowed || p.RetryAfter > parts[best].RetryAfter {
				best = j
			}
			allowed = false
			continue
		}
		if allowed && p.Remaining < parts[best].Remaining {
			best = j
		}
	}
	return best
}

// SameLimits reports whether two requests' limits are the same: a policy
// reloaded with other limits must not meet the old one's remembered
// refusal, and only requests under the same limits share a run of
// decisions.
func SameLimits(a, b []NamedLimit) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true // one policy's own slice: the usual case, at no cost
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
