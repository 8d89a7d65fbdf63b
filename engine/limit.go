package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Algorithm names one of the six rate-limiting algorithms.
type Algorithm uint8

// The algorithms. The zero value is not an algorithm, so a Limit left empty
// fails validation instead of silently meaning one of them.
const (
	FixedWindow   Algorithm = iota + 1 // one counter per aligned window
	SlidingLog                         // exact: one timestamp per admitted unit
	SlidingWindow                      // current and previous window counts, weighted
	TokenBucket                        // bursts up to capacity, refilled at rate
	LeakyBucket                        // a queue drained at rate: admits with a delay
	GCRA                               // redis-cell's CL.THROTTLE: one arrival time
	// PeerWindow is envoyproxy/ratelimit's fixed window in that service's
	// own keys (peer.go): what the Envoy door counts with during a rolling
	// update from the peer. It is no user's algorithm: not in Algorithms,
	// not parsed by ParseAlgorithm, so that no command or policy can name
	// it and reach a key outside Sluice's prefix.
	PeerWindow
)

// algorithmNames holds, per Algorithm, its canonical name (used in policies,
// metrics and INFO) and its short name (used in commands and Redis keys).
var algorithmNames = [...]struct{ long, short string }{
	FixedWindow:   {"fixed_window", "fixed"},
	SlidingLog:    {"sliding_log", "log"},
	SlidingWindow: {"sliding_window", "sliding"},
	TokenBucket:   {"token_bucket", "token"},
	LeakyBucket:   {"leaky_bucket", "leaky"},
	GCRA:          {"gcra", "gcra"},
	PeerWindow:    {"peer_window", "peer"},
}

// Algorithms lists every algorithm, in declaration order.
var Algorithms = []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, LeakyBucket, GCRA}

// Counted lists every algorithm a decision may be made by: Algorithms and
// PeerWindow, for the counters kept per algorithm.
var Counted = append(Algorithms[:len(Algorithms):len(Algorithms)], PeerWindow)

func (a Algorithm) valid() bool { return a >= FixedWindow && a <= PeerWindow }

// String returns the canonical name, such as "token_bucket".
func (a Algorithm) String() string {
	if !a.valid() {
		return "algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return algorithmNames[a].long
}

// Short returns the short name, such as "token": the suffix of its Redis key.
func (a Algorithm) Short() string {
	if !a.valid() {
		return a.String()
	}
	return algorithmNames[a].short
}

// ParseAlgorithm accepts the canonical or the short name, in any case.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms {
		if strings.EqualFold(s, algorithmNames[a].long) || strings.EqualFold(s, algorithmNames[a].short) {
			return a, nil
		}
	}
	return 0, &ParamError{Param: "algorithm", Value: strconv.Quote(s),
		Reason: "must be one of fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra"}
}

// Bounds on parameters. They keep every value the algorithms compute, in
// microseconds since the epoch, below 2^53, where Lua's doubles are exact.
const (
	MinPeriod  = time.Millisecond
	MaxPeriod  = 3650 * 24 * time.Hour // about ten years
	MaxRate    = 1_000_000_000_000     // per period, and the largest capacity or burst
	MaxLogRate = 100_000               // sliding log: the most units one period admits
	MaxKeyLen  = 1024                  // bytes
	// MaxPrecision is the most sub-windows a sliding window counter splits
	// its period into: each decision reads all of their counts.
	MaxPrecision = 100
)

// Limit is an algorithm and its parameters: what a policy or an inline
// command asks for. Two requests share state when their key and algorithm
// match, whatever their parameters, as redis-cell does.
type Limit struct {
	Algorithm Algorithm
	// Rate is how many units a Period admits: the limit of the window
	// algorithms, the refill rate of the token bucket, the drain rate of the
	// leaky bucket, the sustained rate of GCRA.
	Rate int64
	// Period is the window length, or the time over which Rate units refill.
	// Its resolution is one microsecond.
	Period time.Duration
	// Burst is the token bucket's capacity, the leaky bucket's queue size, or
	// GCRA's max_burst (GCRA then admits Burst+1 at once). The window
	// algorithms take no burst: it must be zero.
	Burst int64
	// Jitter is PeerWindow's alone: a key's expiry is its period plus up
	// to Jitter more, drawn at each write (the peer's
	// EXPIRATION_JITTER_MAX_SECONDS), in whole seconds as the peer's. The
	// other algorithms take none: it must be zero.
	Jitter time.Duration
	// Precision is how many sub-windows the sliding window counter splits
	// Period into; it must divide Period in whole microseconds. Zero means
	// 1: the current window and the previous one. Finer sub-windows make
	// the estimate closer to a true sliding window (see slidingWindow).
	// A state kept under one precision reads as empty under another. The
	// other algorithms take no precision: it must be zero.
	Precision int64
}

