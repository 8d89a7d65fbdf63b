package grpcwire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-rl/sluice/internal/membudget"
)

// Flow control and frame sizes this side offers.
const (
	// initialWindow is each stream's receive window, told in SETTINGS: a
	// unary call of up to this size is never held up waiting for a
	// WINDOW_UPDATE.
	initialWindow = 1 << 20
	// connWindow is the connection's receive window, raised from HTTP/2's
	// 65,535 by a WINDOW_UPDATE at the start.
	connWindow = 16 << 20
	// maxHeaderList is the largest header list (hpack-decoded) a call may
	// send; told in SETTINGS.
	maxHeaderList = 64 << 10
	// defaultFrame is HTTP/2's maximum frame size until the peer says
	// otherwise, and the one this side reads.
	defaultFrame = 16384
	// headerTable is the hpack dynamic table size this side decodes with
	// (HTTP/2's default).
	headerTable = 4096
	// readBuffer is the reading goroutine's buffer: many small frames per
	// read system call.
	readBuffer = 32 << 10
	// connBase is what a connection costs before it holds any call, as
	// counted in the budget: its read buffer and its two hpack tables.
	connBase = readBuffer + 2*headerTable
)

// PING and control frames are policed as grpc-go's server polices them
// (its keepalive.EnforcementPolicy defaults and its control buffer's
// limit), so that a client that floods them is turned away as grpc-go
// would turn it away.
const (
	// pingMinTime is the least time between two PINGs while a call is
	// open, and pingIdleMinTime while none is (grpc-go: MinTime 5 min,
	// PermitWithoutStream false, which takes a PING without a call as
	// wrong unless 2 h have passed). A PING sooner is a strike, unless
	// this side has sent HEADERS or DATA since the last one.
	pingMinTime     = 5 * time.Minute
	pingIdleMinTime = 2 * time.Hour
	// maxPingStrikes is how many strikes are forgiven; one more ends the
	// connection with GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
	maxPingStrikes = 2
	// maxControl is how many answers to the client's control frames
	// (SETTINGS and PING acks, resets) may wait to be written before
	// the reading goroutine stops reading, grpc-go's
	// maxQueuedControlBufferItems.
	maxControl = 100
	// recentClosed is how many closed streams a connection remembers, to
	// tell a frame on a stream it closed from one on a stream never
	// opened (RFC 9113, 5.1 and 5.1.1).
	recentClosed = 256
)

// conn is one HTTP/2 connection: the reading goroutine (serve) and the
// writing one (flush), with what both share under mu.
type conn struct {
	s  *Server
	nc net.Conn
	fr *http2.Framer // reads from br on the reading goroutine; writes into out under mu
	br *bufio.Reader

	// The reading goroutine's own.
	hdec     *hpack.Decoder
	hblock   []byte     // a header block being gathered from HEADERS and CONTINUATION
	hstream  uint32     // its stream; 0: none
	hend     bool       // its HEADERS frame ended the stream
	fields   headerScan // what the decoder found in it
	maxID    uint32     // the highest stream id the client opened; written under mu
	ready    *Call      // a unary call whose message is whole, to hand to its handler once mu is released
	recvWin  int64      // what the client may still send on the connection
	recvDone int64      // received since the last connection WINDOW_UPDATE
	settings bool       // the client's first SETTINGS has come
	strikes  int        // PINGs sooner than the policy allows
	lastPing time.Time  // when the last PING came

	mu   sync.Mutex
	cond *sync.Cond // on mu: windows opened, a stream's data arrived or drained, the connection ended
	// Everything below is guarded by mu.
	out       outBuf // frames written, waiting for flush
	henc      *hpack.Encoder
	hbuf      bytes.Buffer // henc's output
	streams   map[uint32]*Call
	free      []*Call // streams to reuse
	live      int     // streams open or held by a handler: not yet recycled
	held      int     // bytes received and not yet read, over every stream
	sendWin   int64   // what this side may still send on the connection
	peerInit  int64   // the client's initial stream window
	peerFrame int     // the client's max frame size
	blocked   []*Call // streams with data waiting for window
	retry     []*Call // pumpLocked's other list
	goingAway bool    // GOAWAY sent: no new streams
	evicted   bool    // picked by the input budget to close: its requests' bytes are dropped
	dead      bool    // the connection is closed: writes are dropped
	flushing  bool    // a flush is asked for and not yet taken
	closing   bool    // close once out is flushed
	closeErr  error
	control   int  // answers to control frames in out, not yet taken by flush
	pingReset bool // HEADERS or DATA sent since the client's last PING: its next one is no strike
	// What the connection holds, counted in the budget (accountLocked):
	// the capacities of its calls' buffers, pooled ones too, and that of
	// the buffer its flush is writing.
	bodyCap, outCap, flying int
	hcap                    int                        // cap(hblock), which the reading goroutine owns
	holder                  *membudget.Holder          // nil without a budget
	closed                  [recentClosed]closedStream // the streams closed last, a ring
	closedAt                int                        // the ring's next slot
	idleSince               time.Time                  // when the last stream ended; zero while one is open
	idleTimer               *time.Timer                // with Server.idleTimeout

	wake chan struct{} // flush: there is something to write
	done chan struct{} // closed when the connection closes
}

