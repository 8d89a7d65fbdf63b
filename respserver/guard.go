package respserver

// Limits on what one client may send, checked as the bytes arrive and
// before anything parses them: a parser that trusts a multibulk count loops
// over it whether or not the arguments have arrived, so
// "*4444444444444444444\r\n" alone would spin for years, and a bulk or an
// inline line of any length would be buffered whole. Redis has the same
// limits, with the same errors.
const (
	// DefaultMaxArgs bounds the arguments of one command (Redis: 1M). No
	// Sluice command needs more than a few; RL.RESET takes up to 4095 keys.
	DefaultMaxArgs = 4096
	// maxInline bounds an inline (telnet-style) command line, as Redis does.
	maxInline = 64 << 10
)

// frameGuard follows RESP framing byte by byte across reads, and stops at
// the first byte that breaks a limit or the framing: the parser then only
// ever sees well-framed commands within the limits. (A bulk's closing CRLF
// is left to the parser, which checks it anyway.)
type frameGuard struct {
	state   guardState
	n       int64 // the header number being read
	sign    bool  // a sign was read before its digits
	left    int64 // bulks left in the current command
	skip    int64 // bytes left in the current bulk, CRLF included
	inline  int   // bytes of the current inline line
	maxArgs int64
	maxBulk int64
}

type guardState uint8

const (
	gStart guardState = iota
	gCount
	gCountLF
	gBulkHeader
	gBulkLen
	gBulkLenLF
	gBulkBody
	gInline
)

// The protocol errors, worded as Redis words them.
const (
	errMultibulkLength = "Protocol error: invalid multibulk length"
	errBulkLength      = "Protocol error: invalid bulk length"
	errInlineTooBig    = "Protocol error: too big inline request"
	errRequestTooBig   = "Protocol error: request larger than the server's limit"
)

// scan follows p. It returns how many bytes are fine and, if a frame
// breaks a limit, the protocol error for it. Every byte a client sends
// passes through here, so the loop works on local copies of the fields,
// which the compiler keeps in registers, and stores them back once.
func (g *frameGuard) scan(p []byte) (int, string) {
	state, n, sign, left, skip, inline := g.state, g.n, g.sign, g.left, g.skip, g.inline
	end, msg := len(p), ""
follow:
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch state {
		case gStart:
			if c == '*' {
				state, n, sign = gCount, 0, false
			} else if c != '\n' {
				state, inline = gInline, 1
			}
		case gInline:
			if c == '\n' {
				state = gStart
			} else if inline++; inline > maxInline {
				end, msg = i, errInlineTooBig
				break follow
			}
		case gCount, gBulkLen:
			switch {
			case c >= '0' && c <= '9':
				n = n*10 + int64(c-'0')
				if state == gCount && n > g.maxArgs || state == gBulkLen && n > g.maxBulk {
					end, msg = i, headerError(state)
					break follow
				}
			case c == '+' && n == 0 && !sign: // strconv.Atoi, which the parser uses, takes a plus
				sign = true
			case c == '\r':
				state++ // to gCountLF or gBulkLenLF
			default: // a minus (no command is empty) or any other byte
				end, msg = i, headerError(state)
				break follow
			}
		case gCountLF:
			if c != '\n' || n <= 0 {
				end, msg = i, errMultibulkLength
				break follow
			}
			left, state = n, gBulkHeader
		case gBulkHeader:
			if c != '$' {
				end, msg = i, "Protocol error: expected '$', got '"+string(c)+"'"
				break follow
			}
			// A whole header in p, as is usual, is read in one go; any
			// other goes byte by byte.
			if next, length, ok := bulkHeader(p[i+1:], g.maxBulk); ok {
				skip, state = length+2, gBulkBody
				i += next
				continue
			}
			state, n, sign = gBulkLen, 0, false
		case gBulkLenLF:
			if c != '\n' {
				end, msg = i, errBulkLength
				break follow
			}
			skip, state = n+2, gBulkBody
		case gBulkBody:
			take := min(skip, int64(len(p)-i))
			skip -= take
			i += int(take) - 1
			if skip == 0 {
				if left--; left > 0 {
					state = gBulkHeader
				} else {
					state = gStart
				}
			}
		}
	}
	g.state, g.n, g.sign, g.left, g.skip, g.inline = state, n, sign, left, skip, inline
	return end, msg
}

// bulkHeader reads the length and CRLF of a bulk header from the start of
// p: plain digits, at most maxBulk. It returns how many bytes they take,
// and false for anything else (a sign, a limit broken, a header cut off
// by the end of p), which scan then follows byte by byte.
func bulkHeader(p []byte, maxBulk int64) (int, int64, bool) {
	var n int64
	i := 0
	for ; i < len(p) && p[i] >= '0' && p[i] <= '9'; i++ {
		if n = n*10 + int64(p[i]-'0'); n > maxBulk {
			return 0, 0, false
		}
	}
	if i == 0 || i+1 >= len(p) || p[i] != '\r' || p[i+1] != '\n' {
		return 0, 0, false
	}
	return i + 2, n, true
}

func headerError(s guardState) string {
	if s == gCount {
		return errMultibulkLength
	}
	return errBulkLength
}