// Capacity is the most one request may cost, and the Limit a Decision reports.
func (l Limit) Capacity() int64 {
	switch l.Algorithm {
	case TokenBucket, LeakyBucket:
		return l.Burst
	case GCRA:
		return l.Burst + 1
	default:
		return l.Rate
	}
}

// periodMicros is the Period in the algorithms' unit.
func (l Limit) periodMicros() int64 { return int64(l.Period / time.Microsecond) }

// interval is the whole microseconds of the time one unit takes to refill
// or drain, for the bucket algorithms and GCRA: the bound Validate puts on
// a capacity is in these. The algorithms use the exact interval, emission.
func (l Limit) interval() int64 { return l.periodMicros() / l.Rate }

// emission is the exact time one unit takes to refill or drain.
func (l Limit) emission() emission {
	p := l.periodMicros()
	return emission{p: p, d: l.Rate, q: p / l.Rate, r: p % l.Rate}
}

// precision is the sliding window counter's number of sub-windows.
func (l Limit) precision() int64 { return max(l.Precision, 1) }

// rateName and burstName are the names a user knows the parameters by.
func (l Limit) rateName() string {
	switch l.Algorithm {
	case FixedWindow, SlidingLog, SlidingWindow, PeerWindow:
		return "limit"
	default:
		return "rate"
	}
}

func (l Limit) burstName() string {
	if l.Algorithm == GCRA {
		return "burst"
	}
	return "capacity"
}

// Validate reports the first parameter that is out of bounds, as a
// *ParamError that names it.
func (l Limit) Validate() error {
	if !l.Algorithm.valid() {
		return &ParamError{Param: "algorithm", Value: l.Algorithm.String(), Reason: "unknown algorithm"}
	}
	if l.Period < MinPeriod || l.Period > MaxPeriod {
		return &ParamError{Param: "period", Value: l.Period.String(),
			Reason: "must be between 1ms and 3650 days"}
	}
	maxRate := int64(MaxRate)
	if l.Algorithm == SlidingLog {
		maxRate = MaxLogRate
	}
	if l.Rate < 1 || l.Rate > maxRate {
		return &ParamError{Param: l.rateName(), Value: strconv.FormatInt(l.Rate, 10),
			Reason: "must be between 1 and " + strconv.FormatInt(maxRate, 10)}
	}
	if l.Precision != 0 && l.Algorithm != SlidingWindow {
		return &ParamError{Param: "precision", Value: strconv.FormatInt(l.Precision, 10),
			Reason: "the " + l.Algorithm.String() + " algorithm takes no precision"}
	}
	if l.Precision < 0 || l.Precision > MaxPrecision {
		return &ParamError{Param: "precision", Value: strconv.FormatInt(l.Precision, 10),
			Reason: "must be between 1 and " + strconv.Itoa(MaxPrecision)}
	}
	if l.Precision > 1 && l.periodMicros()%l.Precision != 0 {
		return &ParamError{Param: "precision", Value: strconv.FormatInt(l.Precision, 10),
			Reason: "must split period " + l.Period.String() + " into sub-windows of whole microseconds"}
	}
	if l.Jitter != 0 && l.Algorithm != PeerWindow {
		return &ParamError{Param: "jitter", Value: l.Jitter.String(),
			Reason: "the " + l.Algorithm.String() + " algorithm takes no jitter"}
	}
	switch l.Algorithm {
	case PeerWindow:
		return l.validatePeer()
	case FixedWindow, SlidingLog, SlidingWindow:
		if l.Burst != 0 {
			return &ParamError{Param: "burst", Value: strconv.FormatInt(l.Burst, 10),
				Reason: "the " + l.Algorithm.String() + " algorithm takes no burst"}
		}
		return nil
	}
	minBurst := int64(1)
	if l.Algorithm == GCRA {
		minBurst = 0
	}
	if l.Burst < minBurst || l.Burst > MaxRate-1+minBurst {
		return &ParamError{Param: l.burstName(), Value: strconv.FormatInt(l.Burst, 10),
			Reason: fmt.Sprintf("must be between %d and %d", minBurst, MaxRate-1+minBurst)}
	}
	t := l.interval()
	if t < 1 {
		return &ParamError{Param: "rate", Value: strconv.FormatInt(l.Rate, 10),
			Reason: "more than one per microsecond over period " + l.Period.String()}
	}
	if l.Capacity() > MaxPeriod.Microseconds()/t {
		return &ParamError{Param: l.burstName(), Value: strconv.FormatInt(l.Burst, 10),
			Reason: "refilling it at this rate would take more than 3650 days"}
	}
	return nil
}

