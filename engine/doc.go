// Package engine is Sluice's decision core: the types every other part speaks
// (Limit, Request, Decision), the Store contract that the Redis store and the
// in-memory store implement, and the six rate-limiting algorithms.
//
// The algorithms are pure functions of (state, now, request) → (state,
// decision): no I/O, no goroutines, no wall clock inside. Time is passed in as
// integer microseconds since the Unix epoch, the same unit the Lua scripts
// compute in, so that the in-memory store and Redis reach identical decisions
// for identical inputs. Every intermediate value stays below 2^53 (Validate
// enforces the bounds), which keeps Lua's doubles exact.
//
// engine imports only the standard library and the chosen libraries; it never
// imports respserver or upstream: they depend on it, not the other way round.
package engine
