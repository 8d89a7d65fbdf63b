package enginetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// ManyCallers proves that a store shared by many callers at once (a
// batcher, whose round trips carry several callers' requests) counts
// each caller's requests in its order. Each of callers goroutines decides
// rounds calls of size(caller) requests, cost 1, on a key of its own under
// limit l, and every request must leave exactly one less remaining than
// the one before it.
func ManyCallers(t *testing.T, s engine.Store, l engine.Limit, callers, rounds int, size func(caller int) int) {
	t.Helper()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("caller-", c)
			used := int64(0)
			for round := range rounds {
				reqs := make([]engine.Request, size(c))
				for i := range reqs {
					reqs[i] = engine.Request{Key: key, Limit: l, Cost: 1}
				}
				res := make([]engine.Result, len(reqs))
				if err := engine.Wait(s, reqs, res, time.Time{}); err != nil {
					t.Errorf("%s round %d: %v", key, round, err)
					return
				}
				for i, r := range res {
					used++
					if want := l.Capacity() - used; r.Err != nil || r.Decision.Remaining != want {
						t.Errorf("%s round %d request %d: %+v; want remaining %d", key, round, i, r, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