// Request asks for one decision.
type Request struct {
	Key string
	// Limit is what the request is decided by, unless Limits is set.
	Limit Limit
	// Limits, when set, replaces Limit: a multi-limit policy's limits,
	// all of which must admit the request (multi.go). Its slice is shared
	// and read only: a policy's.
	Limits []NamedLimit
	// Detail, when not nil, has one element per limit of Limits: the store
	// writes each limit's own decision there (RL.ALLOW … DETAIL). It is
	// the caller's, shared by every copy of the request.
	Detail []Decision
	// Cost is how many units the request takes: 1 for a plain request, more
	// for a weighted one, 0 to look without taking anything.
	Cost int64
	// Peek asks for the decision the request would get, without changing
	// any state.
	Peek bool
	// Charge records a cost known only after the work (the tokens an LLM
	// answer used): it is taken even when it does not fit, so the budget
	// may go below zero and later requests are refused until it has
	// refilled. Decision.Allowed then says whether it fitted, and a
	// negative Remaining how far over the budget is. See charge in
	// algorithms.go for what it means per algorithm; the sliding log
	// takes none.
	Charge bool
	// Grant takes Cost units as a take does (all or nothing; a multi-limit
	// request's from every limit or from none) and hands them to the caller,
	// who spends them later without asking the store (the grant layer of
	// package chain; a reservation). The admitted decision's Anchor and Hold
	// say for how long they may be spent. Offered for FixedWindow,
	// SlidingWindow, TokenBucket and GCRA only: the sliding log keeps a time
	// per request and the leaky bucket a place in its queue, which units
	// spent later would falsify (ParamError). Not with Peek or Charge.
	Grant bool
	// Refund gives back Cost units that the admitted Grant named by Anchor
	// took and its holder did not spend, as far as that stays exact (see
	// refund in engine): windows take them off the count only while the
	// grant's window (sub-window) is the current one; buckets take back at
	// most the units the bucket has not refilled since the grant:
	// min(Cost, ceil((Anchor-now)/interval)), and never past full. A refund
	// is never refused: Decision.Allowed is true; Remaining is the key's
	// after it. Offered for the same algorithms as Grant.
	//
	// A multi-limit refund gives back to each limit by that limit's own
	// anchor, which it reads from Detail[j].Anchor (the grant's Detail,
	// kept by the caller: Detail must be set) before it writes its own
	// decisions there; Anchor is then the grant's combined Decision.Anchor.
	Refund bool
	// Anchor, with Refund, is the Decision.Anchor of the grant it gives
	// back to.
	Anchor int64
	// OnFailure says what decides when the store cannot answer in time;
	// zero means the Guard's default.
	OnFailure FailureMode
	// Durable asks that the decision be answered only once a replica holds
	// its charge (durable.go); zero: at once.
	Durable Durability
}

// FailureMode is what a request gets when the shared store cannot answer.
type FailureMode uint8

// The failure modes. FailDefault defers to the Guard's configured default.
const (
	FailDefault FailureMode = iota
	FailOpen                // allow: the API stays up, unlimited
	FailClosed              // deny: nothing passes until the store is back
	FailLocal               // the in-memory store enforces this sidecar's share of the limits alone (chain/share.go)
)

