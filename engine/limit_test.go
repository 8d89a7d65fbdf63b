package engine

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	gcra := Limit{Algorithm: GCRA, Rate: 10, Period: time.Second, Burst: 5}
	with := func(f func(*Request)) Request {
		r := Request{Key: "k", Limit: gcra, Cost: 1}
		f(&r)
		return r
	}
	tests := []struct {
		name    string
		req     Request
		param   string // "" means valid
		message string // a part of the error text
	}{
		{"valid", with(func(*Request) {}), "", ""},
		{"cost zero is a look", with(func(r *Request) { r.Cost = 0 }), "", ""},
		{"cost equal to capacity", with(func(r *Request) { r.Cost = 6 }), "", ""},
		{"no algorithm", with(func(r *Request) { r.Limit.Algorithm = 0 }), "algorithm", "unknown algorithm"},
		{"algorithm out of range", with(func(r *Request) { r.Limit.Algorithm = 99 }), "algorithm", "unknown algorithm"},
		{"zero period", with(func(r *Request) { r.Limit.Period = 0 }), "period", "between 1ms and 3650 days"},
		{"negative period", with(func(r *Request) { r.Limit.Period = -time.Second }), "period", "between"},
		{"sub-millisecond period", with(func(r *Request) { r.Limit.Period = 999 * time.Microsecond }), "period", "between"},
		{"period past ten years", with(func(r *Request) { r.Limit.Period = MaxPeriod + 1 }), "period", "between"},
		{"longest period", with(func(r *Request) { r.Limit.Period = MaxPeriod; r.Limit.Burst = 0 }), "", ""},
		{"zero rate", with(func(r *Request) { r.Limit.Rate = 0 }), "rate", "between 1 and"},
		{"negative rate", with(func(r *Request) { r.Limit.Rate = -5 }), "rate", "between 1 and"},
		{"huge rate", with(func(r *Request) { r.Limit.Rate = 1 << 62 }), "rate", "between 1 and"},
		{"rate finer than a microsecond", with(func(r *Request) { r.Limit.Rate = 2_000_000 }), "rate", "more than one per microsecond"},
		{"negative burst", with(func(r *Request) { r.Limit.Burst = -1 }), "burst", "between 0 and"},
		{"huge burst", with(func(r *Request) { r.Limit.Burst = 1 << 62 }), "burst", "between 0 and"},
		{"burst that takes decades to refill", with(func(r *Request) {
			r.Limit = Limit{Algorithm: GCRA, Rate: 1, Period: 24 * time.Hour, Burst: 10_000}
		}), "burst", "more than 3650 days"},
		{"token bucket needs a capacity", with(func(r *Request) {
			r.Limit = Limit{Algorithm: TokenBucket, Rate: 1, Period: time.Second}
		}), "capacity", "between 1 and"},
		{"window takes no burst", with(func(r *Request) {
			r.Limit = Limit{Algorithm: FixedWindow, Rate: 1, Period: time.Second, Burst: 3}
		}), "burst", "takes no burst"},
		{"window limit is called limit", with(func(r *Request) {
			r.Limit = Limit{Algorithm: SlidingWindow, Rate: 0, Period: time.Second}
		}), "limit", "between 1 and"},
		{"sliding log bounded", with(func(r *Request) {
			r.Limit = Limit{Algorithm: SlidingLog, Rate: MaxLogRate + 1, Period: time.Second}
		}), "limit", "between 1 and 100000"},
		{"empty key", with(func(r *Request) { r.Key = "" }), "key", "must not be empty"},
		{"long key", with(func(r *Request) { r.Key = strings.Repeat("k", MaxKeyLen+1) }), "key", "at most 1024 bytes"},
		{"negative cost", with(func(r *Request) { r.Cost = -1 }), "cost", "must not be negative"},
		{"cost past capacity", with(func(r *Request) { r.Cost = 7 }), "cost", "exceeds the capacity 6"},
		{"cost near 2^63", with(func(r *Request) { r.Cost = 1<<63 - 1 }), "cost", "exceeds the capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if tt.param == "" {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Param != tt.param {
				t.Fatalf("Validate() = %v; want a *ParamError naming %q", err, tt.param)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid")
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q does not say %q", err, tt.message)
			}
		})
	}
}

