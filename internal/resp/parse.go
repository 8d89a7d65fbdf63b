package resp

import (
	"math"
	"unsafe"
)

// Limits on what one client may send, checked as the bytes arrive and
// before anything is buffered whole: a parser that trusts a multibulk
// count loops over it whether or not the arguments have arrived, so
// "*4444444444444444444\r\n" alone would spin for years, and a bulk or an
// inline line of any length would be buffered whole. Redis has the same
// limits, with the same errors.
const (
	// DefaultMaxArgs bounds the arguments of one command kept for it to
	// run (Redis: 2^31-1). No Sluice command needs more than a few;
	// RL.RESET takes up to 4095 keys. A multibulk command of more is read
	// to its end (its bytes within the same request limit) and handed on
	// as too many (TooMany), for an error that keeps the connection; a
	// count no command within the request limit could hold is a protocol
	// error, as Redis's "invalid multibulk length".
	DefaultMaxArgs = 4096
	// MaxInline bounds an inline (telnet-style) command line, as Redis does.
	MaxInline = 64 << 10
	// Before a client has authenticated (SetUnauthenticated), Redis reads
	// small frames only: a multibulk count over MaxUnauthArgs or a bulk
	// over MaxUnauthBulk is refused, and the connection closed, before a
	// byte of it is buffered (networking.c, processMultibulkBuffer). A
	// client without the password can then make the server hold almost
	// nothing.
	MaxUnauthArgs = 10
	MaxUnauthBulk = 16 << 10
)

// Parser is the one RESP parser: it follows a connection's input byte by
// byte across reads, enforces the limits as the bytes arrive, and records
// where each argument of each complete command lies in the input, so that
// arguments are handed on as slices of it, never copied. It stops at the
// first byte that breaks a limit or the framing, with Redis's error.
//
// The input is one buffer the caller owns and appends each read to: Scan
// follows what a read added, Next hands the complete commands on in order,
// and Shift is told when the caller drops a prefix of the buffer. The zero
// Parser refuses every command; make one with NewParser.
type Parser struct {
	state   parseState
	n       int64 // the header number being read; a count with a minus is kept negative
	neg     bool  // the count being read has a minus
	seen    bool  // the header number being read has a digit
	left    int64 // bulks left in the current command
	skip    int64 // bytes left in the current bulk's data
	at      int   // where the current bulk's data, or inline line, starts
	start   int   // where the multibulk command being read starts
	over    bool  // the command being read has more arguments than maxArgs: only its first is kept
	maxArgs int64
	// maxBulk bounds a multibulk command as sent, framing included. A
	// bulk header is checked against it at once, before the client sends
	// the bulk (see room).
	maxBulk int64

	// spans are the arguments of the complete commands in cmds, in order,
	// then those of the command being read (spans[cur:]). Offsets are into
	// the input buffer; Shift keeps them so when the caller drops a prefix.
	spans []span
	cmds  []parsed
	cur   int
	// taken is how many of cmds Next has handed on, and takenArgs how
	// many of spans they hold; they are forgotten at the next Scan or
	// Shift, which is when the caller is done with them.
	taken, takenArgs int
	// lastOver is TooMany's answer: the command Next handed on last had
	// more arguments than maxArgs.
	lastOver bool
	// unauth applies Redis's limits before authentication (MaxUnauthArgs,
	// MaxUnauthBulk); hdr is where the bulk header being read starts.
	unauth bool
	hdr    int
}

// minArgBytes is the fewest bytes an argument of a multibulk command
// takes ("$0\r\n\r\n"): a count above maxBulk/minArgBytes could never
// fit in a request.
const minArgBytes = 6

// NewParser returns a parser that refuses a command of more than maxArgs
// arguments, and one of more than maxBytes bytes as sent, its framing
// included.
func NewParser(maxArgs, maxBytes int) Parser {
	return Parser{maxArgs: int64(maxArgs), maxBulk: int64(maxBytes)}
}

// span is one argument: its offset in the input and its length.
type span struct{ at, n int }

// parsed is one complete command: how many arguments (in spans), the
// offset just past its last byte, and whether it had more arguments than
// the limit (spans then hold its first alone).
type parsed struct {
	args, end int
	over      bool
}

type parseState uint8

const (
	pStart parseState = iota
	pCount
	pCountLF
	pBulkHeader
	pBulkLen
	pBulkLenLF
	pBulkBody
	pBulkCR
	pBulkLF
	pInline
)

