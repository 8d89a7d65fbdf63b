package grpcwire

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-rl/sluice/internal/membudget"
)

// outcome is how the server answered a client's misstep: a reset of one
// stream, or the connection's end (GOAWAY, then close).
type outcome struct {
	goAway bool // else RST_STREAM
	stream uint32
	code   http2.ErrCode
	debug  string // GOAWAY's debug data
}

// headers writes a header block of fields (name, value pairs) on id.
func (rc *rawConn) headers(id uint32, endStream bool, fields ...string) {
	rc.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		rc.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndHeaders: true, EndStream: endStream})
}

// grpcFields are a gRPC request's header fields, with more after them.
func grpcFields(more ...string) []string {
	return append([]string{":method", "POST", ":scheme", "http", ":path", echoPath, ":authority", "x",
		"content-type", "application/grpc", "te", "trailers"}, more...)
}

// until reads frames (answering SETTINGS and PING) until a stream is
// reset or the connection goes away; a closed connection without GOAWAY
// is a failure, and so is seeing neither within 5 s.
func (rc *rawConn) until(t *testing.T) outcome {
	t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			t.Fatalf("no RST_STREAM nor GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				rc.fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeNo {
				return outcome{stream: f.StreamID, code: f.ErrCode}
			}
		case *http2.GoAwayFrame:
			return outcome{goAway: true, code: f.ErrCode, debug: string(f.DebugData())}
		}
	}
}

