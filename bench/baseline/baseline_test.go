package baseline_test

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/bench/baseline"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// The baselines decide as their algorithms should: a baseline that
// answered wrongly would be no fair comparison.
func TestBaselinesDecide(t *testing.T) {
	r := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	for _, tc := range []struct {
		name   string
		script baseline.Script
		args   []any
		want   [][]int64
		slack  int64 // how much the last field may fall short: time passes between calls
	}{
		// Burst 2 at 1 a minute: three at once, then refused, with the
		// wait for one emission interval (seconds, rounded up).
		{"gcra", baseline.GCRA, []any{2, 1, 60, 1}, [][]int64{
			{0, 3, 2, -1, 60}, {0, 3, 1, -1, 120}, {0, 3, 0, -1, 180}, {1, 3, 0, 60, 180}}, 0},
		// Capacity 3 at 1 a minute: three, then refused with the wait for
		// one token in milliseconds, less what refilled meanwhile.
		{"token", baseline.Token, []any{3, 1, 60000, 1}, [][]int64{
			{1, 3, 2, 0}, {1, 3, 1, 0}, {1, 3, 0, 0}, {0, 3, 0, 60000}}, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, want := range tc.want {
				v, err := rdb.Eval(t.Context(), tc.script.Source, []string{tc.name}, tc.args...).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				ok := len(v) == len(want)
				for j := 0; ok && j < len(want); j++ {
					slack := int64(0)
					if j == len(want)-1 {
						slack = tc.slack
					}
					ok = v[j] <= want[j] && v[j] >= want[j]-slack
				}
				if !ok {
					t.Errorf("request %d: %v; want %v", i, v, fmt.Sprint(want))
				}
			}
		})
	}
}