// closedStream is a stream this connection closed, remembered for a
// while: reset (by either side: frames the client had in flight are still
// to come) or ended by both.
type closedStream struct {
	id    uint32
	reset bool
}

// outBuf is the framer's writer: frames accumulate until flushed.
type outBuf struct{ b []byte }

func (o *outBuf) Write(p []byte) (int, error) {
	o.b = append(o.b, p...)
	return len(p), nil
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, readBuffer), streams: map[uint32]*Call{},
		sendWin: 65535, peerInit: 65535, peerFrame: defaultFrame, recvWin: connWindow,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.fr = http2.NewFramer(&c.out, c.br)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(defaultFrame)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.hdec = hpack.NewDecoder(headerTable, c.fields.emit)
	c.hdec.SetMaxStringLength(maxHeaderList)
	return c
}

// connError is an HTTP/2 connection error: GOAWAY with code, then close.
type connError struct {
	code   http2.ErrCode
	reason string
}

func (e connError) Error() string { return fmt.Sprintf("%v: %s", e.code, e.reason) }

func protocolError(format string, args ...any) error {
	return connError{http2.ErrCodeProtocol, fmt.Sprintf(format, args...)}
}

// serve runs the connection until it ends: the preface, this side's
// SETTINGS, then frames until the client goes or something is wrong.
func (c *conn) serve() {
	go c.flush()
	c.mu.Lock()
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.maxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: initialWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderList},
	)
	c.fr.WriteWindowUpdate(0, connWindow-65535)
	if b := c.s.budget; b != nil {
		c.holder = b.Join(c.overBudget)
	}
	if c.s.idleTimeout > 0 {
		c.idleSince = time.Now()
		c.idleTimer = time.AfterFunc(c.s.idleTimeout, c.idleCheck)
	}
	c.notifyLocked()
	c.mu.Unlock()
	defer func() {
		if c.idleTimer != nil {
			c.idleTimer.Stop()
		}
		if c.holder != nil {
			c.holder.Leave()
		}
	}()

	err := c.readPreface()
	for err == nil {
		c.waitFlushed()
		err = c.readFrame()
		if st := c.ready; st != nil {
			// A unary call is whole: its handler runs here, without mu,
			// and only submits (Unary).
			c.ready = nil
			st.fast(st)
		}
	}
	var ce connError
	switch {
	case errors.As(err, &ce):
		c.s.log.Debug("grpcwire: connection error", "remote", c.nc.RemoteAddr().String(), "err", err)
		c.mu.Lock()
		c.fr.WriteGoAway(c.maxID, ce.code, []byte(ce.reason))
		c.closeAfterFlushLocked(err)
		c.mu.Unlock()
		// Give the flush a moment to send the GOAWAY; the client closes
		// once it reads it.
		select {
		case <-c.done:
		case <-time.After(time.Second):
			c.close(err)
		}
	default:
		c.close(err)
	}
	<-c.done
}

