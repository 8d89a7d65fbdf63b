package engine

import (
	"errors"
	"time"
)

// Duration syntax errors. They are fixed values, so that parsing a period on
// the hot path allocates nothing even when it fails.
var (
	ErrDurationSyntax = errors.New("must be a duration with a unit, such as 500ms, 1s, 1m, 1h, 1d or 1h30m")
	ErrDurationNoUnit = errors.New("needs a unit, such as 1s, 500ms, 1m, 1h or 1d")
	ErrDurationSign   = errors.New("must be positive")
	ErrDurationRange  = errors.New("is too long")
)

// ParseDuration reads a period as commands and policy files write it: Go's
// time.ParseDuration syntax (500ms, 1s, 1m, 1h, 1h30m, 1.5s, 10us) plus a day
// unit, d, of 24 hours (1d, 1d12h). A bare number is refused with
// ErrDurationNoUnit rather than guessed at, since "60" could mean seconds or
// milliseconds. A sign is refused: a period is never negative. The errors
// are the Err* values above; Validate on the Limit bounds the result.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, ErrDurationSyntax
	}
	if s[0] == '-' || s[0] == '+' {
		return 0, ErrDurationSign
	}
	var total uint64
	for s != "" {
		// The number: digits, optionally a fraction.
		var whole uint64
		i := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if whole > (1<<63-1)/10 {
				return 0, ErrDurationRange
			}
			whole = whole*10 + uint64(s[i]-'0')
		}
		digits := i
		var frac, scale uint64 = 0, 1
		if i < len(s) && s[i] == '.' {
			i++
			for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
				if scale < 1e18 { // further digits are below a nanosecond
					frac = frac*10 + uint64(s[i]-'0')
					scale *= 10
				}
				digits++
			}
		}
		if digits == 0 {
			return 0, ErrDurationSyntax
		}
		// The unit.
		j := i
		for j < len(s) && s[j] != '.' && (s[j] < '0' || s[j] > '9') {
			j++
		}
		if j == i {
			if s == "" || i == len(s) {
				return 0, ErrDurationNoUnit
			}
			return 0, ErrDurationSyntax
		}
		unit, ok := durationUnit(s[i:j])
		if !ok {
			return 0, ErrDurationSyntax
		}
		if whole > (1<<63-1)/unit {
			return 0, ErrDurationRange
		}
		v := whole*unit + uint64(float64(frac)*(float64(unit)/float64(scale)))
		total += v
		if total > 1<<63-1 {
			return 0, ErrDurationRange
		}
		s = s[j:]
	}
	return time.Duration(total), nil
}

func durationUnit(u string) (uint64, bool) {
	switch u {
	case "ns":
		return uint64(time.Nanosecond), true
	case "us", "µs", "μs":
		return uint64(time.Microsecond), true
	case "ms":
		return uint64(time.Millisecond), true
	case "s":
		return uint64(time.Second), true
	case "m":
		return uint64(time.Minute), true
	case "h":
		return uint64(time.Hour), true
	case "d":
		return uint64(24 * time.Hour), true
	}
	return 0, false
}

// ParsePeriod reads a limit's period: a duration as ParseDuration reads it,
// within MinPeriod and MaxPeriod. On failure it returns why, worded to
// follow the value it was given ("needs a unit: did you mean 60s …?"), so
// that every door and the policies file explain a bad period alike. It
// allocates only when it fails.
func ParsePeriod(s string) (time.Duration, string) {
	d, err := ParseDuration(s)
	switch {
	case errors.Is(err, ErrDurationNoUnit):
		return 0, "needs a unit: did you mean " + s + "s (seconds) or " + s + "ms (milliseconds)?"
	case err != nil:
		return 0, err.Error()
	case d < MinPeriod || d > MaxPeriod:
		return 0, "must be between 1ms and 3650d"
	}
	return d, ""
}