// TestStrictHTTP2: each request HTTP/2 calls malformed, and each frame on
// a stream where none may come, is answered with the error RFC 9113 names
// (h2spec's cases that the own transport once let through).
func TestStrictHTTP2(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		send func(t *testing.T, rc *rawConn)
		want outcome
	}{
		{"uppercase field name (8.2.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, true, grpcFields("X-Test", "ok")...)
		}, outcome{stream: 1, code: http2.ErrCodeProtocol}},
		{"duplicated :method (8.3.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, true, append([]string{":method", "POST"}, grpcFields()...)...)
		}, outcome{stream: 1, code: http2.ErrCodeProtocol}},
		{"duplicated :scheme (8.3.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, true, append([]string{":scheme", "http"}, grpcFields()...)...)
		}, outcome{stream: 1, code: http2.ErrCodeProtocol}},
		{"duplicated :path (8.3.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, true, append([]string{":path", echoPath}, grpcFields()...)...)
		}, outcome{stream: 1, code: http2.ErrCodeProtocol}},
		{"no :scheme (8.3.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, true, ":method", "POST", ":path", echoPath, "content-type", "application/grpc")
		}, outcome{stream: 1, code: http2.ErrCodeProtocol}},
		{"pseudo-header in trailers (8.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, false, grpcFields()...)
			rc.fr.WriteData(1, false, []byte{0, 0, 0})
			rc.headers(1, true, ":method", "POST")
		}, outcome{stream: 1, code: http2.ErrCodeProtocol}},
		{"second HEADERS without END_STREAM (8.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, false, grpcFields()...)
			rc.fr.WriteData(1, false, []byte{0, 0, 0})
			rc.headers(1, false, "x-test", "ok")
		}, outcome{stream: 1, code: http2.ErrCodeProtocol}},
		{"second HEADERS on a non-gRPC request (8.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, false, ":method", "POST", ":scheme", "http", ":path", "/", ":authority", "x")
			rc.fr.WriteData(1, false, []byte("test"))
			rc.headers(1, false, "x-test", "ok")
		}, outcome{stream: 1, code: http2.ErrCodeProtocol}},
		{"HEADERS on a half-closed stream (5.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, true, ":method", "GET", ":scheme", "http", ":path", "/", ":authority", "x")
			rc.headers(1, true, ":method", "GET", ":scheme", "http", ":path", "/", ":authority", "x")
		}, outcome{goAway: true, code: http2.ErrCodeStreamClosed}},
		{"HEADERS on a closed stream (5.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.request(1, echoPath, "", []byte("\x0a\x01v"))
			if a := rc.readUntilEnd(t, 1); a.status != "0" {
				t.Fatalf("the call: %+v", a)
			}
			rc.headers(1, true, grpcFields()...)
		}, outcome{goAway: true, code: http2.ErrCodeStreamClosed}},
		{"HEADERS on a stream the client reset (5.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(1, false, grpcFields()...)
			rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			rc.headers(1, true, grpcFields()...)
		}, outcome{stream: 1, code: http2.ErrCodeStreamClosed}},
		{"stream id below the last opened (5.1.1)", Config{}, func(t *testing.T, rc *rawConn) {
			rc.headers(5, true, ":method", "GET", ":scheme", "http", ":path", "/", ":authority", "x")
			rc.headers(3, true, ":method", "GET", ":scheme", "http", ":path", "/", ":authority", "x")
		}, outcome{goAway: true, code: http2.ErrCodeProtocol}},
		{"past the concurrent-stream limit (5.1.2)", Config{MaxConcurrentStreams: 2}, func(t *testing.T, rc *rawConn) {
			// A window of 0 keeps each answer's body, and its stream, open.
			rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			for id := uint32(1); id <= 5; id += 2 {
				rc.headers(id, true, ":method", "GET", ":scheme", "http", ":path", "/", ":authority", "x")
			}
		}, outcome{stream: 5, code: http2.ErrCodeRefusedStream}},
		{"PINGs past grpc-go's policy", Config{}, func(t *testing.T, rc *rawConn) {
			for range maxPingStrikes + 2 {
				rc.fr.WritePing(false, [8]byte{1})
			}
		}, outcome{goAway: true, code: http2.ErrCodeEnhanceYourCalm, debug: "too_many_pings"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := start(t, tc.cfg)
			rc := rawDial(t, f.addr)
			tc.send(t, rc)
			got := rc.until(t)
			if tc.want.debug == "" {
				got.debug = "" // the reason's wording is not asserted
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestPingsWithAnswers: a client that PINGs between calls it is answered
// is never struck (grpc-go resets its strikes when it sends HEADERS or
// DATA), however often.
func TestPingsWithAnswers(t *testing.T) {
	f := start(t, Config{})
	rc := rawDial(t, f.addr)
	for i := range uint32(10) {
		rc.fr.WritePing(false, [8]byte{byte(i)})
		id := 2*i + 1
		rc.request(id, echoPath, "", []byte("\x0a\x01v"))
		if a := rc.readUntilEnd(t, id); a.status != "0" { // fails on a GOAWAY
			t.Fatalf("call %d: %+v", id, a)
		}
	}
}

// TestDeadlineAlreadyOver: a call whose grpc-timeout is 0 is answered
// DEADLINE_EXCEEDED without its handler being called, as grpc-go answers
// it: a decision never made is never charged.
func TestDeadlineAlreadyOver(t *testing.T) {
	f := start(t, Config{})
	rc := rawDial(t, f.addr)
	for i, timeout := range []string{"0n", "0S", "00000000m"} {
		id := uint32(2*i + 1)
		rc.request(id, echoPath, timeout, []byte("\x0a\x04hold"))
		if a := rc.readUntilEnd(t, id); a.status != "4" {
			t.Fatalf("grpc-timeout %s: %+v; want DEADLINE_EXCEEDED (4)", timeout, a)
		}
	}
	select {
	case c := <-f.echo.held:
		t.Fatalf("a call whose deadline was over reached its handler: %q", c.Message())
	default:
	}
}

// TestMaxConns: a connection past MaxConns is sent GOAWAY and closed;
// one leaving makes room.
func TestMaxConns(t *testing.T) {
	f := start(t, Config{MaxConns: 1})
	first := rawDial(t, f.addr)
	first.request(1, echoPath, "", []byte("\x0a\x01v"))
	if a := first.readUntilEnd(t, 1); a.status != "0" {
		t.Fatalf("the first connection: %+v", a)
	}
	// Raw, without a preface: the server answers before reading one.
	nc, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	second := &rawConn{nc: nc, fr: http2.NewFramer(io.Discard, nc)}
	if got := second.until(t); !got.goAway || got.code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("the connection over the cap: %+v", got)
	}
	first.nc.Close()
	waitFor(t, "the first connection to be counted out", func() bool {
		f.srv.mu.Lock()
		defer f.srv.mu.Unlock()
		return f.srv.open == 0
	})
	third := rawDial(t, f.addr)
	third.request(1, echoPath, "", []byte("\x0a\x01v"))
	if a := third.readUntilEnd(t, 1); a.status != "0" {
		t.Fatalf("once the first left: %+v", a)
	}
}

// TestIdleTimeout: a connection with no call open for IdleTimeout is sent
// GOAWAY (NO_ERROR) and closed; one with a call open is not.
func TestIdleTimeout(t *testing.T) {
	const idle = 200 * time.Millisecond
	f := start(t, Config{IdleTimeout: idle})
	busy := rawDial(t, f.addr)
	busy.request(1, echoPath, "", []byte("\x0a\x04hold"))
	held := <-f.echo.held
	rc := rawDial(t, f.addr)
	rc.request(1, echoPath, "", []byte("\x0a\x01v"))
	if a := rc.readUntilEnd(t, 1); a.status != "0" {
		t.Fatalf("the call: %+v", a)
	}
	begun := time.Now()
	if got := rc.until(t); !got.goAway || got.code != http2.ErrCodeNo {
		t.Fatalf("the idle connection: %+v", got)
	}
	if waited := time.Since(begun); waited < idle/2 {
		t.Fatalf("GOAWAY after %v idle; want about %v", waited, idle)
	}
	rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, rc.nc); err != nil {
		t.Fatalf("the idle connection was not closed: %v", err)
	}
	// The busy one was not told to go, though it has been open longer.
	held.Reply(held.Message())
	if a := busy.readUntilEnd(t, 1); a.status != "0" { // fails on a GOAWAY
		t.Fatalf("the busy connection's call: %+v", a)
	}
}

// TestBudget: a connection holding more than the budget allows (a large
// message never finished) is sent GOAWAY ENHANCE_YOUR_CALM and closed,
// and leaves the budget; a small one is served on.
func TestBudget(t *testing.T) {
	b, err := membudget.New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	f := start(t, Config{Budget: b})
	small := rawDial(t, f.addr)
	small.request(1, echoPath, "", []byte("\x0a\x01v"))
	if a := small.readUntilEnd(t, 1); a.status != "0" {
		t.Fatalf("the small connection: %+v", a)
	}
	big := rawDial(t, f.addr)
	big.headers(1, false, grpcFields()...)
	body := grpcMsg(make([]byte, 3<<20))[:2<<20] // never finished
	for len(body) > 0 {
		n := min(len(body), defaultFrame)
		if err := big.fr.WriteData(1, false, body[:n]); err != nil {
			if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
				break
			}
			break // the server closed it: what until reads says how
		}
		body = body[n:]
	}
	if got := big.until(t); !got.goAway || got.code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("the connection over the budget: %+v", got)
	}
	waitFor(t, "the budget to be given back", func() bool { return b.Total() < 256<<10 })
	small.request(3, echoPath, "", []byte("\x0a\x01v"))
	if a := small.readUntilEnd(t, 3); a.status != "0" {
		t.Fatalf("the small connection after: %+v", a)
	}
}

