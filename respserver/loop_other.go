//go:build !linux

package respserver

import (
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/evloop"
)

// loop is the server's share of an event loop, which only Linux has
// (loop_linux.go). Elsewhere none exists, and every connection has a
// goroutine of its own.
type loop struct{ load atomic.Int64 }

// loopConn is a connection a loop serves: none here.
type loopConn struct{}

func startLoops(_ *Server, els []*evloop.Loop) ([]*loop, error) {
	if len(els) > 0 {
		return nil, errors.New("respserver: event loops are Linux's")
	}
	return nil, nil
}

func pollable(net.Conn) bool { return false }

func (*loop) newConn(*client) transport     { return nil } // never called: pickLoop finds no loop
func (*loop) adopt(net.Conn, *client) error { return errors.New("no event loops here") }
func (*loop) drainUntil(time.Time)          {}
func (*loop) stop()                         {}
func (*loop) land(...*segment)              {}
