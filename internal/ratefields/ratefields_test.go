package ratefields

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

func TestFields(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{string(appendPolicy(nil, "api", 100, 60)), `"api";q=100;w=60`},
		{string(AppendRateLimit(nil, "api", 50, 30)), `"api";r=50;t=30`},
		{string(appendPolicy(nil, `a"b\c`, 1, 1)), `"a\"b\\c";q=1;w=1`},
		{string(AppendRateLimit(nil, "é\n", 0, 1)), `"___";r=0;t=1`},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {time.Minute, 60}} {
		if got := Seconds(tc.d); got != tc.want {
			t.Errorf("Seconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// Issue 28: RateLimit-Policy advertised a burst as the rate. q over w is
// the sustained rate for every algorithm, and a burst only ever a vendor
// parameter.
func TestLimitPolicy(t *testing.T) {
	lim := func(a engine.Algorithm, rate int64, period time.Duration, burst int64) engine.Limit {
		return engine.Limit{Algorithm: a, Rate: rate, Period: period, Burst: burst}
	}
	for _, tc := range []struct {
		name string
		l    engine.Limit
		want string
	}{
		{"gcra 100/min burst 20 (was q=21;w=60)", lim(engine.GCRA, 100, time.Minute, 20), `"p";q=100;w=60;sluice-burst=21`},
		{"token bucket 10/s capacity 50 (was q=50;w=1)", lim(engine.TokenBucket, 10, time.Second, 50), `"p";q=10;w=1;sluice-burst=50`},
		{"leaky bucket", lim(engine.LeakyBucket, 5, time.Second, 20), `"p";q=5;w=1;sluice-burst=20`},
		{"fixed window", lim(engine.FixedWindow, 1000, time.Hour, 0), `"p";q=1000;w=3600`},
		{"sliding window: one less than the rate", lim(engine.SlidingWindow, 70, 24*time.Hour, 0), `"p";q=69;w=86400`},
		{"sliding window of a small rate: under 90%, still the truth", lim(engine.SlidingWindow, 5, time.Second, 0), `"p";q=4;w=1`},
		{"sliding log", lim(engine.SlidingLog, 5, 15*time.Minute, 0), `"p";q=5;w=900`},
		{"half a second: one whole second", lim(engine.FixedWindow, 10, 500*time.Millisecond, 0), `"p";q=20;w=1`},
		{"rounded down, not up", lim(engine.GCRA, 10, 1500*time.Millisecond, 1), `"p";q=13;w=2;sluice-burst=2`},
		{"a period rounded up to whole seconds", lim(engine.FixedWindow, 3, 1500*time.Millisecond, 0), `"p";q=4;w=2`},
		{"w grows until q keeps 90% (1.33 would be 1)", lim(engine.FixedWindow, 1, 1500*time.Millisecond, 0), `"p";q=2;w=3`},
		{"a large rate stays exact", lim(engine.FixedWindow, 999_999_999, 1_000_000_001*time.Microsecond, 0), `"p";q=1000999997;w=1001`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.Validate(); err != nil {
				t.Fatalf("the row's limit is invalid: %v", err)
			}
			got := string(AppendLimitPolicy(nil, "p", tc.l))
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
			q, w := sustained(tc.l)
			advertised := float64(q) / float64(w)
			actual := float64(tc.l.Rate) / tc.l.Period.Seconds()
			if advertised > actual*(1+1e-12) || advertised < 0.9*actual && tc.l.Rate >= 10 {
				t.Fatalf("q/w = %g a second; the limit sustains %g", advertised, actual)
			}
		})
	}
}