// smallSendBuffers gives each accepted connection a send buffer of 4 KiB,
// so that a client that reads nothing stops the server's writes soon.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4 << 10)
	}
	return nc, err
}

// TestBudgetGivesBackAtOnce: a connection the budget picks gives its
// requests' bytes back when it is picked, not when it closes. Here it
// cannot close before the test ends: its client reads nothing, and its
// GOAWAY waits behind answers that neither socket has room for, with a
// write deadline (a second in the sidecar) an hour away. Meanwhile the
// flood's next connections would find the budget still full.
func TestBudgetGivesBackAtOnce(t *testing.T) {
	b, err := membudget.New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	var answered atomic.Int32
	s.evictGrace = time.Hour
	s.HandleUnary(echoPath, func(c *Call) { c.Reply(c.Message()); answered.Add(1) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(smallSendBuffers{ln}) }()
	t.Cleanup(func() { s.Close(); <-done })

	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
	}}
	nc, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc := rawOver(t, nc)
	// 60 KB of answers, never read: more than the two sockets hold.
	for id := uint32(1); id <= 5; id += 2 {
		rc.request(id, echoPath, "", append([]byte{0x0a, 0xa0, 0x9c, 0x01}, make([]byte, 20000)...))
	}
	waitFor(t, "the answers", func() bool { return answered.Load() == 3 })
	var c *conn
	s.mu.Lock()
	for x := range s.conns {
		c = x
	}
	s.mu.Unlock()

	// The first frame of a message announced at 3 MB: its buffer takes
	// the announced length, past the budget. Nothing more is sent, so
	// that nothing but the budget's pick (no stream error on a window
	// the client overran) can give the bytes back.
	rc.headers(7, false, grpcFields()...)
	if err := rc.fr.WriteData(7, false, grpcMsg(make([]byte, 3<<20))[:defaultFrame]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the budget to pick the connection", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.evicted || c.dead
	})
	waitFor(t, "the budget to be given back while the connection is open", func() bool { return b.Total() < 256<<10 })
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		t.Fatal("the connection closed before its write deadline")
	}
}
