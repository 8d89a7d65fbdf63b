package redispipe

import (
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/sluice-rl/sluice/internal/resp"
)

// replies reads a connection's RESP2 replies into a buffer and cuts them
// out whole. It reads either blocking, for a goroutine that waits on the
// connection (next), or without waiting, for an event loop that polls the
// connection's descriptor and reads what has come (fill, then take).
//
// Only one goroutine at a time uses a replies.
type replies struct {
	// use is locked while a reply is read, so that a connection given up
	// and drained (Pipe.abandon) by a goroutine is read by one goroutine
	// at a time.
	use sync.Mutex
	// draining is set on a connection given up (Pipe.abandon), and
	// drained the replies still awaited on it. Guarded by the pipe's mu.
	draining bool
	drained  []awaited
	conn     net.Conn
	raw      syscall.RawConn // the descriptor's access; nil when conn has none (TLS)
	buf      []byte          // read and not yet taken: buf[off:]
	off      int
}

// readChunk is the room a read is given.
const readChunk = 64 << 10

func newReplies(conn net.Conn) *replies {
	r := &replies{conn: conn}
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			r.raw = raw
		}
	}
	return r
}

// fd is the connection's descriptor, for an event loop to watch.
func (r *replies) fd() (fd int, ok bool) {
	if r.raw == nil {
		return -1, false
	}
	if err := r.raw.Control(func(s uintptr) { fd = int(s) }); err != nil {
		return -1, false
	}
	return fd, true
}

// next waits for the next whole reply.
func (r *replies) next() (any, error) {
	for {
		if v, ok, err := r.take(); ok || err != nil {
			return v, err
		}
		n, err := r.conn.Read(r.room())
		r.buf = r.buf[:len(r.buf)+n]
		if err != nil && n == 0 {
			return nil, err
		}
	}
}

// fill reads what has come without waiting: a loop calls it when the
// descriptor is readable. It reports io.EOF at the end of the stream.
func (r *replies) fill() error {
	var n int
	var rerr error
	err := r.raw.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), r.room())
		return rerr != syscall.EINTR
	})
	switch {
	case err != nil:
		return err
	case rerr == syscall.EAGAIN:
		return nil
	case rerr != nil:
		return rerr
	case n == 0:
		return io.EOF
	}
	r.buf = r.buf[:len(r.buf)+n]
	return nil
}

// room makes room for a read past what is buffered and returns it.
func (r *replies) room() []byte {
	if r.off == len(r.buf) {
		r.buf, r.off = r.buf[:0], 0
	} else if r.off > cap(r.buf)/2 {
		r.buf = r.buf[:copy(r.buf, r.buf[r.off:])]
		r.off = 0
	}
	if cap(r.buf)-len(r.buf) < readChunk/4 {
		grown := make([]byte, len(r.buf), max(2*cap(r.buf), readChunk))
		copy(grown, r.buf)
		r.buf = grown
	}
	return r.buf[len(r.buf):cap(r.buf)]
}

// take cuts out the next reply if it is all buffered (ok), or reports the
// buffer's start as no reply at all (err).
func (r *replies) take() (v any, ok bool, err error) {
	v, n, err := resp.ParseReply(r.buf[r.off:])
	if err == resp.ErrIncomplete {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	r.off += n
	return v, true, nil
}
