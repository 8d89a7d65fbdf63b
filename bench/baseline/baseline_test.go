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
		want   []string // each reply, as fmt prints it
	}{
		// Burst 2 at 1 a minute: three at once, then refused, with the
		// wait for one emission interval.
		{"gcra", baseline.GCRA, []any{2, 1, 60, 1}, []string{
			"[0 3 2 -1 60]", "[0 3 1 -1 120]", "[0 3 0 -1 180]", "[1 3 0 60 180]"}},
		// Capacity 3 at 1 a minute.
		{"token", baseline.Token, []any{3, 1, 60000, 1}, []string{
			"[1 3 2 0]", "[1 3 1 0]", "[1 3 0 0]", "[0 3 0 60000]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, want := range tc.want {
				v, err := rdb.Eval(t.Context(), tc.script.Source, []string{tc.name}, tc.args...).Result()
				if err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprint(v); got != want {
					t.Errorf("request %d: %s; want %s", i, got, want)
				}
			}
		})
	}
}