// The protocol errors, worded as Redis words them. A server replies each
// as "ERR " and the text, and closes the connection.
const (
	errMultibulkLength = "Protocol error: invalid multibulk length"
	errBulkLength      = "Protocol error: invalid bulk length"
	errInlineTooBig    = "Protocol error: too big inline request"
	errUnbalanced      = "Protocol error: unbalanced quotes in request"
	// The errors of the limits before authentication, Redis's words.
	errUnauthMultibulk = "Protocol error: unauthenticated multibulk length"
	errUnauthBulk      = "Protocol error: unauthenticated bulk length"
	// RequestTooBig is the error for a command larger than the parser's
	// limit; a server that bounds its buffered input by the same limit
	// says so in the same words.
	RequestTooBig = "Protocol error: request larger than the server's limit"
)

// Scan follows buf[from:], the bytes just read (buf[:from] is what was
// read before), and records each command they complete, for Next. It
// returns how many of those bytes are fine and, if a frame breaks a limit
// or the protocol, the error for it ("" otherwise); the bytes after the
// first bad one are not read. Inline arguments are unescaped in place in
// buf. The commands Next handed on before are forgotten.
//
// Every byte a client sends passes through here, so the loop works on
// local copies of the fields, which the compiler keeps in registers, and
// stores them back once.
func (p *Parser) Scan(buf []byte, from int) (int, string) {
	p.forget()
	state, n, neg, seen, left, skip, at := p.state, p.n, p.neg, p.seen, p.left, p.skip, p.at
	end, msg := len(buf), ""
follow:
	for i := from; i < len(buf); i++ {
		c := buf[i]
		switch state {
		case pStart:
			if c == '*' {
				state, n, neg, seen, p.start = pCount, 0, false, false, i
			} else if c != '\n' {
				state, at = pInline, i
				i-- // the line starts here: read this byte as part of it
			}
		case pInline:
			if c == '\n' {
				if m := p.inline(buf, at, i); m != "" {
					end, msg = i, m
					break follow
				}
				state = pStart
			} else if i-at >= MaxInline {
				end, msg = i, errInlineTooBig
				break follow
			}
		case pCount, pBulkLen:
			// Header numbers as Redis's string2ll reads them: a minus
			// (counts only: a bulk is never negative), then 0 alone or
			// digits without a leading zero, within 64 bits; no plus.
			d := int64(c - '0')
			switch {
			case c >= '0' && c <= '9':
				if seen && n == 0 || neg && !seen && d == 0 {
					end, msg = i, headerError(state)
					break follow
				}
				seen = true
				if neg {
					if n < (math.MinInt64+d)/10 {
						end, msg = i, headerError(state)
						break follow
					}
					n = n*10 - d
					break
				}
				n = n*10 + d
				if state == pCount && n > max(p.maxArgs, p.maxBulk/minArgBytes) || state == pBulkLen && n > p.maxBulk {
					end, msg = i, headerError(state)
					break follow
				}
			case c == '-' && state == pCount && !neg && !seen:
				neg = true
			case c == '\r' && seen:
				state++ // to pCountLF or pBulkLenLF
			default:
				end, msg = i, headerError(state)
				break follow
			}
		case pCountLF:
			if c != '\n' {
				end, msg = i, errMultibulkLength
				break follow
			}
			if n <= 0 { // Redis runs no command and reads on (protocol.tcl: "Negative multibulk length")
				p.complete(i + 1)
				state = pStart
				break
			}
			if p.unauth && n > MaxUnauthArgs {
				// Stopped before the header, which is read again if an
				// AUTH before it lifts the limit (Unauthenticated).
				end, msg, state = p.start, errUnauthMultibulk, pStart
				break follow
			}
			left, state, p.over = n, pBulkHeader, n > p.maxArgs
		case pBulkHeader:
			if c != '$' {
				end, msg = i, "Protocol error: expected '$', got '"+string(c)+"'"
				break follow
			}
			// A whole header in buf, as is usual, is read in one go; any
			// other goes byte by byte.
			if next, length, ok := bulkHeader(buf[i+1:], p.maxBulk); ok {
				if m := p.room(i+next+1, length); m != "" {
					end, msg = i+next, m // at the header's LF, where the byte-by-byte path stops
					if m == errUnauthBulk {
						end = i // before the header, in state pBulkHeader: to be read again
					}
					break follow
				}
				i += next
				skip, at, state = length, i+1, pBulkBody
				if length == 0 {
					state = pBulkCR
				}
				continue
			}
			state, n, neg, seen, p.hdr = pBulkLen, 0, false, false, i
		case pBulkLenLF:
			if c != '\n' {
				end, msg = i, errBulkLength
				break follow
			}
			if m := p.room(i+1, n); m != "" {
				end, msg = i, m
				if m == errUnauthBulk {
					end, state = p.hdr, pBulkHeader // to be read again, as above
				}
				break follow
			}
			skip, at, state = n, i+1, pBulkBody
			if n == 0 {
				state = pBulkCR
			}
		case pBulkBody:
			take := min(skip, int64(len(buf)-i))
			skip -= take
			i += int(take) - 1
			if skip == 0 {
				state = pBulkCR
			}
		case pBulkCR:
			if c != '\r' {
				end, msg = i, errBulkLength
				break follow
			}
			state = pBulkLF
		case pBulkLF:
			if c != '\n' {
				end, msg = i, errBulkLength
				break follow
			}
			if !p.over || len(p.spans) == p.cur {
				p.spans = append(p.spans, span{at, i - 1 - at})
			}
			if left--; left > 0 {
				state = pBulkHeader
			} else {
				p.complete(i + 1)
				state = pStart
			}
		}
	}
	p.state, p.n, p.neg, p.seen, p.left, p.skip, p.at = state, n, neg, seen, left, skip, at
	return end - from, msg
}

