package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
)

// replies reads a connection's RESP2 replies into a buffer and cuts them
// out whole. It reads either blocking, for a goroutine that waits on the
// connection (next), or without waiting, for an event loop that polls the
// connection's descriptor and reads what has come (fill, then take).
//
// Only one goroutine at a time uses a replies.
type replies struct {
	// use is held while a reply is read, so that a connection given up
	// and drained (pipe.abandon) by a goroutine is read by one goroutine
	// at a time.
	use sync.Mutex
	// draining is set on a connection given up (pipe.abandon), and
	// drained the replies still owed on it. Guarded by the pipe's mu.
	draining bool
	drained  []owed
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
	v, n, err := parseReply(r.buf[r.off:], 0)
	if err == errIncomplete {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	r.off += n
	return v, true, nil
}

// replyError is an error reply of Redis's. It is a redis.Error, so that
// go-redis's redis.HasErrorPrefix reads it as it reads its own.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// maxReplyDepth bounds the nesting of arrays in a reply; the batch
// script's reply is one flat array.
const maxReplyDepth = 8

// maxReplyLen bounds a bulk string's or an array's length in a reply, so
// that a corrupt length cannot ask for gigabytes.
const maxReplyLen = 512 << 20

// maxReplyLine bounds a reply's line (a simple string, an error, a
// length).
const maxReplyLine = 64 << 10

// errIncomplete: the bytes so far are the start of a reply.
var errIncomplete = errors.New("incomplete reply")

// parseReply parses one RESP2 reply at the start of b: an int64, a string
// (simple or bulk), nil (a null), a []any, or a replyError; n is its
// length in b. It returns errIncomplete when b is the start of one, and
// another error when b cannot start one.
func parseReply(b []byte, depth int) (v any, n int, err error) {
	end := bytes.IndexByte(b, '\n')
	if end < 0 {
		if len(b) > maxReplyLine {
			return nil, 0, errors.New("reply line too long")
		}
		return nil, 0, errIncomplete
	}
	if end < 1 || b[end-1] != '\r' {
		return nil, 0, errors.New("reply line not ended by CRLF")
	}
	if end == 1 {
		return nil, 0, errors.New("empty reply line")
	}
	body, n := b[1:end-1], end+1
	switch b[0] {
	case '+':
		return string(body), n, nil
	case '-':
		return replyError(body), n, nil
	case ':':
		i, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("bad integer reply %q", body)
		}
		return i, n, nil
	case '$':
		size, err := replyLen(body)
		if err != nil || size < 0 {
			return nil, n, err
		}
		if len(b) < n+size+2 {
			return nil, 0, errIncomplete
		}
		if b[n+size] != '\r' || b[n+size+1] != '\n' {
			return nil, 0, errors.New("bulk string reply not ended by CRLF")
		}
		return string(b[n : n+size]), n + size + 2, nil
	case '*':
		size, err := replyLen(body)
		if err != nil || size < 0 {
			return nil, n, err
		}
		if depth >= maxReplyDepth {
			return nil, 0, errors.New("reply nested too deep")
		}
		// Each element takes at least 3 bytes ("+\r\n"): an array that
		// cannot be whole yet is not allocated.
		if len(b)-n < 3*size {
			return nil, 0, errIncomplete
		}
		a := make([]any, size)
		for i := range a {
			v, m, err := parseReply(b[n:], depth+1)
			if err != nil {
				return nil, 0, err
			}
			a[i] = v
			n += m
		}
		return a, n, nil
	}
	return nil, 0, fmt.Errorf("unknown reply type %q", b[0])
}

// replyLen reads a bulk string's or an array's length: -1 is a null.
func replyLen(b []byte) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < -1 || n > maxReplyLen {
		return 0, fmt.Errorf("bad reply length %q", b)
	}
	return n, nil
}