var failureModeNames = [...]string{FailDefault: "default", FailOpen: "allow", FailClosed: "deny", FailLocal: "local"}

func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return "failure(" + strconv.Itoa(int(m)) + ")"
}

// ParseFailureMode accepts allow, deny or local.
func ParseFailureMode(s string) (FailureMode, error) {
	for m := FailOpen; m <= FailLocal; m++ {
		if strings.EqualFold(s, failureModeNames[m]) {
			return m, nil
		}
	}
	return 0, &ParamError{Param: "on_failure", Value: strconv.Quote(s), Reason: "must be allow, deny or local"}
}

// Validate checks the limit (or limits), the key and the cost.
func (r *Request) Validate() error {
	var v Validator
	return v.Validate(r)
}

// Validator validates a batch's requests one after another, and checks
// a single-limit request's limit only when it differs from the last one
// that passed: a batch under one policy shares its limit, and
// Limit.Validate was most of Validate's cost on the Redis store's submit
// path (BenchmarkSubmitPath in package upstream). It answers as Validate
// does, request by request, since Limit.Validate depends on the limit's
// value alone. The zero value is ready; it is not safe for concurrent use.
type Validator struct {
	valid Limit // the last single limit that passed
	known bool  // valid is set
}

// Validate checks r as Request.Validate does.
func (v *Validator) Validate(r *Request) error {
	if r.Multi() {
		if err := validateLimits(r.Limits); err != nil {
			return err
		}
		if r.Detail != nil && len(r.Detail) != len(r.Limits) {
			return &ParamError{Param: "detail", Value: strconv.Itoa(len(r.Detail)),
				Reason: "must have one decision per limit, " + strconv.Itoa(len(r.Limits))}
		}
	} else if !v.known || r.Limit != v.valid {
		if err := r.Limit.Validate(); err != nil {
			return err
		}
		v.valid, v.known = r.Limit, true
	}
	return r.validateRest()
}

// validateRest checks what Validate checks after the limits.
func (r *Request) validateRest() error {
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	if r.Durable > DurableDisk {
		return &ParamError{Param: "durable", Value: r.Durable.String(), Reason: "must be none, replica or disk"}
	}
	if r.Cost < 0 {
		return &ParamError{Param: "cost", Value: strconv.FormatInt(r.Cost, 10), Reason: "must not be negative"}
	}
	if r.Grant || r.Refund {
		if err := r.validateOwned(); err != nil {
			return err
		}
	}
	if r.Charge {
		return r.validateCharge()
	}
	if c := r.Capacity(); r.Cost > c {
		return &ParamError{Param: "cost", Value: strconv.FormatInt(r.Cost, 10),
			Reason: "exceeds the capacity " + strconv.FormatInt(c, 10) + ", so it could never be allowed"}
	}
	return nil
}

// validateCharge checks what a charge may be: a cost of any size up to
// MaxRate (a charge larger than the capacity is taken as far as the
// capacity's worth of debt, see charge), on limits whose algorithms can
// owe. A multi-limit request's charge is taken by each of its limits.
func (r *Request) validateCharge() error {
	noLog := func(l Limit) error {
		if l.Algorithm == SlidingLog {
			return &ParamError{Param: "charge", Value: "on sliding_log",
				Reason: "the sliding log keeps a time per admitted request and has no room for a debt; use sliding_window"}
		}
		return nil
	}
	if err := r.eachLimit(noLog); err != nil {
		return err
	}
	switch {
	case r.Peek:
		return &ParamError{Param: "charge", Value: "with peek", Reason: "a charge always takes; a peek never does"}
	case r.Cost > MaxRate:
		return &ParamError{Param: "cost", Value: strconv.FormatInt(r.Cost, 10),
			Reason: "must be at most " + strconv.FormatInt(MaxRate, 10)}
	}
	return nil
}

