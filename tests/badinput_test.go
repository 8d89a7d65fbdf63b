package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// raw is a bare TCP client: bytes out, RESP lines in.
type raw struct {
	nc net.Conn
	rd *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *raw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &raw{nc: nc, rd: bufio.NewReaderSize(nc, 1<<16)}
}

func (r *raw) send(t *testing.T, b []byte) {
	t.Helper()
	_ = r.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.nc.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// line reads one reply line (the first line of an array).
func (r *raw) line(t *testing.T) string {
	t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	l, err := r.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v (after %q)", err, l)
	}
	return strings.TrimSuffix(l, "\r\n")
}

// decisionLine reads a RESP2 decision array and returns it on one line.
func (r *raw) decisionLine(t *testing.T) string {
	t.Helper()
	head := r.line(t)
	if !strings.HasPrefix(head, "*") {
		return head
	}
	var n int
	fmt.Sscanf(head, "*%d", &n)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = r.line(t)
	}
	return strings.Join(parts, " ")
}

func (r *raw) closed(t *testing.T) bool {
	t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := r.rd.ReadByte()
	return err == io.EOF || (err != nil && strings.Contains(err.Error(), "reset"))
}

func cmd(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

// Bad input of every kind, against the real binary: each gets an ERR
// naming the argument, or a protocol error and a closed connection, while
// a bystander connection and the process carry on.
func TestBadInput(t *testing.T) {
	s := startSluice(t)
	bystander := dialRaw(t, s.Addr)
	check := func() {
		t.Helper()
		bystander.send(t, cmd("RL.GCRA", "bystander", "1000", "1", "1h"))
		if got := bystander.decisionLine(t); !strings.HasPrefix(got, ":1 :1001 ") {
			t.Fatalf("bystander got %q", got)
		}
	}
	c := dialRaw(t, s.Addr)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"wrong arity", cmd("RL.GCRA", "k", "1"), "-ERR wrong number of arguments for 'rl.gcra' command"},
		{"not a number", cmd("RL.FIXED", "k", "ten", "1s"), "-ERR invalid limit 'ten': must be an integer"},
		{"negative", cmd("RL.TOKEN", "k", "-3", "1", "1s"), "-ERR invalid capacity -3: must be between 1 and 1000000000000"},
		{"NaN", cmd("RL.LEAKY", "k", "5", "NaN", "1s"), "-ERR invalid rate 'NaN': must be an integer"},
		{"inf", cmd("RL.SLIDING", "k", "inf", "1s"), "-ERR invalid limit 'inf': must be an integer"},
		{"past 2^63", cmd("RL.LOG", "k", "10", "1s", "9223372036854775808"),
			"-ERR invalid cost '9223372036854775808': must be an integer between -9223372036854775808 and 9223372036854775807"},
		{"empty key", cmd("CL.THROTTLE", "", "1", "1", "1"), `-ERR invalid key "": must not be empty`},
		{"1 MB key", cmd("RL.FIXED", strings.Repeat("k", 1<<20), "10", "1s"), "-ERR invalid key of 1048576 bytes: must be at most 1024 bytes"},
		{"1 MB number", cmd("RL.FIXED", "k", strings.Repeat("7", 1<<20), "1s"),
			"-ERR invalid limit '" + strings.Repeat("7", 64) + "'... (1048576 bytes): must be an integer between -9223372036854775808 and 9223372036854775807"},
		{"unknown command", cmd("FLUSHALL"), "-ERR unknown command 'FLUSHALL', with args beginning with: "},
		{"binary arguments", cmd("RL.FIXED", "\x00\xff", "\x01\x02", "1s"), `-ERR invalid limit '\x01\x02': must be an integer`},
		{"binary command", cmd("\xde\xad\xbe\xef"), `-ERR unknown command '\xde\xad\xbe\xef', with args beginning with: `},
	} {
		c.send(t, tc.in)
		if got := c.decisionLine(t); got != tc.want {
			t.Errorf("%s: got %q\nwant %q", tc.name, got, tc.want)
		}
		check()
	}

	// Broken frames: a protocol error, then that connection closes.
	for _, tc := range []struct{ name, in, want string }{
		{"garbage after a frame header", "*2\r\n$4\r\nECHO\r\n\x00\x01\x02\r\n", "-ERR Protocol error: expected '$', got '\x00'"},
		{"bad multibulk length", "*zz\r\n", "-ERR Protocol error: invalid multibulk length"},
		{"a multibulk count past 2^62", "*4444444444444444444\r\n", "-ERR Protocol error: invalid multibulk length"},
		{"a bulk length past the limit", "*1\r\n$99999999999\r\n", "-ERR Protocol error: invalid bulk length"},
		{"bad bulk length", "*1\r\n$-9\r\n", "-ERR Protocol error: invalid bulk length"},
		{"bulk longer than declared", "*1\r\n$2\r\nPING\r\n", "-ERR Protocol error: invalid bulk length"},
		{"unbalanced inline quotes", "PING \"oops\r\n", "-ERR Protocol error: unbalanced quotes in request"},
	} {
		b := dialRaw(t, s.Addr)
		b.send(t, []byte(tc.in))
		if got := b.line(t); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
		if !b.closed(t) {
			t.Errorf("%s: connection left open", tc.name)
		}
		check()
	}

	// A frame cut off half-way, then the client leaves.
	cut := dialRaw(t, s.Addr)
	cut.send(t, cmd("RL.FIXED", "k", "10", "1s")[:15])
	cut.nc.Close()
	check()

	// 10,000 pipelined commands in one write, answered in order.
	p := dialRaw(t, s.Addr)
	var pipe bytes.Buffer
	for i := range 10_000 {
		if i%2 == 0 {
			pipe.Write(cmd("RL.FIXED", "many", "2500", "1h"))
		} else {
			pipe.Write(cmd("PING", fmt.Sprint(i)))
		}
	}
	go func() { _, _ = p.nc.Write(pipe.Bytes()) }()
	allowed := 0
	for i := range 10_000 {
		got := p.decisionLine(t)
		if i%2 == 1 {
			if want := fmt.Sprintf("$%d", len(fmt.Sprint(i))); got != want {
				t.Fatalf("reply %d = %q, want the PING's %q", i, got, want)
			}
			_ = p.line(t) // the echoed bulk
			continue
		}
		if strings.HasPrefix(got, ":1 ") {
			allowed++
		}
	}
	if allowed != 2500 {
		t.Errorf("allowed %d of 5000, want 2500", allowed)
	}
	check()
	if strings.Contains(s.logs.String(), "panic") {
		t.Errorf("the log mentions a panic:\n%s", s.logs)
	}
}

