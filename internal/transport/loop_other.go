//go:build !linux

package transport

import (
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/service"
)

// Loop is a server's share of an event loop, which only Linux has
// (loop_linux.go). Elsewhere none exists, and every connection has a
// goroutine of its own.
type Loop struct{}

// Start refuses event loops: there are none here.
func Start(_ *service.Service, _ *slog.Logger, els []*evloop.Loop) ([]*Loop, error) {
	if len(els) > 0 {
		return nil, errors.New("transport: event loops are Linux's")
	}
	return nil, nil
}

func Pick([]*Loop, net.Conn) *Loop   { return nil }
func (*Loop) Unpick()                {}
func (*Loop) Cuts() int64            { return 0 }
func (*Loop) NewConn(Conn) Transport { return nil } // never called: Pick finds no loop
func (*Loop) Adopt(net.Conn, Transport, func(int)) error {
	return errors.New("transport: no event loops here")
}
func (*Loop) DrainUntil(time.Time) {}
func (*Loop) Stop()                {}