// ValidateKey checks a key as every request's and every reset's: not
// empty, at most MaxKeyLen bytes.
func ValidateKey(key string) error {
	if key == "" {
		return &ParamError{Param: "key", Value: `""`, Reason: "must not be empty"}
	}
	if len(key) > MaxKeyLen {
		return &ParamError{Param: "key", Value: "of " + strconv.Itoa(len(key)) + " bytes",
			Reason: "must be at most " + strconv.Itoa(MaxKeyLen) + " bytes"}
	}
	return nil
}

// Decision is the answer to a Request. Every algorithm fills the same
// fields with the same meaning.
type Decision struct {
	Allowed bool
	// Limit is the most the key admits at once: Limit.Capacity().
	Limit int64
	// Remaining is how many more units of cost 1 would be admitted now,
	// never below zero, except in the decision of a Charge: there, below
	// zero, how many units the charge left the key over its budget. A
	// limit lowered on a live key answers 0 (see Step).
	Remaining int64
	// RetryAfter is how long until the same request would be admitted;
	// zero when it was admitted.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full capacity.
	ResetAfter time.Duration
	// Delay is how long an admitted request should wait before it proceeds:
	// the leaky bucket's place in its queue. Zero for the other algorithms.
	Delay time.Duration
	// Anchor, in an admitted Grant's decision, names the grant for a later
	// Refund, in µs on the store's clock: the fixed window's end, the
	// sliding window's current sub-window's end, the bucket's theoretical
	// time after the grant (token bucket, GCRA), in whole µs rounded down.
	// Zero otherwise.
	Anchor int64
	// Hold, in an admitted Grant's decision, is how long from the decision
	// its units may be spent: for the windows, until the (sub-)window ends;
	// for the buckets, Anchor - now, and at e after the decision at most
	// ceil((Hold-e)/interval) of the units left may be spent: they lapse as
	// the bucket refills, which is what keeps the fleet within the limit
	// (a bucket that refilled while its units sat in a grant would admit
	// them twice). Limit.Spendable computes it. Zero otherwise.
	Hold time.Duration
}

// Result is one request's outcome within a batch: a Decision, or the error
// that this request alone met.
type Result struct {
	Decision Decision
	Err      error
	// Path says what decided: the store, the deny cache, or a fallback.
	Path Path
	// At is the time the store decided at, in µs since the epoch, when
	// the store knows it without asking (the in-memory store's clock);
	// zero otherwise. A recording keeps it, so that a replay decides at
	// the very time the store did (package record).
	At int64
}

// Path is what decided a request, for INFO and metrics.
type Path uint8

// The paths. PathStore is the zero value: the store behind the wrappers
// (Redis, or the embedded in-memory store) decided.
const (
	PathStore      Path = iota
	PathDenyCache       // a remembered refusal, answered locally
	PathLocal           // the store failed; the in-memory store decided
	PathFailOpen        // the store failed; allowed by policy
	PathFailClosed      // the store failed; refused by policy
	PathGrant           // admitted from units the store granted this sidecar, without a round trip (package chain)
)

var pathNames = [...]string{PathStore: "store", PathDenyCache: "deny_cache", PathLocal: "local_fallback",
	PathFailOpen: "fail_open", PathFailClosed: "fail_closed", PathGrant: "grant"}

// Paths lists every path, in declaration order.
var Paths = []Path{PathStore, PathDenyCache, PathLocal, PathFailOpen, PathFailClosed, PathGrant}

func (p Path) String() string {
	if int(p) < len(pathNames) {
		return pathNames[p]
	}
	return "path(" + strconv.Itoa(int(p)) + ")"
}

// ErrInvalid is wrapped by every *ParamError, so callers can tell bad input
// (a client's fault) from a failing store.
var ErrInvalid = errors.New("invalid argument")

// ParamError names a parameter, the value it was given, and why that value
// is refused.
type ParamError struct {
	Param  string
	Value  string
	Reason string
}

func (e *ParamError) Error() string {
	return "invalid " + e.Param + " " + e.Value + ": " + e.Reason
}

func (e *ParamError) Unwrap() error { return ErrInvalid }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// MarshalText writes the mode as ParseFailureMode reads it, so that a
// FailureMode is a flag (flag.TextVar) and a config value.
func (m FailureMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads allow, deny or local.
func (m *FailureMode) UnmarshalText(b []byte) error {
	v, err := ParseFailureMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
