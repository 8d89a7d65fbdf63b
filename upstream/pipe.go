package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"
)

// pipe is one connection to a standalone (or Sentinel's current master)
// Redis on which batches go without their senders waiting: a sender
// writes its command and goes on, and the pipe's reader goroutine reads
// the replies, in order, and hands each to its sender's callback.
//
// It is there for the decision path. go-redis takes a pooled connection,
// writes, and blocks its caller until the reply, so an event loop that
// hands a batch over and goes on needed a goroutine to lead each round
// trip: a goroutine start and a thread wake-up more on every round trip
// than a write from the loop itself and one reader.
//
// It dials when first needed, with the client's own dialer (TLS and
// Sentinel's master discovery included), and authenticates and selects the
// database as the client's options say. A reply that does not come by its
// deadline, a broken connection or a reply it cannot read fail every reply
// owed, and the connection is closed: the next send dials again.
type pipe struct {
	opt *redis.Options

	// wmu orders the writes on the connection as owed is ordered; taken
	// before mu. mu is never held across a write, so a reader can take
	// its replies while a writer waits for room in the socket.
	wmu sync.Mutex
	// out is the command being written, copied from its sender's buffer
	// under mu: once its reply is owed, a failure elsewhere can hand the
	// sender its error, and its buffer back to its pool, while the write
	// is still going. Guarded by wmu.
	out []byte

	mu      sync.Mutex
	conn    net.Conn // nil: not connected; guarded by mu
	dialing bool     // a goroutine is dialing; guarded by mu
	queued  []byte   // commands sent while dialing; guarded by mu
	owed    []owed   // the replies owed, oldest first; guarded by mu
	closed  bool     // guarded by mu
}

// owed is a reply a sender waits for.
type owed struct {
	deadline time.Time
	got      func(reply any, err error)
}

var errPipeClosed = errors.New("upstream: the store is closed")

// newPipe returns a pipe for client, or nil when the client is not one a
// pipe can stand in for: a Cluster client routes by slot, and a streaming
// credentials provider re-authenticates connections go-redis owns.
func newPipe(client redis.UniversalClient) *pipe {
	c, ok := client.(*redis.Client)
	if !ok {
		return nil
	}
	opt := c.Options()
	if opt.StreamingCredentialsProvider != nil || opt.Dialer == nil {
		return nil
	}
	return &pipe{opt: opt}
}

// timeout is how long a reply may take when its sender set no deadline:
// the client's read timeout (go-redis's default is 3s).
func (p *pipe) timeout() time.Duration {
	if p.opt.ReadTimeout > 0 {
		return p.opt.ReadTimeout
	}
	return 3 * time.Second
}

// send writes cmd, a whole RESP command, and has got called with its
// reply, or with an error if none comes by deadline. got runs once: on
// another goroutine, or before send returns when the pipe is closed or
// the write fails (which fails every reply owed). A reply that is a Redis
// error reaches got as a value of type replyError.
func (p *pipe) send(cmd []byte, deadline time.Time, got func(reply any, err error)) {
	p.wmu.Lock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wmu.Unlock()
		got(nil, errPipeClosed)
		return
	}
	p.owed = append(p.owed, owed{deadline, got})
	conn := p.conn
	if conn == nil {
		p.queued = append(p.queued, cmd...)
		if !p.dialing {
			p.dialing = true
			go p.dial(deadline)
		}
		p.mu.Unlock()
		p.wmu.Unlock()
		return
	}
	if len(p.owed) == 1 {
		// The reader waits with no deadline, or a past one, while nothing
		// is owed: this reply's deadline is the one to wait for now.
		_ = conn.SetReadDeadline(deadline)
	}
	p.out = append(p.out[:0], cmd...)
	p.mu.Unlock()
	err := p.write(conn, p.out, deadline)
	p.wmu.Unlock()
	if err != nil {
		p.fail(conn, err)
	}
}

// write writes cmd on conn, waiting for room until deadline. p.wmu is
// held.
func (p *pipe) write(conn net.Conn, cmd []byte, deadline time.Time) error {
	_ = conn.SetWriteDeadline(deadline)
	if _, err := conn.Write(cmd); err != nil {
		return fmt.Errorf("upstream: write to %s: %w", conn.RemoteAddr(), err)
	}
	return nil
}

