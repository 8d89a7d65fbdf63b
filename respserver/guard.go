package respserver

import (
	"errors"
	"io"
	"net"
)

// Limits on what one client may send, checked as the bytes arrive and
// before redcon parses them. redcon trusts a multibulk count and loops over
// it whether or not the arguments have arrived, so "*4444444444444444444\r\n"
// alone would spin a goroutine for years; and it buffers a bulk or an inline
// line of any length. Redis has the same limits, with the same errors.
const (
	// DefaultMaxArgs bounds the arguments of one command (Redis: 1M). No
	// Sluice command needs more than a few; RL.RESET takes up to 4095 keys.
	DefaultMaxArgs = 4096
	// maxInline bounds an inline (telnet-style) command line, as Redis does.
	maxInline = 64 << 10
)

var errProtocol = errors.New("protocol error")

// frameGuard follows RESP framing byte by byte across reads. It only
// watches: on a frame that redcon will itself reject (a bad byte where a
// header belongs), it stops following, since redcon closes the connection.
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
	gGaveUp // a malformed frame that redcon rejects and closes on
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
		case gGaveUp:
			break follow
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
				end, msg = i, "Protocol error: too big inline request"
				break follow
			}
		case gCount, gBulkLen:
			switch {
			case c >= '0' && c <= '9':
				n = n*10 + int64(c-'0')
				if state == gCount && n > g.maxArgs {
					end, msg = i, "Protocol error: invalid multibulk length"
					break follow
				}
				if state == gBulkLen && n > g.maxBulk {
					end, msg = i, "Protocol error: invalid bulk length"
					break follow
				}
			case c == '+' && n == 0 && !sign: // strconv.Atoi, which redcon uses, takes a plus
				sign = true
			case c == '\r':
				state++ // to gCountLF or gBulkLenLF
			default: // a minus or any other byte: redcon refuses the header
				state = gGaveUp
			}
		case gCountLF:
			if c != '\n' || n <= 0 {
				state = gGaveUp
				continue
			}
			left, state = n, gBulkHeader
		case gBulkHeader:
			if c != '$' {
				state = gGaveUp
				continue
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
				state = gGaveUp
				continue
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

// guardedReader reads a client's bytes through a frameGuard and a bound on
// bytes read without a complete command (unparsed, reset by the handler).
// On a breach it passes on the bytes before the bad frame, so that the
// commands in them are answered, then writes the protocol error to w and
// fails the next read, which makes redcon close the connection.
type guardedReader struct {
	r        io.Reader
	w        io.Writer
	guard    frameGuard
	max      int
	unparsed int
	err      string // the protocol error to give at the next read
}

func newGuardedReader(r io.Reader, w io.Writer, maxRequest, maxArgs int) guardedReader {
	return guardedReader{r: r, w: w, max: maxRequest,
		guard: frameGuard{maxArgs: int64(maxArgs), maxBulk: int64(maxRequest)}}
}

func (g *guardedReader) Read(p []byte) (int, error) {
	if g.err == "" && g.unparsed >= g.max {
		g.err = "Protocol error: request larger than the server's limit"
	}
	if g.err != "" {
		_, _ = g.w.Write([]byte("-ERR " + g.err + "\r\n"))
		return 0, errProtocol
	}
	if room := g.max - g.unparsed; len(p) > room {
		p = p[:room]
	}
	n, err := g.r.Read(p)
	ok, msg := g.guard.scan(p[:n])
	if msg != "" {
		g.err = msg
		if ok == 0 {
			return g.Read(p)
		}
		n, err = ok, nil
	}
	g.unparsed += n
	return n, err
}

// limitConn is a connection whose reads are guarded. Only the connection's
// own goroutine reads, so the guard needs no lock.
type limitConn struct {
	net.Conn
	in guardedReader
}

func newLimitConn(nc net.Conn, maxRequest, maxArgs int) *limitConn {
	c := &limitConn{Conn: nc}
	c.in = newGuardedReader(nc, nc, maxRequest, maxArgs)
	return c
}

func (c *limitConn) Read(p []byte) (int, error) { return c.in.Read(p) }
