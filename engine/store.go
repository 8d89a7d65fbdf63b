package engine

import "context"

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

	// Reset forgets key's state under every algorithm, so that its next
	// request finds the full capacity. Safe for concurrent use.
	Reset(ctx context.Context, key string) error
}
