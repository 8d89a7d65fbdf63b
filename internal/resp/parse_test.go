package resp

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParserFrames(t *testing.T) {
	valid := []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$8\r\nRL.FIXED\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n",
		"PING\r\nECHO hi\n\r\n",
		"*-10\r\n*0\r\n*-9223372036854775808\r\n*1\r\n$4\r\nPING\r\n", // counts of 0 or less: no command, as in Redis
		"*1\r\n$8\r\n\r\n\r\n\r\n\r\n\r\n*1\r\n$4\r\nPING\r\n",        // a bulk holding CRLFs
		"*4096\r\n",
		"*4097\r\n", // more than kept: read to its end, then refused by the caller (TooMany)
	}
	for _, in := range valid {
		for _, chunk := range []int{1, 3, len(in)} {
			g := NewParser(DefaultMaxArgs, 1<<20)
			buf := []byte(in)
			for i := 0; i < len(in); i += chunk {
				end := min(i+chunk, len(in))
				if n, msg := g.Scan(buf[:end], i); msg != "" || n != end-i {
					t.Errorf("%q in chunks of %d: %d, %q", in, chunk, n, msg)
				}
			}
			if strings.HasSuffix(in, "\r\n") && !strings.HasPrefix(in, "*409") && g.state != pStart {
				t.Errorf("%q in chunks of %d: ends in state %d", in, chunk, g.state)
			}
		}
	}
	for _, tc := range []struct {
		in, msg string
		ok      int
	}{
		// More arguments than 1 MiB could hold, at 6 bytes the least
		// each: 174,762.
		{"*174763\r\n", "Protocol error: invalid multibulk length", 6},
		{"*1\r\n$4\r\nPING\r\n*4444444444444444444\r\n", "Protocol error: invalid multibulk length", 20},
		{"*1\r\n$1048577\r\n", "Protocol error: invalid bulk length", 11},
		{"*2\r\n$1\r\na\r\n$99999999999999999999\r\n", "Protocol error: invalid bulk length", 18},
		{strings.Repeat("x", MaxInline+1), "Protocol error: too big inline request", MaxInline},
		// Malformed frames stop the parser at their first bad byte.
		{"*-1\r\n*4444444444444444444\r\n", "Protocol error: invalid multibulk length", 11},
		{"*+1\r\n", "Protocol error: invalid multibulk length", 1},
		{"*01\r\n", "Protocol error: invalid multibulk length", 2},
		{"*-0\r\n", "Protocol error: invalid multibulk length", 2},
		{"*-9223372036854775809\r\n", "Protocol error: invalid multibulk length", 20},
		{"*\r\n", "Protocol error: invalid multibulk length", 1},
		{"*1\r\n$04\r\n", "Protocol error: invalid bulk length", 6},
		{"*1\r\n$\r\n", "Protocol error: invalid bulk length", 5},
		{"*1\r\nX", "Protocol error: expected '$', got 'X'", 4},
		{"*1\r\n\x00", "Protocol error: expected '$', got '\x00'", 4},
		{"*1\r\n$-1\r\n", "Protocol error: invalid bulk length", 5},
		{"*1\r\n$4\rX", "Protocol error: invalid bulk length", 7},
		{"*x\r\n", "Protocol error: invalid multibulk length", 1},
		// Found by FuzzFrames (testdata/fuzz/FuzzFrames/9a97b09a6dbfef9f):
		// an inline line passed the limit on arguments.
		{strings.Repeat("a ", DefaultMaxArgs) + "\n", "", 2*DefaultMaxArgs + 1},
		{strings.Repeat("a ", DefaultMaxArgs+1) + "\n", "Protocol error: too big inline request", 2*DefaultMaxArgs + 2},
	} {
		g := NewParser(DefaultMaxArgs, 1<<20)
		n, msg := g.Scan([]byte(tc.in), 0)
		if msg != tc.msg || n != tc.ok {
			t.Errorf("%.40q: %d, %q; want %d, %q", tc.in, n, msg, tc.ok, tc.msg)
		}
	}
}

