//go:build race

package chain_test

// raceEnabled: the race detector's bookkeeping inflates the heap, so
// memory bounds are measured in a run without it (scripts/test runs one).
const raceEnabled = true