// dial connects, writes what was sent meanwhile and starts the reader; on
// failure it fails every reply owed. A dial is bounded by the first
// sender's deadline: a sender waits no longer for a connection than for a
// reply.
func (p *pipe) dial(deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	conn, err := p.opt.Dialer(ctx, p.opt.Network, p.opt.Addr)
	if err == nil {
		if err = p.hello(ctx, conn); err != nil {
			conn.Close()
		}
	}
	cancel()
	if err != nil {
		// The dialer's error names the address it dialed; a Sentinel
		// client's own Addr names none.
		err = fmt.Errorf("upstream: connect: %w", err)
	}
	p.wmu.Lock()
	p.mu.Lock()
	p.dialing = false
	if err == nil && p.closed {
		conn.Close()
		err = errPipeClosed
	}
	if err != nil {
		owed := p.owed
		p.owed, p.queued = nil, p.queued[:0]
		p.mu.Unlock()
		p.wmu.Unlock()
		for _, o := range owed {
			o.got(nil, err)
		}
		return
	}
	p.conn = conn
	cmds := p.queued
	p.queued = nil
	write := time.Time{}
	if len(p.owed) > 0 {
		_ = conn.SetReadDeadline(p.owed[0].deadline)
		write = p.owed[len(p.owed)-1].deadline
	}
	p.mu.Unlock()
	go p.read(conn)
	err = p.write(conn, cmds, write)
	p.wmu.Unlock()
	if err != nil {
		p.fail(conn, err)
	}
}

// hello authenticates and selects the database, as go-redis would on a
// connection of its own.
func (p *pipe) hello(ctx context.Context, conn net.Conn) error {
	user, pass := p.opt.Username, p.opt.Password
	switch {
	case p.opt.CredentialsProviderContext != nil:
		var err error
		if user, pass, err = p.opt.CredentialsProviderContext(ctx); err != nil {
			return err
		}
	case p.opt.CredentialsProvider != nil:
		user, pass = p.opt.CredentialsProvider()
	}
	var cmds [][]string
	switch {
	case pass != "" && user != "":
		cmds = append(cmds, []string{"AUTH", user, pass})
	case pass != "":
		cmds = append(cmds, []string{"AUTH", pass})
	}
	if p.opt.DB != 0 {
		cmds = append(cmds, []string{"SELECT", strconv.Itoa(p.opt.DB)})
	}
	if len(cmds) == 0 {
		return nil
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
		defer conn.SetDeadline(time.Time{})
	}
	var buf []byte
	for _, c := range cmds {
		buf = appendCommand(buf, c[0], c[1:]...)
	}
	if _, err := conn.Write(buf); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	for _, c := range cmds {
		reply, err := readReply(r)
		if err != nil {
			return err
		}
		if rerr, ok := reply.(replyError); ok {
			return fmt.Errorf("%s: %w", c[0], rerr)
		}
	}
	if r.Buffered() > 0 {
		return errors.New("more replies than commands")
	}
	return nil
}

// read reads replies until the connection fails, handing each to the
// sender it is owed to.
func (p *pipe) read(conn net.Conn) {
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		reply, err := readReply(r)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && r.Buffered() == 0 && p.owesNothing(conn) {
				// The deadline of a reply that came in time: nothing is
				// owed, so nothing is late.
				continue
			}
			p.fail(conn, fmt.Errorf("upstream: read from %s: %w", conn.RemoteAddr(), err))
			return
		}
		p.mu.Lock()
		if p.conn != conn || len(p.owed) == 0 {
			p.mu.Unlock()
			p.fail(conn, fmt.Errorf("upstream: %s sent a reply nothing asked for", conn.RemoteAddr()))
			return
		}
		o := p.owed[0]
		p.owed = p.owed[:copy(p.owed, p.owed[1:])]
		if len(p.owed) > 0 {
			_ = conn.SetReadDeadline(p.owed[0].deadline)
		}
		p.mu.Unlock()
		o.got(reply, nil)
	}
}

