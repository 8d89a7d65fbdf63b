package resp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// Fuzz targets for the wire: any bytes a client may send, any value it
// may quote. A crash found becomes a named row of the tests beside them.

// frames is what a parser made of some input: each complete command's
// arguments, how many bytes were fine, and the error that stopped it.
type frames struct {
	cmds [][]string
	over []bool // each command had more arguments than the limit (TooMany)
	fine int
	msg  string
}

func (f frames) String() string {
	return fmt.Sprintf("%q (too many: %v), %d bytes fine, %q", f.cmds, f.over, f.fine, f.msg)
}

// scanAll feeds data to a parser with small limits, so that fuzzing
// reaches them, in reads of at most chunk bytes appended to one buffer, as
// a connection reads, and takes every command as it completes.
func scanAll(t *testing.T, data []byte, chunk int) frames {
	const maxArgs, maxBytes = 8, 256
	p := NewParser(maxArgs, maxBytes)
	var f frames
	var buf [][]byte
	in := make([]byte, 0, len(data))
	start := 0 // where the command being read starts, for its size
	for len(data) > 0 && f.msg == "" {
		n := min(chunk, len(data))
		from := len(in)
		in = append(in, data[:n]...)
		data = data[n:]
		var fine int
		fine, f.msg = p.Scan(in, from)
		if fine < 0 || fine > n || f.msg == "" && fine != n {
			t.Fatalf("Scan of %d bytes: %d fine, %q", n, fine, f.msg)
		}
		f.fine += fine
		for {
			args, end, ok := p.Next(in, buf)
			if !ok {
				break
			}
			buf = args
			if len(args) > maxArgs {
				t.Fatalf("a command of %d arguments passed a limit of %d", len(args), maxArgs)
			}
			if p.TooMany() && (len(args) != 1 || in[start] != '*') {
				t.Fatalf("a command of too many arguments handed on as %q", args)
			}
			f.over = append(f.over, p.TooMany())
			if in[start] == '*' && end-start > maxBytes {
				t.Fatalf("a command of %d bytes passed a limit of %d: %q", end-start, maxBytes, in[start:end])
			}
			cmd := []string{}
			for _, a := range args {
				cmd = append(cmd, string(a))
			}
			f.cmds = append(f.cmds, cmd)
			start = end
		}
	}
	return f
}

// FuzzFrames feeds raw bytes to the parser once in one read and once in
// small reads (a byte a read, up to 64 bytes): how the bytes were split
// must not change the commands or the error, no command may pass a limit,
// and each command, sent again as a multibulk frame, parses back to the
// same arguments.
func FuzzFrames(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"*4\r\n$8\r\nRL.FIXED\r\n$1\r\nk\r\n$2\r\n10\r\n$2\r\n1m\r\n",
		"*2\r\n$4\r\nECHO\r\nhello\r\n",
		"*-1\r\n", "*0\r\n", "$5\r\nhello\r\n", "PING\r\nRL.GCRA k 1 1 1s\r\n",
		"ECHO \"a\\x00b\"\r\n", "*2\r\n$4\r\nECHO\r\n$99999999999\r\n", "\x00\xff\r\n",
		"*3\r\n$8\r\nRL.FIXED\r\n$1\r\nk",
		"*4444444444444444444\r\n", // found by FuzzFrames: redcon's reader looped over the count
		"*+4444444444444444444\r\n", "*1\r\n$+99999999999999\r\n", "*1\r\n$4\r\nPING\r\n*-1\r\n",
		"*1\r\n$-5\r\nx\r\n", "*1\r\n$\r\n\r\n", "*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n",
		"*9\r\n", "*1\r\n$250\r\n", "*2\r\n$1\r\na\r\n$240\r\n",
		"*9\r\n$1\r\na\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n", // too many, then one
		"*43\r\n", // more than 256 bytes could hold
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		whole := scanAll(t, slices.Clone(data), len(data))
		small := scanAll(t, slices.Clone(data), max(1, len(data)/64))
		if whole.String() != small.String() {
			t.Fatalf("the commands depend on how the bytes were read:\nin one read: %v\nsmall reads: %v", whole, small)
		}
		for _, cmd := range whole.cmds {
			if len(cmd) == 0 {
				continue
			}
			frame := redcon.AppendArray(nil, len(cmd))
			for _, a := range cmd {
				frame = redcon.AppendBulkString(frame, a)
			}
			if len(frame) > 256 {
				continue // an inline line may hold more than its frame may
			}
			again := scanAll(t, frame, 3)
			if again.msg != "" || len(again.cmds) != 1 || !slices.Equal(again.cmds[0], cmd) || again.over[0] {
				t.Fatalf("%q sent again as %q parses as %v", cmd, frame, again)
			}
		}
	})
}