// Every valid limit keeps every time the algorithms compute below 2^53, so
// Lua's doubles stay exact. Check the extremes.
func TestBoundsStayBelow2To53(t *testing.T) {
	const limit53 = 1 << 53
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, GCRA} {
		l := Limit{Algorithm: alg, Rate: 1, Period: MaxPeriod, Burst: 1}
		if alg == GCRA {
			l.Burst = 0
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("%v: %v", alg, err)
		}
		l.Burst = MaxPeriod.Microseconds() / l.interval()
		if alg == GCRA {
			l.Burst--
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("%v at its largest capacity: %v", alg, err)
		}
		// The furthest time any state can hold: a full queue or bucket
		// behind a state already a full capacity ahead.
		if far := now + 2*l.Capacity()*l.interval(); far >= limit53 {
			t.Errorf("%v: %d is past 2^53", alg, far)
		}
	}
	if far := now + 2*MaxPeriod.Microseconds(); far >= limit53 {
		t.Errorf("windows: %d is past 2^53", far)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range Algorithms {
		for _, name := range []string{a.String(), a.Short(), strings.ToUpper(a.Short())} {
			got, err := ParseAlgorithm(name)
			if err != nil || got != a {
				t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", name, got, err, a)
			}
		}
	}
	if _, err := ParseAlgorithm("bucket"); err == nil || !strings.Contains(err.Error(), "must be one of") {
		t.Errorf("ParseAlgorithm(bucket) = %v; want an error listing the names", err)
	}
}

// A Validator over a batch answers each request as Validate does: a
// limit that failed is checked again, one that passed is not, and what
// follows the limit (the key, the cost against the capacity) is checked
// every time.
func TestValidatorAnswersAsValidate(t *testing.T) {
	gcra := Limit{Algorithm: GCRA, Rate: 10, Period: time.Second, Burst: 5}
	bad := Limit{Algorithm: GCRA, Rate: 0, Period: time.Second}
	window := Limit{Algorithm: FixedWindow, Rate: 3, Period: time.Second}
	multi := []NamedLimit{{Name: "a", Limit: gcra}, {Name: "b", Limit: window}}
	batch := []Request{
		{Key: "k", Limit: gcra, Cost: 1},
		{Key: "", Limit: gcra, Cost: 1},    // the limit passed; the key fails
		{Key: "k", Limit: gcra, Cost: 7},   // past the capacity
		{Key: "k", Limit: bad, Cost: 1},    // fails
		{Key: "k", Limit: bad, Cost: 1},    // fails again: not remembered
		{Key: "k", Limit: window, Cost: 3}, // another limit
		{Key: "k", Limit: window, Cost: 4}, // past its capacity
		{Key: "k", Limit: gcra, Cost: 1},   // back to the first
		{Key: "k", Limits: multi, Cost: 1},
		{Key: "k", Limits: []NamedLimit{{Name: "a", Limit: bad}, {Name: "b", Limit: window}}, Cost: 1},
		{Key: "k", Limit: gcra, Cost: -1},
	}
	var v Validator
	for i := range batch {
		want, got := batch[i].Validate(), v.Validate(&batch[i])
		if (want == nil) != (got == nil) || (want != nil && want.Error() != got.Error()) {
			t.Errorf("request %d: Validator says %v; Validate says %v", i, got, want)
		}
	}
}

// BenchmarkValidateBatch is a batch of 128 requests under one policy's
// limit, validated one by one (Validate) and by a Validator.
func BenchmarkValidateBatch(b *testing.B) {
	reqs := make([]Request, 128)
	for i := range reqs {
		reqs[i] = Request{Key: "k" + strconv.Itoa(i), Limit: Limit{Algorithm: GCRA, Rate: 1000, Period: time.Second, Burst: 10}, Cost: 1}
	}
	b.Run("each", func(b *testing.B) {
		for b.Loop() {
			for i := range reqs {
				if reqs[i].Validate() != nil {
					b.Fatal("invalid")
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/req")
	})
	b.Run("validator", func(b *testing.B) {
		for b.Loop() {
			var v Validator
			for i := range reqs {
				if v.Validate(&reqs[i]) != nil {
					b.Fatal("invalid")
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/req")
	})
}