// room checks a bulk of n bytes whose header ends at hdrEnd: a bulk that
// no command within maxBulk could hold gets Redis's error for a bulk past
// its proto-max-bulk-len; one that the command being read has no room
// left for, the error for a request too large.
func (p *Parser) room(hdrEnd int, n int64) string {
	frame := n + 5 // $, CRLF, the data, CRLF
	for d := n; d >= 10; d /= 10 {
		frame++
	}
	frame++ // the first digit
	switch {
	case frame > p.maxBulk:
		return errBulkLength
	case p.unauth && n > MaxUnauthBulk:
		return errUnauthBulk
	case int64(hdrEnd-p.start)+n+2 > p.maxBulk:
		return RequestTooBig
	}
	return ""
}

// SetUnauthenticated applies Redis's limits before authentication
// (MaxUnauthArgs, MaxUnauthBulk) to the headers read from now on, or
// lifts them. A header is checked once whole, so the switch may come
// anywhere in a frame.
func (p *Parser) SetUnauthenticated(on bool) { p.unauth = on }

// Unauthenticated tells whether msg, an error Scan returned, is one of
// the limits before authentication. Scan then stopped before the frame's
// header, at the offset its byte count gives, with nothing of the header
// read: a caller whose client authenticated in a command before it (an
// AUTH pipelined with the frame) lifts the limits and Scans on from that
// offset, as Redis, which parses a command only once the ones before it
// have run, would have read the frame. Else the error stands.
func Unauthenticated(msg string) bool { return msg == errUnauthMultibulk || msg == errUnauthBulk }

// Need is how many more bytes the command being read is known to need:
// the rest of the bulk under way and its CRLF, as its header announced;
// 0 between bulks and between commands, where nothing is announced yet.
// An input buffer sized by it never grows past what the argument needs,
// and the input budget charges the announced bytes before they arrive.
func (p *Parser) Need() int {
	switch p.state {
	case pBulkBody:
		return int(p.skip) + 2
	case pBulkCR:
		return 2
	case pBulkLF:
		return 1
	}
	return 0
}

// complete ends the command being read at end.
func (p *Parser) complete(end int) {
	p.cmds = append(p.cmds, parsed{args: len(p.spans) - p.cur, end: end, over: p.over})
	p.cur, p.over = len(p.spans), false
}

// TooMany reports whether the command Next handed on last had more
// arguments than the limit: it was read whole, and only its first
// argument (its name) was handed on, for the caller to refuse it.
func (p *Parser) TooMany() bool { return p.lastOver }

// Next appends to dst[:0] the arguments of the first complete command not
// handed on yet, as slices of buf (capped, so that appending to one cannot
// write over the next), and returns them with the offset just past the
// command in buf. ok is false when no complete command waits. A command
// of no arguments (an inline line of white space, a count of 0 or less) is
// handed on too, as Redis reads it: it runs nothing.
func (p *Parser) Next(buf []byte, dst [][]byte) (args [][]byte, end int, ok bool) {
	if p.taken == len(p.cmds) {
		return dst[:0], 0, false
	}
	cmd := p.cmds[p.taken]
	args = dst[:0]
	for _, a := range p.spans[p.takenArgs : p.takenArgs+cmd.args] {
		args = append(args, buf[a.at:a.at+a.n:a.at+a.n])
	}
	p.taken++
	p.takenArgs += cmd.args
	p.lastOver = cmd.over
	return args, cmd.end, true
}

// Unread puts back the command Next handed on last, for a caller that
// could not run it yet: the next call to Next hands it on again.
func (p *Parser) Unread() {
	if p.taken == 0 {
		return
	}
	p.taken--
	p.takenArgs -= p.cmds[p.taken].args
}

// forget drops the commands Next has handed on. Arrays grown for a large
// pipeline are dropped once empty, as a connection's input buffer is.
func (p *Parser) forget() {
	if p.taken == 0 {
		return
	}
	k := copy(p.spans, p.spans[p.takenArgs:])
	p.spans, p.cur = p.spans[:k], p.cur-p.takenArgs
	p.cmds = p.cmds[:copy(p.cmds, p.cmds[p.taken:])]
	p.taken, p.takenArgs = 0, 0
	if k == 0 && cap(p.spans) > keepSpans {
		p.spans = nil
	}
	if len(p.cmds) == 0 && cap(p.cmds) > keepSpans {
		p.cmds = nil
	}
}

