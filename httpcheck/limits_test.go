package httpcheck

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs s on a loopback listener until the test ends.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		if err := <-done; err != ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// ask sends a raw request on c and returns the status line of its answer.
func ask(t *testing.T, c net.Conn, rd *bufio.Reader, req string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return "write: " + err.Error()
	}
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		return "read: " + err.Error()
	}
	resp.Body.Close()
	return resp.Status
}

const checkLine = "GET /v1/check?policy=api&key=k HTTP/1.1\r\nHost: x\r\n"

// TestHeaderLimit: a check's headers up to MaxHeaderBytes are read; past
// it (and net/http's 4 KiB of slack) the answer is 431 before the rest
// is read, however long the line the client goes on sending.
func TestHeaderLimit(t *testing.T) {
	addr := serve(t, newServer(t, ""))
	for _, tc := range []struct {
		size int
		want string
	}{
		{MaxHeaderBytes - 200, "200 OK"},
		{MaxHeaderBytes + 4096, "431 Request Header Fields Too Large"},
		{1_000_000, "431 Request Header Fields Too Large"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		got := ask(t, c, bufio.NewReader(c), checkLine+"X-Big: "+strings.Repeat("a", tc.size)+"\r\n\r\n")
		c.Close()
		if got != tc.want {
			t.Errorf("a header of %d bytes: %q; want %q", tc.size, got, tc.want)
		}
	}
}

// TestMaxConns: past Config.MaxConns a new connection is answered 503 and
// closed, the open ones are served on, and once one closes a new one is
// served.
func TestMaxConns(t *testing.T) {
	s := newServer(t, "")
	s.maxConns = 2
	addr := serve(t, s)
	type conn struct {
		c  net.Conn
		rd *bufio.Reader
	}
	dial := func() conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return conn{c, bufio.NewReader(c)}
	}
	a, b := dial(), dial()
	for _, x := range []conn{a, b} {
		if got := ask(t, x.c, x.rd, checkLine+"\r\n"); got != "200 OK" {
			t.Fatalf("a connection within the cap: %q", got)
		}
	}
	over := dial()
	_ = over.c.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(over.rd, nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the connection past the cap: %v, %v; want a 503", resp, err)
	}
	if body, err := io.ReadAll(resp.Body); err != nil || !strings.Contains(string(body), "--http-max-conns") {
		t.Errorf("the 503's body: %q, %v", body, err)
	}
	if _, err := over.rd.ReadByte(); err == nil {
		t.Error("the connection past the cap is still open")
	}
	if got := ask(t, a.c, a.rd, checkLine+"\r\n"); got != "429 Too Many Requests" {
		t.Errorf("a connection within the cap, after the refusal: %q", got)
	}
	b.c.Close()
	for deadline := time.Now().Add(5 * time.Second); s.conns.Load() > 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted 5 s after one of two closed", s.conns.Load())
		}
	}
	d := dial()
	if got := ask(t, d.c, d.rd, checkLine+"\r\n"); got != "429 Too Many Requests" {
		t.Errorf("a new connection once one closed: %q", got)
	}
}
