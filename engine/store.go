package engine

import (
	"context"
	"time"
)

// Store decides requests against the state it keeps: the Redis store
// (package upstream) or the in-memory store (MemoryStore).
type Store interface {
	// Decide decides reqs[i] into res[i], in order, as if the requests came
	// one after another; len(res) must be at least len(reqs). A request that
	// fails alone (invalid parameters, a script error on its key) sets its
	// res[i].Err and the others are still decided. The returned error is for
	// the batch as a whole — ctx done, the store unreachable — and then no
	// res[i] may be trusted. Decide is safe for concurrent use.
	//
	// A request's Key may alias a buffer that the caller reuses once Decide
	// returns (the RESP server passes its read buffer): a store copies any
	// key it keeps.
	//
	// A store that waits on anything (a network, another caller) bounds
	// the wait itself, as the Batcher does with its round-trip deadline:
	// callers on the decision path pass a context without a deadline, so
	// that no request pays for a timer.
	Decide(ctx context.Context, reqs []Request, res []Result) error

	// Reset forgets key's state under every algorithm, and under each of
	// limits (a multi-limit policy's, which keep their state by name), so
	// that its next request finds the full capacity. Safe for concurrent
	// use.
	Reset(ctx context.Context, key string, limits ...NamedLimit) error
}

// Submitter is a Store that can also decide without its caller waiting, so
// that an event loop hands a batch over and goes on serving while the
// batch is at Redis.
type Submitter interface {
	Store
	// Submit decides reqs into res as Decide does, and calls done with the
	// batch's error (Decide's return value) once every result is in. done
	// runs exactly once: before Submit returns when the store answers at
	// once, else later, on another goroutine; it must be quick and must
	// not call back into the store. reqs and res belong to the store until
	// done runs. As with Decide, the store bounds its own waits.
	Submit(reqs []Request, res []Result, done func(error))
}

// Submit hands reqs to s without waiting when s is a Submitter, and
// otherwise decides them at once: done runs as Submitter.Submit says.
func Submit(s Store, reqs []Request, res []Result, done func(error)) {
	if a, ok := s.(Submitter); ok {
		a.Submit(reqs, res, done)
		return
	}
	done(s.Decide(context.Background(), reqs, res))
}

// Sender is a Store that sends a batch without its caller waiting for the
// round trip, so that a Batcher sends round trips from its callers'
// goroutines (an event loop's among them) instead of starting one for
// each. Send decides reqs into res as Decide does; it returns once the
// batch is on its way, and done runs when every result is in, or with an
// error by deadline. done runs exactly once, on another goroutine or,
// when the store answers at once, before Send returns; it must be quick.
// reqs and res belong to the store until done runs.
type Sender interface {
	Store
	Send(deadline time.Time, reqs []Request, res []Result, done func(error))
}

// Sending makes a store that can only wait a Sender: each batch is decided
// by Decide, by its deadline, on a goroutine of its own.
func Sending(s Store) Sender { return sending{s} }

type sending struct{ Store }

func (s sending) Send(deadline time.Time, reqs []Request, res []Result, done func(error)) {
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := s.Decide(ctx, reqs, res)
		cancel()
		done(err)
	}()
}
