package ratefields

import (
	"testing"
	"time"
)

func TestFields(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{string(AppendPolicy(nil, "api", 100, 60)), `"api";q=100;w=60`},
		{string(AppendRateLimit(nil, "api", 50, 30)), `"api";r=50;t=30`},
		{string(AppendPolicy(nil, `a"b\c`, 1, 1)), `"a\"b\\c";q=1;w=1`},
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
