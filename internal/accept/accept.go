// Package accept keeps a listener accepting through the errors that pass:
// out of file descriptors (EMFILE, ENFILE), out of kernel buffers or
// memory (ENOBUFS, ENOMEM), a connection reset before it was taken.
//
// Every door's server returns from Serve on the first error Accept gives
// it that it does not know to be temporary, and the sidecar treats a door
// that stops serving as fatal: one burst of idle connections past the
// file limit would end the whole process, every other door with it. Only
// a closed listener is final here; any other error is retried after a
// pause that starts at 5 ms and doubles to 1 s (net/http's and grpc-go's
// pacing), so a process out of descriptors neither spins nor stops, and
// the other doors keep serving while this one waits. The log says so at
// most once a second, with how many accepts failed since it last spoke,
// so a long shortage is a line a second and not thousands.
package accept

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Pacing of the retries, as net/http's Server.Serve paces them.
const (
	firstDelay = 5 * time.Millisecond
	maxDelay   = time.Second
	logEvery   = time.Second
)

// Retrying wraps ln so that its Accept returns only a connection or, once
// ln is closed, net.ErrClosed. door names the listener in the log.
func Retrying(ln net.Listener, log *slog.Logger, door string) net.Listener {
	if log == nil {
		log = slog.Default()
	}
	return &listener{Listener: ln, log: log, door: door, closed: make(chan struct{}), sleep: sleepOrClose}
}

// listener is a net.Listener whose Accept waits out transient failures.
type listener struct {
	net.Listener
	log  *slog.Logger
	door string

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: ends a pause at once

	// sleep waits d or until closed is closed, whichever is first, and
	// says whether the listener was closed. A test replaces it to count
	// the pauses without waiting them.
	sleep func(d time.Duration, closed <-chan struct{}) bool

	// Only Accept's caller touches these; net/http and the doors call
	// Accept from one goroutine.
	failures int       // accepts failed since the last log line
	lastLog  time.Time // when the last failure was logged
}

// Accept waits for the next connection, retrying every failure but a
// closed listener's.
func (l *listener) Accept() (net.Conn, error) {
	delay := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if l.failures > 0 {
				l.log.Info("accepting connections again", "door", l.door, "failed_accepts", l.failures)
				l.failures = 0
			}
			return c, nil
		}
		if errors.Is(err, net.ErrClosed) || l.isClosed() {
			return nil, net.ErrClosed
		}
		if delay == 0 {
			delay = firstDelay
		} else {
			delay = min(2*delay, maxDelay)
		}
		l.failures++
		if now := time.Now(); now.Sub(l.lastLog) >= logEvery {
			l.log.Warn("accept failed; retrying, the other doors keep serving",
				"door", l.door, "err", err, "failed_accepts", l.failures, "retry_in", delay)
			l.lastLog = now
		}
		if l.sleep(delay, l.closed) {
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and ends a pause in Accept.
func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *listener) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

func sleepOrClose(d time.Duration, closed <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-closed:
		return true
	}
}