// FuzzArgs checks the argument helpers and the quoting: an integer
// ParseInt accepts prints back as given, a quoted value is one short line,
// and a value written as MONITOR writes it reads back, as an inline
// command, as the value itself.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{"0", "1", "-1", "9223372036854775807", "9223372036854775808", "1.5", "NaN", "inf", "+1", " 1",
		"-0", "007", "", "\x00", "'", `\`, "\"", "a b", "\r\n", strings.Repeat("x", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		if n, why := ParseInt(b); why == "" {
			if got := strconv.FormatInt(n, 10); got != s {
				t.Errorf("ParseInt(%q) = %d, which prints as %q", s, n, got)
			}
		} else if why != reasonInteger && why != reasonRange {
			t.Errorf("ParseInt(%q): %q", s, why)
		}
		q := Quote(b)
		if strings.ContainsAny(q, "\r\n") || len(q) > 4*maxQuoted+40 {
			t.Errorf("Quote(%q) = %q", s, q)
		}
		line := append(AppendRepr([]byte("ECHO "), b), '\n')
		p := NewParser(DefaultMaxArgs, 1<<20)
		if _, msg := p.Scan(line, 0); msg != "" && len(line) <= MaxInline {
			t.Fatalf("%q written as %q: %s", s, line, msg)
		}
		if args, _, ok := p.Next(line, nil); len(line) <= MaxInline && (!ok || len(args) != 2 || string(args[1]) != s) {
			t.Errorf("%q written as %q reads back as %q", s, AppendRepr(nil, b), args)
		}
	})
}

// BenchmarkParser parses a pipeline of 16 decisions as redis-benchmark
// sends them: every byte a client sends passes through it.
func BenchmarkParser(b *testing.B) {
	var in []byte
	for i := range 16 {
		in = append(in, fmt.Sprintf("*5\r\n$7\r\nRL.GCRA\r\n$14\r\nk:%012d\r\n$4\r\n1000\r\n$4\r\n1000\r\n$2\r\n1s\r\n", i)...)
	}
	b.SetBytes(int64(len(in)))
	p := NewParser(1024, 512<<20)
	args := make([][]byte, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		if n, msg := p.Scan(in, 0); n != len(in) || msg != "" {
			b.Fatal(n, msg)
		}
		for range 16 {
			var ok bool
			if args, _, ok = p.Next(in, args); !ok {
				b.Fatal("a command short")
			}
		}
	}
}

// FuzzUnauthenticated: before authentication, the scan stops at the same
// offset with the same error however the bytes arrive; lifting the limits
// there and scanning on reads the same commands as a scan that never had
// them (what a client whose AUTH came first gets).
func FuzzUnauthenticated(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n*11\r\n", "*1\r\n$16385\r\n", "*2\r\n$4\r\nECHO\r\n$20000\r\n",
		"*10\r\n", "*-1\r\n*12\r\n$1\r\na\r\n", "PING\r\n*1\r\n$99999\r\n",
	} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		const maxBytes = 1 << 20
		commands := func(unauthUntil bool, step int) (cmds []string, msg string, stop int) {
			p := NewParser(DefaultMaxArgs, maxBytes)
			p.SetUnauthenticated(unauthUntil)
			var in []byte
			drain := func() {
				for args, _, ok := p.Next(in, nil); ok; args, _, ok = p.Next(in, nil) {
					cmds = append(cmds, fmt.Sprintf("%q", args))
				}
			}
			for at := 0; at < len(data); at += step {
				from := len(in)
				in = append(in, data[at:min(at+step, len(data))]...)
				fine, m := p.Scan(in, from)
				drain()
				if m == "" {
					continue
				}
				if !Unauthenticated(m) {
					return cmds, m, from + fine
				}
				if stop = from + fine; stop < 0 || stop > len(in) {
					t.Fatalf("stopped at %d of %d", stop, len(in))
				}
				// Lifted: the rest, from the frame's header, in one read.
				in = append(in[:stop:stop], data[stop:]...)
				p.SetUnauthenticated(false)
				fine, m = p.Scan(in, stop)
				drain()
				return cmds, m, stop + fine
			}
			return cmds, "", len(in)
		}
		step := max(int(chunk), 1)
		plain, pmsg, pstop := commands(false, len(data)+1)
		lifted, lmsg, lstop := commands(true, step)
		if !slices.Equal(plain, lifted) || pmsg != lmsg || pmsg != "" && pstop != lstop {
			t.Fatalf("lifted at the limit: %v %q at %d; never limited: %v %q at %d", lifted, lmsg, lstop, plain, pmsg, pstop)
		}
		_, m1, s1 := scanUnauth(data, len(data)+1)
		_, m2, s2 := scanUnauth(data, step)
		if m1 != m2 || Unauthenticated(m1) && s1 != s2 {
			t.Fatalf("stopped by %q at %d in one read, by %q at %d in reads of %d", m1, s1, m2, s2, step)
		}
	})
}

// scanUnauth scans data before authentication in reads of step bytes,
// up to the first error, and reports where it stopped.
func scanUnauth(data []byte, step int) (n int, msg string, stop int) {
	p := NewParser(DefaultMaxArgs, 1<<20)
	p.SetUnauthenticated(true)
	var in []byte
	for at := 0; at < len(data); at += step {
		from := len(in)
		in = append(in, data[at:min(at+step, len(data))]...)
		fine, m := p.Scan(in, from)
		for _, _, ok := p.Next(in, nil); ok; _, _, ok = p.Next(in, nil) {
			n++
		}
		if m != "" {
			return n, m, from + fine
		}
	}
	return n, "", len(in)
}
