// Package engine is Sluice's decision core: the types every other part speaks
// (Limit, Request, Decision), their validation, the one asynchronous Store
// contract (Submit, and Wait for a caller that may block), and the six
// rate-limiting algorithms as one pure step (Step), with a seventh that no
// user names: envoyproxy/ratelimit's window in its own keys (PeerWindow,
// peer.go), which the Envoy door counts with during a rolling update.
//
// The algorithms are pure functions of (state, now, request) → (state,
// decision): no I/O, no goroutines, no wall clock inside. Time is passed in as
// integer microseconds since the Unix epoch, the same unit the Lua scripts
// compute in, so that the in-memory store and Redis reach identical decisions
// for identical inputs. Every intermediate value stays below 2^53 (Validate
// enforces the bounds), which keeps Lua's doubles exact.
//
// Owned quota (grant.go): a Request with Grant takes its cost as a take
// does and hands the units to the caller, who spends them later without
// asking the store, for as long as the decision's Hold says; one with
// Refund gives back what was not spent, as far as that stays exact. The
// store keeps no record of a grant: the decision's Anchor names it, and
// grant.go says why the fleet stays within the limit per algorithm.
//
// The stores live beside it, each in a package of its own: memstore (the
// in-memory store, built on Step), upstream (Redis, running the same
// algorithms in Lua), and chain (guard, deny cache and batcher in front of
// Redis, each a Store wrapping the next). enginetest holds the conformance
// tables every store runs.
//
// engine imports only the standard library and the chosen libraries; it never
// imports a door, a store or upstream: they depend on it, not the other way
// round.
package engine