// parseAll runs the parser over in, read in chunks of chunk bytes, and
// returns each complete command's arguments as the input holds them.
func parseAll(in string, chunk int) ([][]string, string) {
	g := NewParser(DefaultMaxArgs, 1<<20)
	buf := []byte(in)
	var cmds [][]string
	for i := 0; i < len(buf); i += chunk {
		end := min(i+chunk, len(buf))
		_, msg := g.Scan(buf[:end], i)
		for {
			args, _, ok := g.Next(buf, nil)
			if !ok {
				break
			}
			var strs []string
			for _, a := range args {
				strs = append(strs, string(a))
			}
			cmds = append(cmds, strs)
		}
		if msg != "" {
			return cmds, msg
		}
	}
	return cmds, ""
}

// TestParserArgs: the arguments handed on are exactly those sent, however
// the bytes arrive, for multibulk and inline commands alike; inline lines
// split and unescape as Redis's sdssplitargs does.
func TestParserArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // commands joined by " | ", arguments by ","
		msg  string
	}{
		{"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n", "ECHO,hello | PING", ""},
		{"*3\r\n$1\r\na\r\n$0\r\n\r\n$3\r\n\r\nb\r\n", "a,,\r\nb", ""},
		{"PING\r\nECHO  hi\tthere\n", "PING | ECHO,hi,there", ""},
		{"ECHO \"a b\" 'c d'\r\n", "ECHO,a b,c d", ""},
		{`ECHO "x\x41\n\"y" 'it\'s'` + "\n", "ECHO,xA\n\"y,it's", ""},
		{`ECHO a"b c"d` + "\n", "", errUnbalanced}, // a closing quote must end the argument
		{`ECHO ab"c d"` + "\n", "ECHO,abc d", ""},  // an opening quote may start mid-argument
		{`ECHO ""` + "\n", "ECHO,", ""},
		{"   \r\n", "", ""}, // white space only: a command of no arguments, not run
		{`ECHO "open` + "\r\n", "", errUnbalanced},
		{`ECHO 'open\'` + "\n", "", errUnbalanced},
		{"*1\r\n$4\r\nPINGxx\r\n", "", errBulkLength},
	} {
		for _, chunk := range []int{1, 2, 7, len(tc.in)} {
			cmds, msg := parseAll(tc.in, chunk)
			var got []string
			for _, c := range cmds {
				if len(c) > 0 {
					got = append(got, strings.Join(c, ","))
				}
			}
			if strings.Join(got, " | ") != tc.want || msg != tc.msg {
				t.Errorf("%q in chunks of %d: %q, %q; want %q, %q", tc.in, chunk, strings.Join(got, " | "), msg, tc.want, tc.msg)
			}
		}
	}
}

// An inline line of one-letter arguments is split without an allocation
// per argument: on one event loop, a 64 KiB line must not stall every
// other client.
func TestInlineAllocatesNothingPerArgument(t *testing.T) {
	line := []byte(strings.Repeat("a ", MaxInline/2-1) + "\n")
	g := NewParser(1<<20, 1<<20)
	args := make([][]byte, 0, MaxInline/2)
	allocs := testing.AllocsPerRun(10, func() { // the warm-up run, not counted, grows the spans once; the next Scan forgets the command handed on
		if _, msg := g.Scan(line, 0); msg != "" {
			t.Fatal(msg)
		}
		var ok bool
		if args, _, ok = g.Next(line, args); !ok || len(args) != MaxInline/2-1 {
			t.Fatalf("%v, %d arguments", ok, len(args))
		}
	})
	if allocs > 0 {
		t.Errorf("%v allocations per 64 KiB inline line", allocs)
	}
}

