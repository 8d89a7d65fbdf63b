package memstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
)

// TestInfo shows the states kept and the bound asked for, the default
// when none is.
func TestInfo(t *testing.T) {
	for _, tc := range []struct {
		maxKeys, keys int
		want          string
	}{
		{0, 0, "[[memory_store_keys 0] [memory_store_max_keys 100000] [memory_store_evictions 0]]"},
		{5000, 3, "[[memory_store_keys 3] [memory_store_max_keys 5000] [memory_store_evictions 0]]"},
	} {
		s, err := memstore.New(memstore.Config{MaxKeys: tc.maxKeys})
		if err != nil {
			t.Fatal(err)
		}
		res := make([]engine.Result, 1)
		for i := range tc.keys {
			req := []engine.Request{{Key: fmt.Sprint("k", i), Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}, Cost: 1}}
			if err := engine.Wait(s, req, res, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := fmt.Sprint(s.InfoMemory()); got != tc.want {
			t.Errorf("InfoMemory = %s, want %s", got, tc.want)
		}
		if got := fmt.Sprint(s.InfoLeases()); got != "[[memory_store_leases 0]]" {
			t.Errorf("InfoLeases = %s", got)
		}
	}
}
