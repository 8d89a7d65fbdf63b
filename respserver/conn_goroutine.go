package respserver

import (
	"errors"
	"net"
	"os"
	"time"

	"github.com/tidwall/redcon"
)

// goConn is the transport of a connection served by a goroutine of its
// own: where no event loop is (--io-loops 0, other systems) or one cannot
// take it (no file descriptor). It reads, runs what the read completed,
// waits for its decisions and writes, so only this connection waits on
// Redis here, and a read's decisions are one batch.
//
// Another goroutine wakes it through nc, whose methods are safe from any
// goroutine: a read deadline in the past ends its Read (a monitor's lines,
// an eviction), and Close ends its Read or Write (a kill).
type goConn struct {
	nc net.Conn // nil for a client without a network (newClient)
	c  *client
}

// aLongTimeAgo, as a read deadline, wakes a goroutine blocked in Read.
var aLongTimeAgo = time.Unix(1, 0)

func (g *goConn) wake() {
	if g.nc == nil {
		return
	}
	if g.c.killed.Load() {
		_ = g.nc.Close()
		return
	}
	_ = g.nc.SetReadDeadline(aLongTimeAgo)
}

func (g *goConn) blocking() bool { return true }

// land is never called: blocking reports true, so the work an event loop
// runs off the connection runs in place here, and nothing lands.
func (g *goConn) land(*segment) {}

// drain lets the goroutine read what its client sent before Shutdown:
// closing an idle connection now would drop requests already sent but
// not yet read; the read failing at t closes it instead.
func (g *goConn) drain(t time.Time) {
	if g.nc != nil {
		_ = g.nc.SetReadDeadline(t)
	}
}

func (g *goConn) closeNow() {
	if g.nc != nil {
		_ = g.nc.Close()
	}
}

// serve serves the connection until the client goes.
func (g *goConn) serve() {
	c, nc, s := g.c, g.nc, g.c.s
	var err error
	defer func() {
		_ = nc.Close()
		s.closed(c, err)
	}()
	for {
		var n int
		n, err = nc.Read(c.room())
		if c.evict.Load() {
			_, _ = nc.Write(redcon.AppendError(c.out, errInputBudget))
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !s.isClosing() {
			// A wake (wake), not the drain's deadline.
			if err = g.woken(); err != nil {
				return
			}
		}
		if n > 0 {
			c.serveRead(n)
			if len(c.out) > 0 {
				if _, werr := nc.Write(c.out); werr != nil {
					err = werr
					return
				}
				c.resetOut()
			}
			c.compact()
		}
		if err != nil || c.quit {
			return
		}
	}
}

// woken writes a monitor's lines after wake ended a Read. The deadline is
// cleared before the lines are taken, so that a line fed after the take
// wakes it again; a server shutting down closes the connection instead,
// as Redis closes a monitor, for the clear may have undone Shutdown's
// deadline. A connection that stopped monitoring (RESET) since it was
// woken reads on.
func (g *goConn) woken() error {
	c := g.c
	_ = g.nc.SetReadDeadline(time.Time{})
	if c.s.isClosing() {
		return ErrServerClosed
	}
	if c.mon == nil {
		return nil
	}
	c.out = c.takeMonitorLines(c.out)
	if len(c.out) == 0 {
		return nil
	}
	_, err := g.nc.Write(c.out)
	c.resetOut()
	return err
}

// serveRead runs what a read of n bytes completed, and waits for it all.
func (c *client) serveRead(n int) {
	defer c.recoverPanic()
	c.take(n)
	c.settle()
}

// settle hands the queued decisions to the service and waits for them to
// land, running the commands that waited for them, until nothing is owed.
// Only a goroutine of a connection's own may wait so.
func (c *client) settle() {
	for {
		if g := c.lift(); g != nil {
			c.s.cfg.Service.DecideWait(g.batch)
			c.deliver(g)
			continue
		}
		if !c.held {
			c.count()
			return
		}
		c.proceed()
	}
}
