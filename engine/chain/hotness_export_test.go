package chain

import (
	"hash/maphash"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// CountAnother counts n requests at now of another key that shares key's
// slot and tag in the hot table (under alg; 0 for a multi-limit
// request's key): a collision, whose requests add up with key's.
func (g *Grants) CountAnother(key string, alg engine.Algorithm, n int, now time.Time) {
	x := hotHash(maphash.String(g.seed, key), alg)
	for range n {
		g.hot.count(x^1<<20, now, 1) // bit 20: neither the slot's nor the tag's
	}
}
