package upstream_test

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/upstream"
)

// TestGrantsHotCold: a key that moves between cold (plain takes) and hot
// (grants and refunds) and back decides the same on Redis, through the
// batch library, as in memory, decision by decision, anchors and holds
// included, on one server and on Cluster.
func TestGrantsHotCold(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		clock := enginetest.NewClock(enginetest.Epoch)
		mem, err := memstore.New(memstore.Config{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		prefix := "hotcold:"
		s := newStore(t, upstream.Config{Client: top.client, Prefix: prefix, Now: clock.Now})
		if err := s.Check(context.Background()); err != nil || s.Scripts() != "functions" {
			t.Fatalf("Check: %v, %s; want the batch library in use", err, s.Scripts())
		}
		var red engine.Store = &ttlChecked{Store: s, tb: t, client: top.client, pattern: prefix + "*"}
		enginetest.HotCold(t, mem, red, clock, "hc")
	})
}
