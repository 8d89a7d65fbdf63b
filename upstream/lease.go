package upstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/lua"
)

// The concurrency limiter's leases, kept in Redis so that every sidecar
// sees every lease: one call of the lease script per acquire or release,
// on the key's one sorted set (lua/lease.lua). Leases are not batched: an
// acquire is answered as soon as Redis has run it. An acquire carries its
// context's deadline on Redis's clock, as a batch call does (deadline.go),
// from the estimate the batch calls keep: one Redis starts after it takes
// no lease.

var _ engine.Leaser = (*Store)(nil)

// LeaseKey returns the Redis key that holds key's leases: beside its rate
// states, in the same hash slot.
func (s *Store) LeaseKey(key string) string { return s.prefix + "{" + key + "}:lease" }

// Acquire implements engine.Leaser.
func (s *Store) Acquire(ctx context.Context, r engine.LeaseRequest) (engine.LeaseDecision, error) {
	if err := r.Validate(); err != nil {
		return engine.LeaseDecision{}, err
	}
	var deadline int64
	if d, ok := ctx.Deadline(); ok {
		deadline = s.deadlineOn(ctx, s.LeaseKey(r.Key), d)
	}
	args := []any{"acquire", r.Limit, r.TTL.Microseconds(), r.ID, deadline}
	if s.now != nil {
		args = append(args, s.now().UnixMicro())
	}
	reply, err := s.lease(ctx, r.Key, args)
	if err != nil {
		return engine.LeaseDecision{}, err
	}
	v, err := ints(reply, 5)
	if err != nil {
		return engine.LeaseDecision{}, err
	}
	return engine.LeaseDecision{Allowed: v[0] == 1, Limit: v[1], Remaining: v[2],
		RetryAfter: engine.Micros(v[3]), Renewed: v[4] == 1, ID: r.ID}, nil
}

// Release implements engine.Leaser.
func (s *Store) Release(ctx context.Context, key, id string) (bool, error) {
	if err := engine.ValidateKey(key); err != nil {
		return false, err
	}
	if err := engine.ValidateLeaseID(id); err != nil {
		return false, err
	}
	args := []any{"release", id}
	if s.now != nil {
		args = append(args, s.now().UnixMicro())
	}
	reply, err := s.lease(ctx, key, args)
	if err != nil {
		return false, err
	}
	n, ok := reply.(int64)
	if !ok {
		return false, fmt.Errorf("upstream: eval lease: reply is %T, want an integer", reply)
	}
	return n == 1, nil
}

// lease runs the lease script on key's leases: EVALSHA, then EVAL if Redis
// lost the script. An error the script met on the key alone (it holds
// another type) wraps engine.ErrLeaseState.
func (s *Store) lease(ctx context.Context, key string, args []any) (any, error) {
	keys := []string{s.LeaseKey(key)}
	reply, err := s.client.EvalSha(ctx, lua.Lease.SHA, keys, args...).Result()
	if isNoScript(err) {
		reply, err = s.client.Eval(ctx, lua.Lease.Source, keys, args...).Result()
	}
	if err == nil {
		return reply, nil
	}
	if redis.HasErrorPrefix(err, "LATE") {
		s.noteLate()
		return nil, fmt.Errorf("upstream: eval lease: %s: %w", keys[0], errLate)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		unavail := false
		for _, p := range unavailable {
			unavail = unavail || redis.HasErrorPrefix(err, p)
		}
		if !unavail {
			return nil, fmt.Errorf("upstream: eval lease: %s: %w: %v", keys[0], engine.ErrLeaseState, err)
		}
	}
	return nil, fmt.Errorf("upstream: eval lease: %w", err)
}

// ints reads a reply of n integers.
func ints(reply any, n int) ([]int64, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != n {
		return nil, fmt.Errorf("upstream: eval lease: want %d integers in the reply, got %T", n, reply)
	}
	out := make([]int64, n)
	for i, v := range vals {
		if out[i], ok = v.(int64); !ok {
			return nil, fmt.Errorf("upstream: eval lease: reply field %d is %T, want an integer", i, v)
		}
	}
	return out, nil
}
