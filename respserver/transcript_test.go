package respserver

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/policy"
)

// Transcript tests: each testdata/*.txt is a conversation with a fresh
// server on the memory store, with the clock pinned at 2026-01-01T00:00:00Z.
//
//	# a comment
//	> RL.FIXED key 10 1m          a command; "quoted" arguments take Go escapes,
//	[1, 10, 9, 0, 60000]          @repeat:N:c is c repeated N times
//	~^\[1, 10,                    the reply matches a regular expression
//	@advance 30s                  the clock moves on
//	@raw "*1\r\n$4\r\nPING\r\n"   bytes sent as they are; the next line is the reply
//	@send "*1\r\n"               bytes sent as they are, no reply read
//	@closed                       the server has closed the connection
//	@conn NAME                    switch to (or open) another connection
//	@requirepass PASS             (before any command) the server's password
//
// Replies render on one line: integers bare, simple strings +OK, errors
// -ERR …, bulk strings "quoted", nil, [arrays], {"maps": 1}.

var transcriptStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pinnedClock is a clock that moves only when told.
type pinnedClock struct{ us atomic.Int64 }

func newPinnedClock() *pinnedClock {
	c := &pinnedClock{}
	c.us.Store(transcriptStart.UnixMicro())
	return c
}
func (c *pinnedClock) Now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *pinnedClock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

func testPolicies(t testing.TB) engine.Policies {
	t.Helper()
	set, err := policy.Load(filepath.Join("testdata", "policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// testGoroutines gives every server a test starts with no Loops of its
// own a goroutine per connection, instead of one event loop (see
// TestGoroutineTransport).
var testGoroutines bool

// testLoops runs n event loops until the test ends; for n == 0, or where
// there are none (not Linux), it returns an empty, non-nil list: a
// goroutine per connection, which serveOn leaves so.
func testLoops(t testing.TB, n int) []*evloop.Loop {
	t.Helper()
	loops := []*evloop.Loop{}
	for range n {
		l, err := evloop.New()
		if errors.Is(err, errors.ErrUnsupported) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { ran <- l.Run() }()
		t.Cleanup(func() {
			l.Close()
			if err := <-ran; err != nil {
				t.Errorf("event loop: %v", err)
			}
		})
		loops = append(loops, l)
	}
	return loops
}

// serveOn serves cfg on a fresh loopback port; Serve's result arrives on
// the channel. Without Loops, the server has one event loop of its own
// (unless testGoroutines).
func serveOn(t testing.TB, cfg Config) (*Server, net.Listener, chan error) {
	t.Helper()
	if cfg.Loops == nil && !testGoroutines {
		cfg.Loops = testLoops(t, 1)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return srv, ln, done
}

// startServer serves cfg on a loopback port until the test ends.
func startServer(t testing.TB, cfg Config) (*Server, string) {
	t.Helper()
	srv, ln, done := serveOn(t, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return srv, ln.Addr().String()
}

func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runTranscript(t, f) })
	}
}

type testConn struct {
	nc net.Conn
	rd *bufio.Reader
}

func dialTest(t testing.TB, addr string) *testConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &testConn{nc: nc, rd: bufio.NewReader(nc)}
}

// readSince tells whether srv has read from c's connection since t.
func readSince(srv *Server, c *testConn, t time.Time) bool {
	sc := serverSide(srv, c)
	return sc != nil && sc.active.Load() >= t.UnixNano()
}

// serverSide is the server's client for c, while the server holds it:
// the one CLIENT LIST shows.
func serverSide(srv *Server, c *testConn) *client {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for sc := range srv.conns {
		if sc.addr == c.nc.LocalAddr().String() {
			return sc
		}
	}
	return nil
}

