package chain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/sluice-rl/sluice/engine"
)

// The Guard's leases: Acquire goes to the shared store's Leaser, and when
// that cannot answer, to the request's failure mode, as a decision does. A
// lease the local store granted is released there, so the guard remembers
// which leases came from it (a bounded LRU; a lease it forgot is still
// looked for there when the shared store does not hold it).

// leaseRef names one lease.
type leaseRef struct{ key, id string }

// guardLeases is the Guard's lease state.
type guardLeases struct {
	shared  engine.Leaser // nil: the guard holds no leases
	local   engine.Leaser // nil: engine.FailLocal acquires as engine.FailOpen
	timeout time.Duration
	once    sync.Once
	max     int
	origins *lru.Cache[leaseRef, struct{}] // leases granted locally; made on first use
}

// ErrNoLeases is a lease request to a guard whose store holds none.
var ErrNoLeases = errors.New("this store holds no leases")

// ErrNotReleased is Release's answer while the shared store fails: the
// lease could not be released there, and expires by itself at its TTL.
var ErrNotReleased = errors.New("the upstream Redis is failing: the lease was not released; it expires by itself at its lease_ttl")

var _ engine.Leaser = (*Guard)(nil)

func (g *Guard) originsLRU() *lru.Cache[leaseRef, struct{}] {
	gl := &g.leases
	gl.once.Do(func() {
		gl.origins, _ = lru.New[leaseRef, struct{}](gl.max) // max > 0: NewGuard checked
	})
	return gl.origins
}

// Acquire implements Leaser: by the shared store while it answers, else
// by the request's failure mode.
func (g *Guard) Acquire(ctx context.Context, r engine.LeaseRequest) (engine.LeaseDecision, error) {
	gl := &g.leases
	if gl.shared == nil {
		return engine.LeaseDecision{}, ErrNoLeases
	}
	if err := r.Validate(); err != nil {
		return engine.LeaseDecision{}, err
	}
	if probe, ok := g.admit(); ok {
		cctx, cancel := context.WithTimeout(ctx, gl.timeout)
		d, err := gl.shared.Acquire(cctx, r)
		cancel()
		if err == nil || errors.Is(err, engine.ErrInvalid) || errors.Is(err, engine.ErrLeaseState) {
			g.record(nil, probe)
			if err == nil && d.Allowed {
				g.dropLocal(ctx, r.Key, r.ID)
			}
			return d, err
		}
		g.record(err, probe)
	}
	g.fallback.Add(1)
	switch g.mode(&engine.Request{OnFailure: r.OnFailure}) {
	case engine.FailLocal:
		if gl.local == nil {
			break
		}
		r.Limit = shareCount(r.Limit, g.share()) // r is a copy: this sidecar's share (share.go)
		d, err := gl.local.Acquire(ctx, r)
		if err != nil {
			return d, err
		}
		d.Path = engine.PathLocal
		if d.Allowed {
			// The key aliases the caller's buffer; the LRU keeps it.
			g.originsLRU().Add(leaseRef{strings.Clone(r.Key), strings.Clone(r.ID)}, struct{}{})
		}
		return d, nil
	case engine.FailClosed:
		return engine.LeaseDecision{Limit: r.Limit, ID: r.ID, RetryAfter: g.probeEvery, Path: engine.PathFailClosed}, nil
	}
	return engine.LeaseDecision{Allowed: true, Limit: r.Limit, Remaining: r.Limit - 1, ID: r.ID, Path: engine.PathFailOpen}, nil
}

// dropLocal releases a lease that the local store granted while the shared
// store was failing, now that the shared store holds it: from here on it
// lives there alone.
func (g *Guard) dropLocal(ctx context.Context, key, id string) {
	gl := &g.leases
	if gl.local == nil {
		return
	}
	if g.originsLRU().Remove(leaseRef{key, id}) {
		_, _ = gl.local.Release(ctx, key, id)
	}
}

// Release implements Leaser: a lease the local store granted is released
// there; any other in the shared store, and then in the local store too if
// the shared store did not hold it (the guard may have forgotten where the
// lease came from). While the shared store fails, a lease it holds cannot
// be released: ErrNotReleased.
func (g *Guard) Release(ctx context.Context, key, id string) (bool, error) {
	gl := &g.leases
	if gl.shared == nil {
		return false, ErrNoLeases
	}
	if err := engine.ValidateKey(key); err != nil {
		return false, err
	}
	if err := engine.ValidateLeaseID(id); err != nil {
		return false, err
	}
	ref := leaseRef{key, id}
	if gl.local != nil && g.originsLRU().Remove(ref) {
		return gl.local.Release(ctx, key, id)
	}
	var err error
	if probe, ok := g.admit(); ok {
		cctx, cancel := context.WithTimeout(ctx, gl.timeout)
		var held bool
		held, err = gl.shared.Release(cctx, key, id)
		cancel()
		if err == nil || errors.Is(err, engine.ErrInvalid) || errors.Is(err, engine.ErrLeaseState) {
			g.record(nil, probe)
			if held || err != nil {
				return held, err
			}
		} else {
			g.record(err, probe)
		}
	} else {
		err = ErrNotReleased
	}
	if gl.local != nil {
		if held, _ := gl.local.Release(ctx, key, id); held {
			return true, nil
		}
	}
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, ErrNotReleased):
		return false, err
	}
	return false, fmt.Errorf("%w (%v)", ErrNotReleased, err)
}