// keepSpans is the most arguments (and commands) whose places a parser
// keeps room for once it holds none: those of the longest inline line
// (MaxInline/2) and the slack append leaves, so that a client may send
// such lines one after another without an allocation each.
const keepSpans = MaxInline

// Footprint is the bytes the parser holds for the places of the
// arguments it has read: 16 or 24 bytes an argument, which a pipeline of
// empty arguments (6 bytes each on the wire) makes more than the input
// itself, so a server that bounds its input counts them with it.
func (p *Parser) Footprint() int {
	return cap(p.spans)*int(unsafe.Sizeof(span{})) + cap(p.cmds)*int(unsafe.Sizeof(parsed{}))
}

// Shift moves every offset back by n, for an input buffer that dropped its
// first n bytes: all of them before the first command Next has not handed
// on (the commands handed on are forgotten).
func (p *Parser) Shift(n int) {
	p.forget()
	p.at -= n
	p.start -= n
	p.hdr -= n
	for i := range p.spans {
		p.spans[i].at -= n
	}
	for i := range p.cmds {
		p.cmds[i].end -= n
	}
}

// inline splits the inline (telnet-style) line buf[start:eol] into
// arguments as Redis's sdssplitargs does: separated by white space, with
// "double quotes" (\n \r \t \b \a \\ \" and \xHH escapes) and 'single
// quotes' (\' only). Quoted arguments are unescaped in place, which never
// lengthens them, so every argument is a span of the input: a line of
// thousands of arguments costs no allocation per argument. A line of
// white space only is no command; one of more arguments than maxArgs is
// refused, as a multibulk command would be.
func (p *Parser) inline(buf []byte, start, eol int) string {
	first := len(p.spans)
	i := start
	for {
		for i < eol && isSpace(buf[i]) {
			i++
		}
		if i == eol {
			break
		}
		w, argAt := i, i
		var quote byte // the open quote, or 0
		closed := false
	arg:
		for ; i < eol; i++ {
			c := buf[i]
			switch {
			case quote == '"' && c == '\\' && i+3 < eol && buf[i+1] == 'x' && isHex(buf[i+2]) && isHex(buf[i+3]):
				c = unhex(buf[i+2])<<4 | unhex(buf[i+3])
				i += 3
			case quote == '"' && c == '\\' && i+1 < eol:
				i++
				switch c = buf[i]; c {
				case 'n':
					c = '\n'
				case 'r':
					c = '\r'
				case 't':
					c = '\t'
				case 'b':
					c = '\b'
				case 'a':
					c = '\a'
				}
			case quote == '\'' && c == '\\' && i+1 < eol && buf[i+1] == '\'':
				i++
				c = '\''
			case quote != 0 && c == quote:
				// A closing quote must end the argument.
				if i+1 < eol && !isSpace(buf[i+1]) {
					p.spans = p.spans[:first]
					return errUnbalanced
				}
				i++
				closed = true
				break arg
			case quote == 0 && isSpace(c):
				break arg
			case quote == 0 && (c == '"' || c == '\''):
				quote = c
				continue
			}
			buf[w] = c
			w++
		}
		if quote != 0 && !closed {
			p.spans = p.spans[:first]
			return errUnbalanced
		}
		if int64(len(p.spans)-first) == p.maxArgs {
			// One line could hold 32Ki arguments: as many spans, and
			// argument slices later, as a multibulk command of 32Ki
			// arguments, which the limit refuses. Redis has no such
			// limit; the error is its own for a line too big.
			p.spans = p.spans[:first]
			return errInlineTooBig
		}
		p.spans = append(p.spans, span{argAt, w - argAt})
	}
	p.complete(eol + 1)
	return ""
}

// isSpace is C's isspace, as sdssplitargs uses it.
func isSpace(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}

// bulkHeader reads the length and CRLF of a bulk header from the start of
// b: plain digits without a leading zero, at most maxBulk. It returns how
// many bytes they take, and false for anything else (a sign, a leading
// zero, a limit broken, a header cut off by the end of b), which scan then
// follows byte by byte.
func bulkHeader(b []byte, maxBulk int64) (int, int64, bool) {
	var n int64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if n = n*10 + int64(b[i]-'0'); n > maxBulk {
			return 0, 0, false
		}
	}
	if i == 0 || i > 1 && b[0] == '0' || i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
		return 0, 0, false
	}
	return i + 2, n, true
}

func headerError(s parseState) string {
	if s == pCount {
		return errMultibulkLength
	}
	return errBulkLength
}
