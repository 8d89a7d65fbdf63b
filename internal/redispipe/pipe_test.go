package redispipe_test

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redispipe"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/resp"
)

// outcome is what one Done was called with, and how often.
type outcome struct {
	reply any
	err   error
}

// sendAll sends each command and waits, within limit, for every Done,
// failing the test if one runs twice or not at all.
func sendAll(t *testing.T, p *redispipe.Pipe, deadline time.Time, limit time.Duration, cmds ...[]byte) []outcome {
	t.Helper()
	got := make(chan struct {
		i int
		o outcome
	}, 2*len(cmds))
	for i, cmd := range cmds {
		p.Send(cmd, deadline, func(reply any, err error) {
			got <- struct {
				i int
				o outcome
			}{i, outcome{reply, err}}
		})
	}
	out := make([]outcome, len(cmds))
	seen := make([]bool, len(cmds))
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for range cmds {
		select {
		case g := <-got:
			if seen[g.i] {
				t.Fatalf("command %d completed twice", g.i)
			}
			seen[g.i], out[g.i] = true, g.o
		case <-timer.C:
			t.Fatalf("not every command completed within %v: %v", limit, seen)
		}
	}
	select {
	case g := <-got:
		t.Fatalf("command %d completed again", g.i)
	case <-time.After(10 * time.Millisecond):
	}
	return out
}

func newPipe(t *testing.T, srv *redistest.Server) *redispipe.Pipe {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
	t.Cleanup(func() { _ = c.Close() })
	p := redispipe.New(redispipe.Config{Options: c.Options()})
	if p == nil {
		t.Fatal("no pipe for a plain client")
	}
	t.Cleanup(p.Close)
	return p
}

// Each command's Done gets its own reply, in the order written, a Redis
// error reply as a resp.ReplyError, and runs once.
func TestSendReplies(t *testing.T) {
	p := newPipe(t, redistest.Start(t))
	out := sendAll(t, p, time.Now().Add(5*time.Second), 10*time.Second,
		resp.AppendCommand(nil, "SET", "k", "v"),
		resp.AppendCommand(nil, "GET", "k"),
		resp.AppendCommand(nil, "INCR", "k"),
		resp.AppendCommand(nil, "ECHO", "last"))
	want := []any{"OK", "v", nil, "last"}
	for i, o := range out {
		if i == 2 {
			if _, ok := o.reply.(resp.ReplyError); !ok || o.err != nil {
				t.Errorf("INCR of a string: %#v, %v; want a resp.ReplyError", o.reply, o.err)
			}
			continue
		}
		if o.err != nil || o.reply != want[i] {
			t.Errorf("command %d: %#v, %v; want %#v", i, o.reply, o.err, want[i])
		}
	}
}

// A paused Redis fails every awaited command by its deadline, not later;
// once Redis runs again the pipe dials a new connection. A closed pipe
// fails what is sent with ErrClosed, before Send returns.
func TestSendDeadlineAndClose(t *testing.T) {
	srv := redistest.Start(t)
	p := newPipe(t, srv)
	ping := resp.AppendCommand(nil, "PING")
	if o := sendAll(t, p, time.Now().Add(5*time.Second), 10*time.Second, ping); o[0].err != nil {
		t.Fatal(o[0].err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := sendAll(t, p, start.Add(200*time.Millisecond), 5*time.Second, ping, ping)
	took := time.Since(start)
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if !errors.Is(o.err, os.ErrDeadlineExceeded) {
			t.Errorf("command %d to a paused Redis: %#v, %v; want a deadline error", i, o.reply, o.err)
		}
	}
	if took > 2*time.Second {
		t.Errorf("the deadline error came after %v; want about 200ms", took)
	}
	if o := sendAll(t, p, time.Now().Add(5*time.Second), 10*time.Second, ping); o[0].err != nil || o[0].reply != "PONG" {
		t.Fatalf("after the pause: %#v, %v", o[0].reply, o[0].err)
	}
	p.Close()
	var err error
	p.Send(ping, time.Now().Add(time.Second), func(_ any, e error) { err = e })
	if !errors.Is(err, redispipe.ErrClosed) {
		t.Fatalf("Send on a closed pipe: %v; want ErrClosed before Send returns", err)
	}
}

// A twin is a connection of its own: a WAIT that blocks it (no replica
// to acknowledge) holds up nothing sent on its pipe, and closing the pipe
// closes its twin.
func TestTwin(t *testing.T) {
	p := newPipe(t, redistest.Start(t))
	twin := p.Twin()
	if p.Twin() != twin {
		t.Fatal("a second Twin is another pipe")
	}
	waited := make(chan outcome, 1)
	start := time.Now()
	twin.Send(resp.AppendCommand(nil, "WAIT", "1", "2000"), time.Now().Add(5*time.Second), func(reply any, err error) {
		waited <- outcome{reply, err}
	})
	out := sendAll(t, p, time.Now().Add(5*time.Second), 10*time.Second, resp.AppendCommand(nil, "PING"))
	if out[0].err != nil || out[0].reply != "PONG" {
		t.Fatalf("PING on the pipe: %+v", out[0])
	}
	if d := time.Since(start); d >= 2*time.Second {
		t.Fatalf("PING on the pipe waited %v, behind the twin's WAIT", d)
	}
	p.Close()
	select {
	case o := <-waited:
		if !errors.Is(o.err, redispipe.ErrClosed) {
			t.Fatalf("the twin's WAIT after Close: %+v, want ErrClosed", o)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the pipe left its twin's WAIT waiting")
	}
}
