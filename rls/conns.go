package rls

import (
	"net"
	"sync"

	"github.com/sluice-rl/sluice/internal/rlsopts"
)

// DefaultMaxConns is Config.MaxConns's default, the settings table's
// (rlsopts, the leaf it reads it from).
const DefaultMaxConns = rlsopts.DefaultMaxConns

// capListener closes the connections it accepts past max open at once:
// grpc-go's server has no cap of its own. A connection counts until it
// is closed.
func capListener(ln net.Listener, max int) net.Listener {
	return &cappedListener{Listener: ln, max: max}
}

type cappedListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open int // guarded by mu
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		full := l.open >= l.max
		if !full {
			l.open++
		}
		l.mu.Unlock()
		if full {
			nc.Close()
			continue
		}
		return &cappedConn{Conn: nc, l: l}, nil
	}
}

type cappedConn struct {
	net.Conn
	l    *cappedListener
	once sync.Once
}

func (c *cappedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
