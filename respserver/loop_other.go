//go:build !linux

package respserver

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// loop is the event loop, which only Linux has (loop_linux.go). Elsewhere
// no loop starts, and every connection has a goroutine of its own.
type loop struct{ load atomic.Int64 }

// loopConn is a connection a loop serves: none here.
type loopConn struct{}

func startLoops(*Server, int) ([]*loop, error) { return nil, nil }

func pollable(net.Conn) bool { return false }

func (*loop) adopt(net.Conn, *client) error { return errors.New("no event loops here") }
func (*loop) drainUntil(time.Time)          {}
func (*loop) stop()                         {}
func (*loop) land(...*segment)              {}
func (*loop) evictLater(*client)            {}
func (*loop) ask(*client)                   {}
