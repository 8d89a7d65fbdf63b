package rls

import (
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/rls/peerstats"
	"github.com/sluice-rl/sluice/rlsconfig"
)

// called counts one ShouldRateLimit and its response time in the peer's
// statistics, under the method name its gRPC interceptor uses.
func (s *Server) called(start time.Time) {
	s.stats.Call("ShouldRateLimit", time.Since(start))
}

// countHit counts descriptor i's decision in the peer's statistics, in
// the peer's terms: the count after this call's hits, as its INCRBY
// returns it. A charged decision's count is the limit less what is left
// (below zero when over); a refusal that took nothing, or a look without
// taking, adds the hits to the count it saw. Under
// --rls-stop-charging-when-over-limit the descriptors not charged are
// counted as if they had been, where the peer counts them with the count
// before.
func (s *Server) countHit(c *call, i int, r *rlsconfig.Rule, k int) {
	h := peerstats.Hit{Limit: uint64(r.RequestsPerUnit), Hits: uint64(c.hits[i]), Shadow: r.Shadow}
	switch {
	case k == noneAllowed:
		h.After = h.Hits
	case k >= 0:
		b, j := c.parts[k/partSize], k%partSize
		d, err := b.Result(j)
		if err != nil {
			return
		}
		if byFailureMode(b.Path(j)) {
			// The peer fails the call when Redis does; Sluice answers by
			// its failure mode, and counts the peer's error.
			s.stats.Error("redis_error")
		}
		h.Cached = b.Path(j) == engine.PathDenyCache
		used := d.Limit - d.Remaining
		if !d.Allowed && !b.Shadowed(j) && (r.RefusalTakesNothing || c.peeked) {
			used += c.hits[i]
		}
		h.After = uint64(max(used, 0))
	default:
		return
	}
	s.stats.Hit(r.StatsKey, h)
}
