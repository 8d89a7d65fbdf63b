package rlsconfig

import (
	"strings"
	"time"
)

// Unit is a rate limit unit of Envoy's rate limit protocol. Its values are
// those of envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit, so
// the gRPC door converts with a plain integer conversion.
type Unit int32

// The units. UnitUnknown is what the protocol sends when no unit was set; it
// is never a valid unit of a limit.
const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

var unitNames = map[Unit]string{
	UnitUnknown: "UNKNOWN", UnitSecond: "SECOND", UnitMinute: "MINUTE", UnitHour: "HOUR",
	UnitDay: "DAY", UnitMonth: "MONTH", UnitYear: "YEAR", UnitWeek: "WEEK",
}

// String is the protocol's name, such as "MINUTE".
func (u Unit) String() string {
	if s, ok := unitNames[u]; ok {
		return s
	}
	return "UNIT(" + itoa(int64(u)) + ")"
}

// Duration is the unit's window as the peer counts it: a month is 30 days
// and a year 365, both counted from the Unix epoch. Zero for UnitUnknown or
// any value that is not a unit.
func (u Unit) Duration() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case UnitSecond:
		return time.Second
	case UnitMinute:
		return time.Minute
	case UnitHour:
		return time.Hour
	case UnitDay:
		return day
	case UnitWeek:
		return 7 * day
	case UnitMonth:
		return 30 * day
	case UnitYear:
		return 365 * day
	}
	return 0
}

// ParseUnit reads a unit as the peer does: the protocol's name in any case
// (second, Minute, HOUR). UNKNOWN, and anything else, is not a unit.
func ParseUnit(s string) (Unit, bool) {
	// strings.ToUpper as the peer uses it, so that exactly the spellings it
	// accepts are accepted.
	up := strings.ToUpper(s)
	for u, name := range unitNames {
		if u != UnitUnknown && name == up {
			return u, true
		}
	}
	return UnitUnknown, false
}

// unitsBySize lists the units from the shortest window to the longest.
var unitsBySize = []Unit{UnitSecond, UnitMinute, UnitHour, UnitDay, UnitWeek, UnitMonth, UnitYear}

// unitCovering is the shortest unit whose window is at least d: what
// current_limit reports for a Sluice period that no unit expresses.
func unitCovering(d time.Duration) Unit {
	for _, u := range unitsBySize {
		if u.Duration() >= d {
			return u
		}
	}
	return UnitYear
}
