package resp

import (
	"errors"
	"strconv"
	"unsafe"
)

// Argument helpers. A parser returns a reason on failure ("" when it
// succeeds), worded to follow "must …" or stand alone after the value, and
// allocates nothing when it succeeds; the server words the error around
// it, naming the argument.

const (
	reasonInteger = "must be an integer"
	reasonRange   = "must be an integer between -9223372036854775808 and 9223372036854775807"
)

// ParseInt reads a base-10 64-bit integer exactly as Redis does
// (string2ll): no spaces, no plus sign, no fraction, no leading zeros, no
// "-0", so that each integer has one spelling.
func ParseInt(b []byte) (int64, string) {
	digits := b
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || digits[0] < '0' || digits[0] > '9' || (digits[0] == '0' && len(b) > 1) {
		return 0, reasonInteger
	}
	n, err := atoi64(unsafe.String(unsafe.SliceData(b), len(b))) // not kept past the call
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

// Is reports whether arg, in any case, is the word lower (lower case
// ASCII): a command's name or an option, as Redis matches them, without
// allocating.
func Is(arg []byte, lower string) bool {
	if len(arg) != len(lower) {
		return false
	}
	for i, b := range arg {
		if Lower(b) != lower[i] {
			return false
		}
	}
	return true
}

// Lower is b in lower case, when it is an ASCII letter.
func Lower(b byte) byte {
	if b >= 'A' && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}
