package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"
)

// The concurrency limiter: at most Limit leases of a key held at once,
// each acquired before a piece of work and released after it, or expiring
// by itself TTL after it was last acquired, so that a client that crashed
// cannot hold a slot for ever. Unlike the six rate algorithms it counts
// what is in flight, not what happened over a period.

// Bounds on lease parameters.
const (
	// MaxLeases is the largest Limit: each held lease is one entry of the
	// key's state, in Redis and in memory.
	MaxLeases = 100_000
	// maxLeaseIDLen bounds a lease id, in bytes.
	maxLeaseIDLen = 128
)

// Concurrency is a concurrency policy's limit: at most Limit leases of a
// key held at once, each ending TTL after it was last acquired.
type Concurrency struct {
	Limit int64
	TTL   time.Duration
}

// LeaseRequest asks for one of Limit leases of Key, held for TTL unless
// released or acquired again (renewed) before then.
type LeaseRequest struct {
	Key   string
	Limit int64
	TTL   time.Duration
	// ID names the lease. Acquiring an ID that is held renews that lease:
	// no second slot is taken. A store needs it; the service generates one
	// (NewLeaseID) when a client gives none.
	ID string
	// OnFailure says what answers when the shared store cannot; zero means
	// the Guard's default.
	OnFailure FailureMode
}

// Validate checks the key, limit, TTL and id, as *ParamError.
func (r *LeaseRequest) Validate() error {
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	if r.Limit < 1 || r.Limit > MaxLeases {
		return &ParamError{Param: "limit", Value: itoa(r.Limit), Reason: "must be between 1 and " + itoa(MaxLeases)}
	}
	if r.TTL < MinPeriod || r.TTL > MaxPeriod {
		return &ParamError{Param: "lease_ttl", Value: r.TTL.String(), Reason: "must be between 1ms and 3650d"}
	}
	return ValidateLeaseID(r.ID)
}

// ValidateLeaseID checks a lease id: 1 to 128 bytes (maxLeaseIDLen).
func ValidateLeaseID(id string) error {
	if id == "" {
		return &ParamError{Param: "lease_id", Value: `""`, Reason: "must not be empty"}
	}
	if len(id) > maxLeaseIDLen {
		return &ParamError{Param: "lease_id", Value: "of " + strconv.Itoa(len(id)) + " bytes",
			Reason: "must be at most " + strconv.Itoa(maxLeaseIDLen) + " bytes"}
	}
	return nil
}

// LeaseDecision is the answer to a LeaseRequest.
type LeaseDecision struct {
	Allowed bool
	// Limit is the request's Limit.
	Limit int64
	// Remaining is how many more leases would be admitted now.
	Remaining int64
	// RetryAfter is, when refused, how long until the oldest lease held
	// expires (a release may free a slot sooner); zero when admitted.
	RetryAfter time.Duration
	// ID is the lease's id: the request's.
	ID string
	// Renewed says the ID was held: its lease was renewed, no slot taken.
	Renewed bool
	// Path says what decided: the store, or a failure mode.
	Path Path
}

// Leaser holds leases. It is implemented by the in-memory store and by the
// Redis store (package upstream), and wrapped by the Guard, which answers
// by failure mode while Redis cannot. Its methods are safe for concurrent
// use. Leases never pass through the batcher or the deny cache: a
// concurrency refusal is never remembered, since a slot freed through
// another sidecar must be usable at once.
type Leaser interface {
	// Acquire takes a lease of r.Key when fewer than r.Limit are held, or
	// renews r.ID's when it is held; expired leases are dropped first.
	// Invalid parameters are a *ParamError. An error that the key alone
	// met (its state is of another kind) wraps ErrLeaseState; any other
	// error means the store could not answer. Unlike Store.Submit, the
	// caller bounds the wait with ctx.
	Acquire(ctx context.Context, r LeaseRequest) (LeaseDecision, error)
	// Release frees key's lease id and reports whether it was held:
	// releasing twice, or after it expired, is false and harmless.
	Release(ctx context.Context, key, id string) (bool, error)
}

// ErrLeaseState is wrapped by a Leaser's error that the key alone met:
// the store answered, so no failure mode applies.
var ErrLeaseState = errors.New("the key holds state of another kind")

// NewLeaseID returns a random lease id: 16 hex digits.
func NewLeaseID() string {
	// math/rand/v2's generator is seeded from the system's randomness:
	// ids that clients cannot guess, without a system call per lease.
	var b [16]byte
	return string(strconv.AppendUint(b[:0], rand.Uint64()|1<<63, 16)[:16])
}
