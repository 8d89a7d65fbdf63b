// Package ratefields formats the rate-limit fields that both HTTP-facing
// doors write: the IETF httpapi draft's RateLimit-Policy and RateLimit
// structured fields (draft-ietf-httpapi-ratelimit-headers-09 and later) and
// whole seconds rounded up, as Retry-After and every reset are given. It
// is one place so that the gRPC door's response_headers_to_add and the
// HTTP check's own headers cannot drift apart.
//
// The draft lets a client pace itself by RateLimit-Policy's q over w, or
// spend RateLimit's r and then wait t; both must hold for every algorithm.
// So q over w is the sustained rate, never a burst: a token bucket of 10 a
// second holding 50 says q=10;w=1, not q=50, and GCRA at 100 a minute with
// a burst of 20 says q=100;w=60, not q=21. What can be spent at once goes
// in a vendor parameter, sluice-burst, which a client that does not know
// it ignores.
package ratefields

import (
	"math/bits"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Seconds rounds d up to whole seconds: a client that waits that long finds
// the window renewed. Zero or less is 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// appendPolicy appends the draft's RateLimit-Policy item,
// `"name";q=quota;w=window`: right as it stands for a fixed window of
// whole seconds, such as the peer's rules. AppendLimitPolicy derives the
// item from any limit.
func appendPolicy(dst []byte, name string, quota, window int64) []byte {
	dst = appendString(dst, name)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, quota, 10)
	dst = append(dst, ";w="...)
	return strconv.AppendInt(dst, window, 10)
}

// burstParam is the vendor parameter that carries what a bucket or GCRA
// admits at once (engine.Limit.Capacity).
const burstParam = "sluice-burst"

// AppendLimitPolicy appends l's RateLimit-Policy item: its sustained rate
// as q over w (sustained), and for the algorithms that admit a burst above
// it, the burst as `;sluice-burst=N`.
func AppendLimitPolicy(dst []byte, name string, l engine.Limit) []byte {
	q, w := sustained(l)
	dst = appendPolicy(dst, name, q, w)
	switch l.Algorithm {
	case engine.TokenBucket, engine.LeakyBucket, engine.GCRA:
		dst = append(dst, ";"+burstParam+"="...)
		dst = strconv.AppendInt(dst, l.Capacity(), 10)
	}
	return dst
}

// sustained is l's sustained rate as the draft wants it: q units over w
// whole seconds, at which a client pacing itself is never refused. A
// period of whole seconds gives q = rate (one less for the sliding window
// counter) and w = period.
// Otherwise w is the first whole number of seconds from the period rounded
// up at which q, rounded down so that pacing at q/w is never faster than
// the limit, keeps at least 90% of the rate (10 per 500ms: q=20;w=1; 1 per
// 1.5s: q=1;w=2 would be 75%, so q=2;w=3).
func sustained(l engine.Limit) (q, w int64) {
	if l.Period <= 0 || l.Rate <= 0 {
		return max(l.Rate, 0), max(Seconds(l.Period), 1)
	}
	rate := l.Rate
	if l.Algorithm == engine.SlidingWindow && rate > 1 {
		// The counter rounds the oldest sub-window's share up, so a client
		// pacing at exactly the rate is refused about once a period; one
		// unit less per period never is (measured at precisions 1, 5, 6
		// and 10 by httpcheck's strategy test). Under a limit of 10 that
		// unit is more than a tenth of the rate: less to pace by, and true.
		rate--
	}
	w = Seconds(l.Period)
	if time.Duration(w)*time.Second == l.Period {
		return rate, w
	}
	// Units per try seconds = Rate × try / Period, q its floor and r the
	// remainder, in nanoseconds and 128 bits to stay exact: the quotient is
	// near Rate × try / Period, which a valid limit keeps far below 2^64.
	den := uint64(l.Period)
	for try := w; ; try++ {
		hi, lo := bits.Mul64(uint64(rate), uint64(try)*uint64(time.Second))
		q, r := bits.Div64(hi, lo, den)
		// q keeps at least 90% of q + r/den.
		if 9*float64(r)/float64(den) <= float64(q) || try >= w+100 {
			return int64(q), try
		}
	}
}

// AppendRateLimit appends the draft's RateLimit item,
// `"name";r=remaining;t=reset`.
func AppendRateLimit(dst []byte, name string, remaining, reset int64) []byte {
	dst = appendString(dst, name)
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, remaining, 10)
	dst = append(dst, ";t="...)
	return strconv.AppendInt(dst, reset, 10)
}

// appendString appends s as a structured field string (RFC 9651):
// printable ASCII in quotes, '"' and '\' escaped; any other byte becomes
// '_', since a string may hold nothing else.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '_')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