// FuzzInline: any line either fails as unbalanced or splits into
// arguments that, quoted again, split back into the same arguments.
func FuzzInline(f *testing.F) {
	for _, s := range []string{"PING", `ECHO "a\x00b"`, `ECHO 'it\'s'`, `a"b c"d`, "\t\v\f x", `"\x4g"`, `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, '\n') || len(s) > MaxInline || strings.HasPrefix(s, "*") { // "*" starts a multibulk frame
			return
		}
		cmds, msg := parseAll(s+"\n", len(s)+1)
		if msg != "" {
			if msg != errUnbalanced {
				t.Fatalf("%q: %q", s, msg)
			}
			return
		}
		if len(cmds) != 1 && !(s == "" && len(cmds) == 0) { // a bare newline is no line at all
			t.Fatalf("%q: %d commands", s, len(cmds))
		}
		if len(cmds) == 0 {
			return
		}
		var quoted []string
		for _, a := range cmds[0] {
			var b strings.Builder
			b.WriteByte('"')
			for _, c := range []byte(a) {
				b.WriteString(`\x` + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15]))
			}
			b.WriteByte('"')
			quoted = append(quoted, b.String())
		}
		again, msg := parseAll(strings.Join(quoted, " ")+"\n", 3)
		if msg != "" || len(cmds[0]) > 0 && (len(again) != 1 || strings.Join(again[0], "\x00") != strings.Join(cmds[0], "\x00")) {
			t.Fatalf("%q split into %q, which quoted again splits into %q (%q)", s, cmds[0], again, msg)
		}
	})
}

// TestNextUnreadShift: Next hands the complete commands on in order, each
// with the offset past it; Unread puts the last one back, as a server
// does with a command that must wait; Shift keeps the offsets right when
// the caller drops the bytes of the commands it ran.
func TestNextUnreadShift(t *testing.T) {
	g := NewParser(DefaultMaxArgs, 1<<20)
	buf := []byte("PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nECH")
	if n, msg := g.Scan(buf, 0); n != len(buf) || msg != "" {
		t.Fatalf("Scan: %d, %q", n, msg)
	}
	next := func(want string, wantEnd int) {
		t.Helper()
		args, end, ok := g.Next(buf, nil)
		var got []string
		for _, a := range args {
			got = append(got, string(a))
		}
		if strings.Join(got, ",") != want || end != wantEnd || ok != (want != "") {
			t.Errorf("Next = %q, %d, %v; want %q, %d", got, end, ok, want, wantEnd)
		}
	}
	next("PING", 6)
	next("ECHO,hi", 28)
	g.Unread()
	next("ECHO,hi", 28)
	next("", 0)
	// The caller ran both and drops their bytes; the rest of a command
	// arrives.
	buf = append(buf[:0], buf[28:]...)
	g.Shift(28)
	from := len(buf)
	buf = append(buf, "O x\r\n"...)
	if n, msg := g.Scan(buf, from); n != 5 || msg != "" {
		t.Fatalf("Scan after Shift: %d, %q", n, msg)
	}
	next("ECHO,x", 8)
	next("", 0)
}

// Need is what the bulk under way still lacks, so that a caller can size
// its buffer for a large argument once.
func TestParserNeed(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"*2\r\n$4\r\nECHO\r\n", 0},
		{"*2\r\n$4\r\nECHO\r\n$1000", 0}, // the length is not known until its CRLF
		{"*2\r\n$4\r\nECHO\r\n$1000\r\n", 1002},
		{"*2\r\n$4\r\nECHO\r\n$1000\r\nabc", 999},
		{"*2\r\n$4\r\nECHO\r\n$3\r\nabc", 2},
		{"*2\r\n$4\r\nECHO\r\n$3\r\nabc\r", 1},
		{"*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n", 0},
	} {
		p := NewParser(DefaultMaxArgs, 1<<20)
		if _, msg := p.Scan([]byte(tc.in), 0); msg != "" {
			t.Fatalf("%q: %s", tc.in, msg)
		}
		if got := p.Need(); got != tc.want {
			t.Errorf("Need after %q = %d; want %d", tc.in, got, tc.want)
		}
	}
}

// A command of more arguments than the limit is read whole and handed on
// as its name alone, flagged, so that the caller can refuse it and read
// on; the commands around it are untouched.
func TestParserTooMany(t *testing.T) {
	const maxArgs = 3
	in := "*1\r\n$4\r\nPING\r\n" + "*5\r\n$8\r\nRL.RESET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n" +
		"*3\r\n$8\r\nRL.RESET\r\n$1\r\na\r\n$1\r\nb\r\n"
	for _, chunk := range []int{1, 7, len(in)} {
		p := NewParser(maxArgs, 1<<20)
		buf := []byte(in)
		var got []string
		for i := 0; i < len(in); i += chunk {
			end := min(i+chunk, len(in))
			if _, msg := p.Scan(buf[:end], i); msg != "" {
				t.Fatalf("chunks of %d: %s", chunk, msg)
			}
			for {
				args, _, ok := p.Next(buf[:end], nil)
				if !ok {
					break
				}
				got = append(got, fmt.Sprintf("%q %v", args, p.TooMany()))
			}
		}
		want := []string{`["PING"] false`, `["RL.RESET"] true`, `["RL.RESET" "a" "b"] false`}
		if !slices.Equal(got, want) {
			t.Errorf("chunks of %d: %v; want %v", chunk, got, want)
		}
	}
}

// The places of a large pipeline's arguments are counted while held
// (Footprint) and dropped once the commands have been handed on.
func TestFootprintOfAPipeline(t *testing.T) {
	in := []byte(strings.Repeat("*1\r\n$0\r\n\r\n", 100_000))
	p := NewParser(DefaultMaxArgs, 1<<20)
	if _, msg := p.Scan(in, 0); msg != "" {
		t.Fatal(msg)
	}
	if got := p.Footprint(); got < 100_000*16 {
		t.Errorf("Footprint of 100,000 commands held: %d bytes; want their places counted", got)
	}
	for {
		if _, _, ok := p.Next(in, nil); !ok {
			break
		}
	}
	p.Shift(len(in))
	if got := p.Footprint(); got != 0 {
		t.Errorf("Footprint once they were handed on: %d bytes; want 0", got)
	}
}

// TestParserUnauthenticated: before authentication a count over
// MaxUnauthArgs or a bulk over MaxUnauthBulk stops the scan before the
// frame's header with Redis's error, however the bytes arrive (a header
// split across reads included); lifted, the scan reads on from there, as
// the client whose AUTH came before the frame needs.
func TestParserUnauthenticated(t *testing.T) {
	ping := "*1\r\n$4\r\nPING\r\n"
	big := "*2\r\n$4\r\nECHO\r\n$16385\r\n" + strings.Repeat("x", 16385) + "\r\n"
	for _, tc := range []struct {
		name, in string
		msg      string
		stop     int // where the scan stopped: the frame's header
	}{
		{"a count over 10", ping + "*11\r\n" + strings.Repeat("$1\r\na\r\n", 11), "Protocol error: unauthenticated multibulk length", len(ping)},
		{"a bulk over 16 KiB", ping + big, "Protocol error: unauthenticated bulk length", len(ping) + len("*2\r\n$4\r\nECHO\r\n")},
		{"a count of 10", ping + "*10\r\n" + strings.Repeat("$1\r\na\r\n", 10), "", 0},
		{"a bulk of 16 KiB", ping + "*1\r\n$16384\r\n" + strings.Repeat("x", 16384) + "\r\n", "", 0},
	} {
		for _, chunk := range []int{1, 3, len(tc.in)} {
			p := NewParser(DefaultMaxArgs, 1<<20)
			p.SetUnauthenticated(true)
			buf, msg, stop := []byte(nil), "", 0
			for at := 0; at < len(tc.in) && msg == ""; at += chunk {
				from := len(buf)
				buf = append(buf, tc.in[at:min(at+chunk, len(tc.in))]...)
				var fine int
				fine, msg = p.Scan(buf, from)
				stop = from + fine
				for _, _, ok := p.Next(buf, nil); ok; _, _, ok = p.Next(buf, nil) {
				}
			}
			if msg != tc.msg || msg != "" && (stop != tc.stop || !Unauthenticated(msg)) {
				t.Errorf("%s in chunks of %d: %q at %d; want %q at %d", tc.name, chunk, msg, stop, tc.msg, tc.stop)
				continue
			}
			if msg == "" {
				continue
			}
			// Lifted: the rest of the input reads as an authenticated
			// client's, from the frame's header on.
			buf = append(buf[:stop:stop], tc.in[stop:]...)
			p.SetUnauthenticated(false)
			if _, m := p.Scan(buf, stop); m != "" {
				t.Errorf("%s in chunks of %d, lifted: %q", tc.name, chunk, m)
			}
			var n int
			for _, _, ok := p.Next(buf, nil); ok; _, _, ok = p.Next(buf, nil) {
				n++
			}
			if n != 1 {
				t.Errorf("%s in chunks of %d, lifted: %d commands; want the frame's one", tc.name, chunk, n)
			}
		}
	}
}
