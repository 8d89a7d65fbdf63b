package resp

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// Encoders for what RESP3 adds to redcon's RESP2 ones, each with the RESP2
// form Redis sends a client that did not say HELLO 3. proto is 2 or 3.
// Like redcon's, they append to dst and allocate nothing when it has room.

// AppendMapLen starts a map of n pairs: a RESP3 map, or under RESP2 the
// flat array of 2n elements Redis sends instead.
func AppendMapLen(dst []byte, n, proto int) []byte {
	if proto == 3 {
		dst = append(dst, '%')
		dst = strconv.AppendInt(dst, int64(n), 10)
		return append(dst, '\r', '\n')
	}
	return redcon.AppendArray(dst, 2*n)
}

// AppendNull is a null reply: RESP3's own, or RESP2's null bulk.
func AppendNull(dst []byte, proto int) []byte {
	if proto == 3 {
		return append(dst, "_\r\n"...)
	}
	return redcon.AppendNull(dst)
}

// AppendVerbatim writes text as Redis writes CLIENT LIST and CLIENT INFO:
// a RESP3 verbatim string of format txt, or a bulk string under RESP2.
func AppendVerbatim(dst, text []byte, proto int) []byte {
	if proto != 3 {
		return redcon.AppendBulk(dst, text)
	}
	dst = append(dst, '=')
	dst = strconv.AppendInt(dst, int64(len(text)+4), 10)
	dst = append(dst, "\r\ntxt:"...)
	dst = append(dst, text...)
	return append(dst, '\r', '\n')
}

// AppendLines writes a HELP reply: an array of status lines.
func AppendLines(dst []byte, lines []string) []byte {
	dst = redcon.AppendArray(dst, len(lines))
	for _, l := range lines {
		dst = redcon.AppendString(dst, l)
	}
	return dst
}
