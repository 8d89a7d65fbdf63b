package engine

import (
	"context"
	"sync"
	"time"
)

// Store decides requests against the state it keeps: the Redis store
// (package upstream), the in-memory store (package memstore), or the chain
// in front of Redis (package chain), which is a Store wrapping a Store.
//
// Deciding is asynchronous, so that an event loop hands a batch over and
// goes on serving while the batch is at Redis; a caller that may block
// uses Wait.
type Store interface {
	// Submit decides reqs[i] into res[i], in order, as if the requests
	// came one after another; len(res) must be at least len(reqs). It
	// calls done with the batch's error once every result is in.
	//
	// A request that fails alone (invalid parameters, a script error on
	// its key) sets its res[i].Err and the others are still decided. The
	// error given to done is for the batch as a whole — the store
	// unreachable, the deadline passed — and then no res[i] may be
	// trusted.
	//
	// done runs exactly once: before Submit returns when the store answers
	// at once (the in-memory store, a deny cache hit, an open breaker),
	// else later, on another goroutine. It must be quick and must not
	// wait on the store. reqs and res belong to the store until done
	// runs; a request's Key may alias a buffer that the caller reuses
	// after that (the RESP server passes its read buffer), so a store
	// copies any key it keeps.
	//
	// A store that waits on anything (a network, another caller) bounds
	// the wait itself: done runs by deadline, or, when deadline is zero,
	// by the store's own documented default (the batcher's Timeout, the
	// Redis client's read timeout). Callers on the decision path pass a
	// zero deadline, so that no request pays for reading the clock.
	// Submit is safe for concurrent use.
	Submit(reqs []Request, res []Result, deadline time.Time, done func(error))

	// Reset forgets key's state under every algorithm, and under each of
	// limits (a multi-limit policy's, which keep their state by name), so
	// that its next request finds the full capacity. The caller bounds the
	// wait with ctx. Safe for concurrent use.
	Reset(ctx context.Context, key string, limits ...NamedLimit) error
}

// Wait submits reqs to s and waits for their results: Submit for a caller
// that may block (a tool, a test, a store's own synchronous method). It
// returns done's error. Once warm it allocates nothing.
func Wait(s Store, reqs []Request, res []Result, deadline time.Time) error {
	w := waiters.Get().(*waiter)
	s.Submit(reqs, res, deadline, w.done)
	w.mu.Lock()
	for !w.landed {
		w.cond.Wait()
	}
	err := w.err
	w.landed, w.err = false, nil
	w.mu.Unlock()
	waiters.Put(w)
	return err
}

// waiter is how Wait waits, pooled with done bound to it. It waits on a
// sync.Cond rather than a channel: a pooled channel made inside a
// testing/synctest bubble must not be used outside it, and the bubble
// counts a goroutine in Cond.Wait as durably blocked.
type waiter struct {
	mu     sync.Mutex
	cond   sync.Cond
	landed bool  // guarded by mu
	err    error // guarded by mu
	done   func(error)
}

var waiters = sync.Pool{New: func() any {
	w := &waiter{}
	w.cond.L = &w.mu
	w.done = func(err error) {
		w.mu.Lock()
		w.err, w.landed = err, true
		w.mu.Unlock()
		w.cond.Signal()
	}
	return w
}}