func (c *testConn) send(t testing.TB, raw []byte) {
	t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(raw); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func (c *testConn) reply(t testing.TB) (string, error) {
	t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	return readRendered(c.rd)
}

func encodeCommand(args [][]byte) []byte {
	b := redcon.AppendArray(nil, len(args))
	for _, a := range args {
		b = redcon.AppendBulk(b, a)
	}
	return b
}

func runTranscript(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	clock := newPinnedClock()
	store, err := memstore.New(memstore.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Service: testService(t, store, testPolicies(t))}
	for _, l := range lines {
		if pass, ok := strings.CutPrefix(l, "@requirepass "); ok {
			cfg.RequirePass = strings.TrimSpace(pass)
		}
	}
	srv, addr := startServer(t, cfg)
	conns := map[string]*testConn{}
	cur := "main"
	conn := func() *testConn {
		if conns[cur] == nil {
			conns[cur] = dialTest(t, addr)
		}
		return conns[cur]
	}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], "\r")
		where := fmt.Sprintf("%s:%d", file, i+1)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "@requirepass "):
		case strings.HasPrefix(line, "@advance "):
			d, err := time.ParseDuration(strings.TrimPrefix(line, "@advance "))
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			clock.Advance(d)
		case strings.HasPrefix(line, "@send "):
			raw, err := strconv.Unquote(strings.TrimPrefix(line, "@send "))
			if err != nil {
				t.Fatalf("%s: @send wants a Go-quoted string: %v", where, err)
			}
			c, sent := conn(), time.Now()
			c.send(t, []byte(raw))
			// The server reads the part alone, before what follows.
			waitFor(t, func() bool { return readSince(srv, c, sent) }, where+": the server to read the part sent")
		case strings.HasPrefix(line, "@conn "):
			cur = strings.TrimSpace(strings.TrimPrefix(line, "@conn "))
		case line == "@closed":
			c := conn()
			_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			if b, err := c.rd.ReadByte(); err == nil {
				t.Errorf("%s: connection still open: read %q", where, b)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
				t.Errorf("%s: want the connection closed, got %v", where, err)
			}
			// The server closes a connection, then forgets it: wait for
			// that, so that a CLIENT LIST after it never shows it (a
			// loaded machine showed it once).
			waitFor(t, func() bool { return serverSide(srv, c) == nil }, where+": the server to forget the closed connection")
			delete(conns, cur)
		case strings.HasPrefix(line, "> "), strings.HasPrefix(line, "@raw "):
			var raw []byte
			if r, ok := strings.CutPrefix(line, "@raw "); ok {
				s, err := strconv.Unquote(r)
				if err != nil {
					t.Fatalf("%s: @raw wants a Go-quoted string: %v", where, err)
				}
				raw = []byte(s)
			} else {
				args, err := splitArgs(strings.TrimPrefix(line, "> "))
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				raw = encodeCommand(args)
			}
			c := conn()
			c.send(t, raw)
			// Every following line that is not a directive, a command or a
			// comment is one expected reply, in order.
			if i+1 >= len(lines) || !isExpectation(lines[i+1]) {
				t.Fatalf("%s: a command without an expected reply", where)
			}
			for i+1 < len(lines) && isExpectation(lines[i+1]) {
				i++
				want := strings.TrimRight(lines[i], "\r")
				got, err := c.reply(t)
				if err != nil {
					t.Errorf("%s: %s: reading the reply: %v", where, shorten(line), err)
					delete(conns, cur)
					break
				}
				if !matches(want, got) && *update {
					lines[i] = got
				} else if !matches(want, got) {
					t.Errorf("%s: %s\n got: %s\nwant: %s", where, shorten(line), got, want)
				}
			}
		default:
			t.Fatalf("%s: cannot read line %q", where, line)
		}
	}
	if *update {
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// update rewrites the transcripts' expected replies with the actual ones:
// go test -run TestTranscripts -update, then review the diff.
var update = flag.Bool("update", false, "rewrite testdata transcripts with the replies received")

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func matches(want, got string) bool {
	if re, ok := strings.CutPrefix(want, "~"); ok {
		return regexp.MustCompile(re).MatchString(got)
	}
	return want == got
}

// splitArgs splits a command line on spaces; "quoted" arguments take Go
// escapes, and @repeat:N:s stands for s repeated N times.
func splitArgs(s string) ([][]byte, error) {
	var args [][]byte
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		if s[0] == '"' {
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			a, err := strconv.Unquote(s[:end+1])
			if err != nil {
				return nil, err
			}
			args = append(args, []byte(a))
			s = s[end+1:]
			continue
		}
		tok, rest, _ := strings.Cut(s, " ")
		if r, ok := strings.CutPrefix(tok, "@repeat:"); ok {
			n, what, _ := strings.Cut(r, ":")
			count, err := strconv.Atoi(n)
			if err != nil {
				return nil, err
			}
			tok = strings.Repeat(what, count)
		}
		args = append(args, []byte(tok))
		s = rest
	}
	return args, nil
}

// readRendered reads one RESP2 or RESP3 reply and renders it on one line.
func readRendered(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") || len(line) < 3 {
		return "", fmt.Errorf("malformed reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return "+" + body, nil
	case '-':
		return "-" + body, nil
	case ':', ',', '(':
		return body, nil
	case '#':
		return "#" + body, nil
	case '_':
		return "nil", nil
	case '$', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "nil", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return strconv.Quote(string(buf[:n])), nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "nil", nil
		}
		isMap := line[0] == '%' || line[0] == '|'
		parts := make([]string, 0, n)
		for range n {
			v, err := readRendered(r)
			if err != nil {
				return "", err
			}
			if isMap {
				k := v
				if v, err = readRendered(r); err != nil {
					return "", err
				}
				v = k + ": " + v
			}
			parts = append(parts, v)
		}
		if isMap {
			return "{" + strings.Join(parts, ", ") + "}", nil
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	}
	return "", fmt.Errorf("unknown reply type in %q", line)
}

func isExpectation(line string) bool {
	line = strings.TrimRight(line, "\r")
	return line != "" && !strings.HasPrefix(line, "> ") && !strings.HasPrefix(line, "@") && !strings.HasPrefix(line, "#")
}

func newReader(nc net.Conn) *bufio.Reader { return bufio.NewReader(nc) }
