package resp

import (
	"strconv"
	"strings"
)

// maxQuoted is how much of a client's value Quote repeats: an error reply
// is one line, and a 1 MB argument must not come back whole.
const maxQuoted = 64

// Quote renders a client's value as 'value', for an error reply: at most
// maxQuoted bytes, with anything but printable ASCII escaped as \xNN, the
// quote and the backslash escaped too, and a note of the length when it
// was cut.
func Quote(v []byte) string {
	var b strings.Builder
	b.WriteByte('\'')
	n := min(len(v), maxQuoted)
	Escape(&b, v[:n], true)
	b.WriteByte('\'')
	if n < len(v) {
		b.WriteString("... (")
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteString(" bytes)")
	}
	return b.String()
}

// Escape writes v with anything but printable ASCII as \xNN and, when
// quoted, the quote and the backslash escaped too: what Redis's unknown
// command error writes of a name (unquoted), and Quote (quoted).
func Escape(b *strings.Builder, v []byte, quoted bool) {
	const hex = "0123456789abcdef"
	for _, c := range v {
		switch {
		case quoted && (c == '\'' || c == '\\'):
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			b.WriteString(`\x`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
}

// AppendRepr quotes b as Redis's sdscatrepr does (MONITOR's lines):
// printable ASCII as it is, the quote and the backslash escaped, \n \r \t
// \a \b by name, any other byte as \xNN, between double quotes. An inline
// command line reads it back as b.
func AppendRepr(dst, b []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, ch := range b {
		switch ch {
		case '\\', '"':
			dst = append(dst, '\\', ch)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\a':
			dst = append(dst, '\\', 'a')
		case '\b':
			dst = append(dst, '\\', 'b')
		default:
			if ch >= ' ' && ch <= '~' {
				dst = append(dst, ch)
			} else {
				dst = append(dst, '\\', 'x', hex[ch>>4], hex[ch&15])
			}
		}
	}
	return append(dst, '"')
}
