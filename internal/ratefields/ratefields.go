// Package ratefields formats the rate-limit fields that both HTTP-facing
// doors write: the IETF httpapi draft's RateLimit-Policy and RateLimit
// structured fields (draft-ietf-httpapi-ratelimit-headers-09 and later) and
// whole seconds rounded up, as Retry-After and every reset are given. It
// is one place so that the gRPC door's response_headers_to_add and the
// HTTP check's own headers cannot drift apart.
package ratefields

import (
	"strconv"
	"time"
)

// Seconds rounds d up to whole seconds: a client that waits that long finds
// the window renewed. Zero or less is 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// AppendPolicy appends the draft's RateLimit-Policy item,
// `"name";q=quota;w=window`.
func AppendPolicy(dst []byte, name string, quota, window int64) []byte {
	dst = appendString(dst, name)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, quota, 10)
	dst = append(dst, ";w="...)
	return strconv.AppendInt(dst, window, 10)
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