// SIGTERM drains: a pipeline already sent is answered before the process
// exits, and the process exits 0.
func TestSIGTERMDrains(t *testing.T) {
	s := startSluice(t)
	c := dialRaw(t, s.Addr)
	c.send(t, cmd("PING"))
	if got := c.line(t); got != "+PONG" {
		t.Fatalf("PING = %q", got)
	}
	var pipe bytes.Buffer
	for range 2000 {
		pipe.Write(cmd("RL.TOKEN", "drain", "1000", "1", "1h"))
	}
	c.send(t, pipe.Bytes())
	time.Sleep(20 * time.Millisecond) // let the server read the pipeline
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		l, err := c.rd.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(l, "*5") {
			n++
		}
	}
	if n != 2000 {
		t.Errorf("%d of 2000 pipelined requests answered across SIGTERM", n)
	}
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Errorf("exit: %v\n%s", err, s.logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sluice did not exit after SIGTERM")
	}
	for _, want := range []string{"shutting down", "stopped"} {
		if !strings.Contains(s.logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, s.logs)
		}
	}
}

func TestFirstLogLineNamesTheStore(t *testing.T) {
	s := startSluice(t)
	first, _, _ := strings.Cut(s.logs.String(), "\n")
	if !strings.Contains(first, "in-memory store") {
		t.Errorf("first log line %q does not say the in-memory store is used", first)
	}
}
