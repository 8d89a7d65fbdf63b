package accept

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// failing is a listener whose Accept fails with errs in turn, then gives
// a connection; Close makes it answer net.ErrClosed.
type failing struct {
	errs   []error
	closed bool
}

func (f *failing) Accept() (net.Conn, error) {
	if f.closed {
		return nil, net.ErrClosed
	}
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	c, _ := net.Pipe()
	return c, nil
}
func (f *failing) Close() error   { f.closed = true; return nil }
func (f *failing) Addr() net.Addr { return &net.TCPAddr{} }

func TestRetriesUntilAConnection(t *testing.T) {
	// ENOBUFS and ENOMEM are not net.Error temporaries: net/http and
	// grpc-go would have returned on them, and the sidecar stopped.
	errs := []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EMFILE, syscall.EMFILE, syscall.EMFILE, syscall.EMFILE, syscall.EMFILE}
	var logs bytes.Buffer
	l := Retrying(&failing{errs: append([]error(nil), errs...)}, slog.New(slog.NewTextHandler(&logs, nil)), "test").(*listener)
	var waits []time.Duration
	l.sleep = func(d time.Duration, _ <-chan struct{}) bool { waits = append(waits, d); return false }
	c, err := l.Accept()
	if err != nil || c == nil {
		t.Fatalf("Accept = %v, %v; want a connection", c, err)
	}
	c.Close()
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000}
	if len(waits) != len(want) {
		t.Fatalf("waited %v; want %v ms", waits, want)
	}
	for i, w := range want {
		if waits[i] != w*time.Millisecond {
			t.Fatalf("wait %d = %v; want %v (all: %v)", i, waits[i], w*time.Millisecond, waits)
		}
	}
	// The failures came within a second: one line for them, one for the
	// recovery with their count.
	out := logs.String()
	if n := strings.Count(out, "accept failed"); n != 1 {
		t.Errorf("%d 'accept failed' lines for %d failures within a second; want 1:\n%s", n, len(errs), out)
	}
	if !strings.Contains(out, "accepting connections again") || !strings.Contains(out, "failed_accepts=9") {
		t.Errorf("no recovery line counting the 9 failures:\n%s", out)
	}
}

func TestClosedIsFinal(t *testing.T) {
	f := &failing{}
	l := Retrying(f, slog.New(slog.DiscardHandler), "test")
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v; want net.ErrClosed", err)
	}
}

// A Close during a pause ends the pause and Accept at once, so a
// draining server is not held up to a second by a listener out of files.
func TestCloseEndsThePause(t *testing.T) {
	f := &failing{errs: []error{syscall.EMFILE}}
	l := Retrying(f, slog.New(slog.DiscardHandler), "test").(*listener)
	paused := make(chan struct{})
	l.sleep = func(d time.Duration, closed <-chan struct{}) bool {
		close(paused)
		return sleepOrClose(time.Hour, closed)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	<-paused
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept = %v; want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still paused 10s after Close")
	}
}
