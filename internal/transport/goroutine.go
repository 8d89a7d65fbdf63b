package transport

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/service"
)

// GoConn serves a connection on a goroutine of its own: where no event
// loop is (--io-loops 0, other systems) or one cannot take it (no file
// descriptor). It reads, runs what the read completed, waits for its
// decisions and writes, so only this connection waits on Redis here, and
// a read's decisions are one batch.
//
// Another goroutine wakes it through nc, whose methods are safe from any
// goroutine: a read deadline in the past ends its Read (a monitor's
// lines, an eviction), and Close ends its Read or Write (a kill).
type GoConn struct {
	nc       net.Conn // nil for a connection without a network (NewGoConn)
	c        Conn
	svc      *service.Service
	draining atomic.Bool // Drain was called: a deadline is the drain's, not a wake-up
}

// NewGoConn is the transport of c on nc, which Serve serves. With no nc
// (a connection state made for a test) it serves nothing: work runs in
// place, and there is nothing to wake or close.
func NewGoConn(nc net.Conn, c Conn, svc *service.Service) *GoConn {
	return &GoConn{nc: nc, c: c, svc: svc}
}

// aLongTimeAgo, as a read deadline, wakes a goroutine blocked in Read.
var aLongTimeAgo = time.Unix(1, 0)

func (g *GoConn) Wake() {
	if g.nc != nil {
		_ = g.nc.SetReadDeadline(aLongTimeAgo)
	}
}

func (g *GoConn) Kill() { g.CloseNow() }

func (g *GoConn) Blocking() bool { return true }

// Land is never called: Blocking reports true, so the work an event loop
// runs off the connection runs in place here, and nothing lands.
func (g *GoConn) Land(Segment) {}

// Drain lets the goroutine read what its client sent before Shutdown:
// closing an idle connection now would drop requests already sent but
// not yet read; the read failing at t closes it instead.
func (g *GoConn) Drain(t time.Time) {
	if g.nc != nil {
		g.draining.Store(true)
		_ = g.nc.SetReadDeadline(t)
	}
}

func (g *GoConn) CloseNow() {
	if g.nc != nil {
		_ = g.nc.Close()
	}
}

// Serve serves the connection until the client goes.
func (g *GoConn) Serve() {
	c, nc := g.c, g.nc
	var err error
	defer func() {
		_ = nc.Close()
		c.Closed(err)
	}()
	for {
		var n int
		n, err = nc.Read(c.Room())
		if errors.Is(err, os.ErrDeadlineExceeded) && !g.draining.Load() {
			// A wake-up (Wake), not the drain's deadline.
			if err = g.woken(); err != nil {
				return
			}
		}
		if n > 0 {
			c.Filled(n)
			for s := c.Lift(); s != nil; s = c.Lift() {
				g.svc.DecideWait(s.Batch())
				c.Landed(s, false)
			}
			if err = g.write(); err != nil {
				return
			}
			c.Flushed()
		}
		if err != nil || c.Done() {
			return
		}
	}
}

// woken answers a wake-up. The deadline is cleared before the state is
// asked, so that a line fed after the ask wakes it again; a server
// shutting down closes the connection instead, as Redis closes a monitor,
// for the clear may have undone Shutdown's deadline.
func (g *GoConn) woken() error {
	_ = g.nc.SetReadDeadline(time.Time{})
	if g.draining.Load() {
		return net.ErrClosed
	}
	w := g.c.Woken()
	if w == Kill {
		return net.ErrClosed
	}
	if err := g.write(); err != nil || w == Evict {
		return errors.Join(err, net.ErrClosed)
	}
	return nil
}

// write writes every reply the connection owes.
func (g *GoConn) write() error {
	if out := g.c.Out(); len(out) > 0 {
		n, err := g.nc.Write(out)
		g.c.Sent(n)
		return err
	}
	return nil
}