// owesNothing tells whether conn is the pipe's connection and no reply is
// owed on it; it then waits with no deadline.
func (p *pipe) owesNothing(conn net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != conn || len(p.owed) > 0 {
		return false
	}
	_ = conn.SetReadDeadline(time.Time{})
	return true
}

// fail closes conn, if it is still the pipe's, and fails every reply owed
// on it with err.
func (p *pipe) fail(conn net.Conn, err error) {
	p.mu.Lock()
	if p.conn != conn {
		p.mu.Unlock()
		return
	}
	p.conn = nil
	owed := p.owed
	p.owed = nil
	p.mu.Unlock()
	conn.Close()
	for _, o := range owed {
		o.got(nil, err)
	}
}

// drop closes the connection, so that the next send dials again: Redis
// said it cannot serve there (a Sentinel master that became a replica).
// Replies still owed on it fail.
func (p *pipe) drop(cause error) {
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	if conn != nil {
		p.fail(conn, cause)
	}
}

// close closes the connection and fails what is owed; later sends fail.
func (p *pipe) close() {
	p.mu.Lock()
	p.closed = true
	conn := p.conn
	p.mu.Unlock()
	if conn != nil {
		p.fail(conn, errPipeClosed)
	}
}

// replyError is an error reply of Redis's. It is a redis.Error, so that
// go-redis's redis.HasErrorPrefix reads it as it reads its own.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// maxReplyDepth bounds the nesting of arrays in a reply; the batch
// script's reply is one flat array.
const maxReplyDepth = 8

// maxReplyLen bounds a bulk string's or an array's length in a reply, so
// that a corrupt length cannot ask for gigabytes.
const maxReplyLen = 512 << 20

// readReply reads one RESP2 reply: an int64, a string (simple or bulk), nil
// (a null), a []any, or a replyError.
func readReply(r *bufio.Reader) (any, error) {
	return readReplyAt(r, 0)
}

func readReplyAt(r *bufio.Reader, depth int) (any, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 {
		return nil, errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return string(body), nil
	case '-':
		return replyError(body), nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad integer reply %q", body)
		}
		return n, nil
	case '$':
		n, err := replyLen(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf, err := readBulk(r, n+2)
		if err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, errors.New("bulk string reply not ended by CRLF")
		}
		return string(buf[:n]), nil
	case '*':
		n, err := replyLen(body)
		if err != nil || n < 0 {
			return nil, err
		}
		if depth >= maxReplyDepth {
			return nil, errors.New("reply nested too deep")
		}
		a := make([]any, 0, min(n, 1024))
		for range n {
			v, err := readReplyAt(r, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", line[0])
}

// replyLen reads a bulk string's or an array's length: -1 is a null.
func replyLen(b []byte) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < -1 || n > maxReplyLen {
		return 0, fmt.Errorf("bad reply length %q", b)
	}
	return n, nil
}

// readBulk reads n bytes. A long one grows its buffer as the bytes come,
// so that a corrupt length is not an allocation of its size.
func readBulk(r *bufio.Reader, n int) ([]byte, error) {
	if n <= 64<<10 {
		buf := make([]byte, n)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	var b bytes.Buffer
	_, err := io.CopyN(&b, r, int64(n))
	return b.Bytes(), err
}

// readLine reads a line ended by CRLF, without it. The line is valid until
// the next read.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("reply line too long")
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errors.New("reply line not ended by CRLF")
	}
	return line[:len(line)-2], nil
}

// appendCommand appends a RESP command of bulk strings.
func appendCommand(buf []byte, name string, args ...string) []byte {
	buf = redcon.AppendArray(buf, 1+len(args))
	buf = redcon.AppendBulkString(buf, name)
	for _, a := range args {
		buf = redcon.AppendBulkString(buf, a)
	}
	return buf
}

// appendBulkInt appends n as a bulk string, without the allocation
// redcon.AppendBulkInt makes for its digits.
func appendBulkInt(buf []byte, n int64) []byte {
	var d [20]byte
	return redcon.AppendBulk(buf, strconv.AppendInt(d[:0], n, 10))
}
