package respserver

import (
	"errors"
	"strconv"
)

// Argument parsers. Each returns a reason on failure ("" when it succeeds)
// and allocates nothing when it succeeds; the caller turns a reason into
// `ERR invalid <argument> '<value>': <reason>` with invalidArg.

const (
	reasonInteger = "must be an integer"
	reasonRange   = "must be an integer between -9223372036854775808 and 9223372036854775807"
)

// parseInt reads a base-10 64-bit integer exactly as Redis does
// (string2ll): no spaces, no plus sign, no fraction, no leading zeros, no
// "-0", so that each integer has one spelling.
func parseInt(b []byte) (int64, string) {
	digits := b
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || digits[0] < '0' || digits[0] > '9' || (digits[0] == '0' && len(b) > 1) {
		return 0, reasonInteger
	}
	n, err := atoi64(str(b))
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, reasonRange
		}
		return 0, reasonInteger
	}
	return n, ""
}

// atoi64 is strconv.ParseInt(s, 10, 64) by way of strconv.Atoi where int
// has 64 bits: Atoi parses a short decimal in a loop of its own, several
// times faster than ParseInt's general path, and every decision carries
// two or three such numbers.
func atoi64(s string) (int64, error) {
	if strconv.IntSize == 64 {
		n, err := strconv.Atoi(s)
		return int64(n), err
	}
	return strconv.ParseInt(s, 10, 64)
}

// parseCostPeek reads the optional tail of every decision command:
// [cost] [PEEK]. The cost defaults to 1.
func parseCostPeek(tail [][]byte) (cost int64, peek bool, msg string) {
	cost = 1
	if len(tail) > 0 && isPeek(tail[len(tail)-1]) {
		peek = true
		tail = tail[:len(tail)-1]
	}
	switch len(tail) {
	case 0:
	case 1:
		n, why := parseInt(tail[0])
		if why != "" {
			return 0, false, invalidArg("cost", tail[0], why)
		}
		cost = n
	default:
		return 0, false, invalidArg("option", tail[1], "expected PEEK")
	}
	return cost, peek, ""
}

func isPeek(b []byte) bool {
	return len(b) == 4 && b[0]|0x20 == 'p' && b[1]|0x20 == 'e' && b[2]|0x20 == 'e' && b[3]|0x20 == 'k'
}
