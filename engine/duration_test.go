package engine

import (
	"errors"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  error
	}{
		{"500ms", 500 * time.Millisecond, nil},
		{"1s", time.Second, nil},
		{"1m", time.Minute, nil},
		{"1h", time.Hour, nil},
		{"1d", 24 * time.Hour, nil},
		{"1h30m", 90 * time.Minute, nil},
		{"1d12h", 36 * time.Hour, nil},
		{"1.5s", 1500 * time.Millisecond, nil},
		{".5d", 12 * time.Hour, nil},
		{"10us", 10 * time.Microsecond, nil},
		{"10µs", 10 * time.Microsecond, nil},
		{"0s", 0, nil},
		{"60", 0, ErrDurationNoUnit},
		{"1h30", 0, ErrDurationNoUnit},
		{"", 0, ErrDurationSyntax},
		{"s", 0, ErrDurationSyntax},
		{"1x", 0, ErrDurationSyntax},
		{"1 s", 0, ErrDurationSyntax},
		{"1e3s", 0, ErrDurationSyntax},
		{"-1s", 0, ErrDurationSign},
		{"+1s", 0, ErrDurationSign},
		{"106752d", 0, ErrDurationRange},
		{"99999999999999999999h", 0, ErrDurationRange},
		{"9223372036854775807ns", 1<<63 - 1, nil},
		{"9223372036854775807ns1ns", 0, ErrDurationRange},
	} {
		got, err := ParseDuration(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func BenchmarkParseDuration(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseDuration("1h30m"); err != nil {
			b.Fatal(err)
		}
	}
}