func (c *conn) readPreface() error {
	var p [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, p[:]); err != nil {
		return fmt.Errorf("reading the preface: %w", err)
	}
	if string(p[:]) != http2.ClientPreface {
		return protocolError("not an HTTP/2 client preface")
	}
	return c.nc.SetDeadline(time.Time{}) // serveConn's, for the setup
}

// readFrame reads and handles one frame; an error ends the connection.
func (c *conn) readFrame() error {
	f, err := c.fr.ReadFrame()
	if err != nil {
		var h2e http2.ConnectionError
		var se http2.StreamError
		switch {
		case errors.As(err, &h2e):
			reason := "malformed frame"
			if d := c.fr.ErrorDetail(); d != nil {
				reason = d.Error()
			}
			return connError{http2.ErrCode(h2e), reason}
		case errors.As(err, &se):
			c.resetStream(se.StreamID, se.Code)
			return nil
		case errors.Is(err, http2.ErrFrameTooLarge):
			return connError{http2.ErrCodeFrameSize, "frame too large"}
		}
		return err
	}
	if !c.settings {
		if _, ok := f.(*http2.SettingsFrame); !ok {
			return protocolError("the first frame must be SETTINGS")
		}
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.HeadersFrame:
		return c.onHeaders(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded(), f.StreamEnded())
	case *http2.ContinuationFrame:
		return c.onHeaders(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded(), false)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		return c.onPing(f)
	case *http2.RSTStreamFrame:
		if f.StreamID > c.maxID {
			return protocolError("RST_STREAM on idle stream %d", f.StreamID)
		}
		c.mu.Lock()
		if st := c.streams[f.StreamID]; st != nil {
			st.reset = true
			c.endLocked(st)
		}
		c.mu.Unlock()
	case *http2.GoAwayFrame:
		// The client opens nothing more; its streams finish as they are.
	case *http2.PushPromiseFrame:
		return protocolError("PUSH_PROMISE from a client")
	case *http2.PriorityFrame:
		// Answers are small and leave in the order they land.
	}
	return nil
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.settings = true
	c.mu.Lock()
	defer c.mu.Unlock()
	err := f.ForeachSetting(func(st http2.Setting) error {
		if err := st.Valid(); err != nil {
			return connError{http2.ErrCode(err.(http2.ConnectionError)), "invalid " + st.String()}
		}
		switch st.ID {
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(st.Val)
		case http2.SettingInitialWindowSize:
			delta := int64(st.Val) - c.peerInit
			c.peerInit = int64(st.Val)
			for _, s := range c.streams {
				s.sendWin += delta
				if s.sendWin > 1<<31-1 {
					return connError{http2.ErrCodeFlowControl, "a stream's window overflows"}
				}
			}
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(st.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.fr.WriteSettingsAck()
	c.control++
	c.pumpLocked()
	c.notifyLocked()
	return nil
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWin += int64(f.Increment)
		if c.sendWin > 1<<31-1 {
			return connError{http2.ErrCodeFlowControl, "the connection's window overflows"}
		}
	} else {
		if f.StreamID > c.maxID {
			return protocolError("WINDOW_UPDATE on idle stream %d", f.StreamID)
		}
		st := c.streams[f.StreamID]
		if st == nil {
			return nil // closed
		}
		st.sendWin += int64(f.Increment)
		if st.sendWin > 1<<31-1 {
			c.rstLocked(st, http2.ErrCodeFlowControl)
			return nil
		}
	}
	c.pumpLocked()
	c.cond.Broadcast()
	c.notifyLocked()
	return nil
}

// onHeaders gathers a header block; once it ends, it opens the stream
// (or takes the client's trailers on an open one).
func (c *conn) onHeaders(id uint32, frag []byte, ended, endStream bool) error {
	if c.hstream == 0 {
		c.hstream, c.hend, c.hblock = id, endStream, c.hblock[:0]
	}
	if len(c.hblock)+len(frag) > 2*maxHeaderList {
		return connError{http2.ErrCodeProtocol, "header list too large"}
	}
	c.hblock = append(c.hblock, frag...)
	if n := cap(c.hblock); n != c.hcap {
		c.mu.Lock()
		c.hcap = n
		c.mu.Unlock()
	}
	if !ended {
		return nil
	}
	id, endStream = c.hstream, c.hend
	c.hstream = 0
	c.fields.reset(c.s)
	if _, err := c.hdec.Write(c.hblock); err != nil {
		return connError{http2.ErrCodeCompression, "hpack: " + err.Error()}
	}
	if err := c.hdec.Close(); err != nil {
		return connError{http2.ErrCodeCompression, "hpack: " + err.Error()}
	}
	if id%2 == 0 {
		return protocolError("even stream id %d from a client", id)
	}
	if id <= c.maxID {
		return c.onTrailers(id, endStream)
	}
	return c.open(id, endStream)
}

// onTrailers takes a header block on a stream opened before: the client's
// trailers, which must end an open stream and hold no pseudo-field
// (RFC 9113, 8.1 and 8.3). A stream closed is told STREAM_CLOSED, on the
// stream when it was reset (the client may have sent before it knew),
// on the connection when both sides had ended it (5.1); an id never
// opened is below one that was, a connection error (5.1.1).
func (c *conn) onTrailers(id uint32, endStream bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[id]
	if st == nil {
		reset, ok := c.closedLocked(id)
		switch {
		case !ok:
			return protocolError("stream %d at or below the last one opened (%d)", id, c.maxID)
		case !reset:
			return connError{http2.ErrCodeStreamClosed, fmt.Sprintf("headers on closed stream %d", id)}
		case !endStream:
			c.writeRSTLocked(id, http2.ErrCodeProtocol)
		default:
			c.writeRSTLocked(id, http2.ErrCodeStreamClosed)
		}
		return nil
	}
	switch {
	case st.remoteDone:
		c.rstLocked(st, http2.ErrCodeStreamClosed)
	case !endStream || c.fields.pseudo != 0 || c.fields.bad != "":
		// Malformed: a stream error.
		c.rstLocked(st, http2.ErrCodeProtocol)
	default:
		c.remoteDoneLocked(st)
	}
	return nil
}

// onPing answers a PING, and ends the connection when PINGs come faster
// than grpc-go's server allows them (the constants above).
func (c *conn) onPing(f *http2.PingFrame) error {
	c.mu.Lock()
	c.fr.WritePing(true, f.Data)
	c.control++
	c.notifyLocked()
	reset, open := c.pingReset, len(c.streams) > 0
	c.pingReset = false
	c.mu.Unlock()
	now := time.Now()
	last := c.lastPing
	c.lastPing = now
	if reset {
		c.strikes = 0
		return nil
	}
	least := pingIdleMinTime
	if open {
		least = pingMinTime
	}
	if !last.IsZero() && now.Sub(last) < least {
		c.strikes++
	}
	if c.strikes > maxPingStrikes {
		return connError{http2.ErrCodeEnhanceYourCalm, "too_many_pings"}
	}
	return nil
}

// writeRSTLocked resets a stream that has no Call: one refused or closed.
func (c *conn) writeRSTLocked(id uint32, code http2.ErrCode) {
	c.fr.WriteRSTStream(id, code)
	c.control++
	c.notifyLocked()
}

// closedLocked reports whether stream id is among those closed lately,
// and whether it was reset.
func (c *conn) closedLocked(id uint32) (reset, ok bool) {
	for _, cs := range c.closed {
		if cs.id == id {
			return cs.reset, true
		}
	}
	return false, false
}

// rememberLocked notes that stream id has closed.
func (c *conn) rememberLocked(id uint32, reset bool) {
	c.closed[c.closedAt] = closedStream{id: id, reset: reset}
	c.closedAt = (c.closedAt + 1) % recentClosed
}

// onData takes a DATA frame: counted against the windows (padding too),
// given back, and the bytes handed to its stream.
func (c *conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	if id > c.maxID {
		return protocolError("DATA on idle stream %d", id)
	}
	if n > c.recvWin {
		return connError{http2.ErrCodeFlowControl, "DATA beyond the connection's window"}
	}
	c.recvWin -= n
	c.recvDone += n
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recvDone >= connWindow/4 {
		c.fr.WriteWindowUpdate(0, uint32(c.recvDone))
		c.recvWin += c.recvDone
		c.recvDone = 0
		c.notifyLocked()
	}
	st := c.streams[id]
	if st == nil {
		// Closed: this side answered, or reset it, while the client was
		// still sending; what was in flight is ignored (RFC 9113, 5.1).
		// On a stream both sides had ended, DATA is a connection error.
		if reset, ok := c.closedLocked(id); ok && !reset {
			return connError{http2.ErrCodeStreamClosed, fmt.Sprintf("DATA on closed stream %d", id)}
		}
		return nil
	}
	if st.remoteDone {
		c.rstLocked(st, http2.ErrCodeStreamClosed)
		return nil
	}
	if n > st.recvWin {
		c.rstLocked(st, http2.ErrCodeFlowControl)
		return nil
	}
	st.recvWin -= n
	if c.held+len(f.Data()) > c.s.maxHeld {
		// The connection window is given back as data arrives; what the
		// streams hold unread is bounded here instead, for the whole
		// connection.
		return connError{http2.ErrCodeEnhanceYourCalm, "too much unread data on the connection"}
	}
	if st.ended || c.evicted {
		// Answered already (a deadline, an error), or closing for the
		// budget: what is left of the request is not kept.
		return nil
	}
	ok := st.receive(f.Data())
	c.accountLocked()
	if !ok {
		return nil
	}
	// The window goes back as data is received, not as it is read: a
	// message larger than the window must arrive whole before anything
	// reads it. What a stream may hold unread is bounded by receive.
	st.recvDone += n
	if !f.StreamEnded() && st.recvDone >= initialWindow/4 {
		c.fr.WriteWindowUpdate(id, uint32(st.recvDone))
		st.recvWin += st.recvDone
		st.recvDone = 0
		c.notifyLocked()
	}
	c.cond.Broadcast()
	if f.StreamEnded() {
		c.remoteDoneLocked(st)
	}
	return nil
}

// resetStream answers a stream error found while reading.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		c.rstLocked(st, code)
		return
	}
	c.writeRSTLocked(id, code)
}

// maxUnflushed is how much the connection may have waiting to be
// written before its reading goroutine stops reading: what answers a
// client that does not read (PING and SETTINGS acks, resets, answers
// without data, none of which flow control bounds) then waits in its own
// socket, not in this process. Server.maxUnflushed, which tests lower.
const maxUnflushed = 4 << 20

// waitFlushed waits until what is waiting to be written is under
// maxUnflushed, and the answers to control frames under maxControl.
func (c *conn) waitFlushed() {
	c.mu.Lock()
	for (len(c.out.b) > c.s.maxUnflushed || c.control >= maxControl) && !c.dead {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

// accountLocked sets what the connection holds in the budget.
func (c *conn) accountLocked() {
	if c.holder != nil {
		c.holder.Set(int64(connBase + c.bodyCap + c.outCap + cap(c.out.b) + c.flying + c.hcap))
	}
}

// overBudget is the budget's eviction: the budget's lock is held, and
// perhaps this connection's, so the work is another goroutine's.
func (c *conn) overBudget(held int64) {
	go func() {
		if unsaid, ok := c.s.evictedLog.Allow(time.Now()); ok {
			c.s.log.Warn("closing a gRPC connection over the input budget", "remote", c.nc.RemoteAddr().String(),
				"held", held, "max_input_memory", c.s.budget.Limit(), "others_since_last_line", unsaid)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.dead {
			return
		}
		c.goingAway, c.evicted = true, true
		// The budget counts what this connection holds as returned from
		// now on: make it so, rather than in a second when it closes,
		// while the flood's next connections fill the budget again.
		// A request a handler holds is the handler's.
		for _, st := range c.streams {
			if !st.owned {
				c.held -= len(st.body)
				c.bodyCap -= cap(st.body)
				st.body = nil
			}
		}
		c.fr.WriteGoAway(c.maxID, http2.ErrCodeEnhanceYourCalm, []byte("over the input memory budget"))
		// A client that does not read has a second to take the GOAWAY;
		// then the write fails, and the connection closes with it.
		c.nc.SetWriteDeadline(time.Now().Add(c.s.evictGrace))
		c.closeAfterFlushLocked(errors.New("over the input memory budget"))
	}()
}

// idleCheck is the idle timer's: GOAWAY once no stream has been open for
// IdleTimeout, else a look again when it could be.
func (c *conn) idleCheck() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || c.goingAway {
		return
	}
	next := c.s.idleTimeout
	if c.idleSince.IsZero() {
		c.idleTimer.Reset(next)
		return
	}
	if left := next - time.Since(c.idleSince); left > 0 {
		c.idleTimer.Reset(left)
		return
	}
	c.s.log.Debug("grpcwire: closing an idle connection", "remote", c.nc.RemoteAddr().String(), "idle_timeout", c.s.idleTimeout)
	c.goAwayLocked()
}

// notifyLocked asks the writing goroutine to flush.
func (c *conn) notifyLocked() {
	c.accountLocked()
	if c.flushing || c.dead {
		return
	}
	c.flushing = true
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// flush writes what the connection has to write, all that has gathered
// since the last write in one: the writing goroutine.
func (c *conn) flush() {
	var spare []byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		b := c.out.b
		c.out.b = spare[:0]
		c.flushing = false
		c.control = 0
		c.flying = cap(b)
		c.accountLocked()
		c.mu.Unlock()
		if len(b) > 0 {
			if _, err := c.nc.Write(b); err != nil {
				c.close(err)
				return
			}
		}
		spare = b
		if cap(spare) > maxSpare {
			// A burst's buffer goes with it.
			spare = nil
		}
		c.mu.Lock()
		c.flying = cap(spare)
		c.accountLocked()
		c.cond.Broadcast() // waitFlushed
		if c.closing && len(c.out.b) == 0 {
			err := c.closeErr
			c.mu.Unlock()
			c.close(err)
			return
		}
		c.mu.Unlock()
	}
}

// closeAfterFlushLocked closes the connection once what is written has
// left.
func (c *conn) closeAfterFlushLocked(err error) {
	c.closing, c.closeErr = true, err
	c.flushing = false
	c.notifyLocked()
}

// close ends the connection now: its streams end, their waiters wake, and
// the handlers still holding a call find their answers dropped.
func (c *conn) close(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.s.log.Debug("grpcwire: connection closed", "remote", c.nc.RemoteAddr().String(), "err", err)
	}
	c.dead = true
	c.nc.Close()
	for _, st := range c.streams {
		c.endLocked(st)
	}
	c.cond.Broadcast()
	close(c.done)
}

// maxSpare is the largest buffer the writing goroutine keeps between
// flushes.
const maxSpare = 64 << 10

// goAway starts the drain: GOAWAY naming the last stream taken; new
// streams are refused, and the connection closes once its streams end.
func (c *conn) goAway() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.goAwayLocked()
}

func (c *conn) goAwayLocked() {
	if c.goingAway || c.dead {
		return
	}
	c.goingAway = true
	// maxID is written under mu (open), so a stream is either counted
	// here or refused there.
	c.fr.WriteGoAway(c.maxID, http2.ErrCodeNo, nil)
	c.notifyLocked()
	if len(c.streams) == 0 {
		c.closeAfterFlushLocked(nil)
	}
}
