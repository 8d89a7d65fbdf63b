package grpcwire

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Call is one stream: a unary call on the fast path (Unary), or a call
// of a registered ServiceDesc (serverStream). Pooled per connection.
// Everything is guarded by its connection's mu but what says otherwise.
type Call struct {
	c  *conn // fixed: a Call is reused on its connection only
	id uint32

	fast Unary   // the fast path's handler; nil for a registered method
	m    *method // a registered method; nil on the fast path
	msg  []byte  // the fast path's message, body[5:], the handler's until it answers

	flagged bool // the request carried Config.FlagHeader (Flagged)

	body       []byte // received, not yet consumed: gRPC-framed messages
	recvWin    int64  // what the client may still send on this stream
	recvDone   int64  // received since the last WINDOW_UPDATE
	sendWin    int64  // what this side may still send on it
	out        []byte // DATA waiting for window, from off
	off        int
	blocked    bool // in the connection's blocked list
	inMap      bool // in the connection's streams
	owned      bool // a handler holds it
	remoteDone bool // the client sent END_STREAM
	ended      bool // the status is decided (written or waiting behind out); nothing more is taken
	headers    bool // response headers written
	trailer    bool // trailers wait behind out
	plain      bool // an HTTP answer, not gRPC's: it ends with DATA's END_STREAM, not trailers
	reset      bool // closed by RST_STREAM, from either side
	code       codes.Code
	status     string // grpc-message

	deadline time.Time
	timer    *time.Timer // made once, reused

	// A registered method's.
	ctx       context.Context
	cancel    context.CancelFunc
	headerMD  metadata.MD
	trailerMD metadata.MD
}

// Message is the call's request message, without gRPC's prefix; it is
// the handler's until it answers.
func (st *Call) Message() []byte { return st.msg }

// Reply answers the call with msg (status OK). msg is copied; the caller
// keeps it. Nothing is written when the call has ended meanwhile (its
// deadline passed, the client reset it, the connection closed).
func (st *Call) Reply(msg []byte) {
	c := st.c
	c.mu.Lock()
	if !st.ended && !c.dead {
		c.writeMsgLocked(st, msg)
		c.finishLocked(st, codes.OK, "")
	}
	c.releaseLocked(st)
	c.mu.Unlock()
}

// Fail answers the call with a status other than OK.
func (st *Call) Fail(code codes.Code, msg string) {
	c := st.c
	c.mu.Lock()
	c.finishLocked(st, code, msg)
	c.releaseLocked(st)
	c.mu.Unlock()
}

// releaseLocked is the handler giving the call back.
func (c *conn) releaseLocked(st *Call) {
	st.owned = false
	if !st.inMap {
		c.recycleLocked(st)
	}
}

// keptBuffer is the largest buffer a pooled stream keeps.
const keptBuffer = 64 << 10

// recycleLocked keeps st for the next stream once nothing holds it.
func (c *conn) recycleLocked(st *Call) {
	c.live--
	c.held -= len(st.body)
	st.fast, st.m, st.msg = nil, nil, nil
	st.body, st.out, st.off = st.body[:0], st.out[:0], 0
	// A large call's buffers go with it, so that a few large calls do
	// not leave every pooled stream holding megabytes.
	if n := cap(st.body); n > keptBuffer {
		st.body = nil
		c.bodyCap -= n
		c.s.released(n)
	}
	if n := cap(st.out); n > keptBuffer {
		st.out = nil
		c.outCap -= n
		c.s.released(n)
	}
	c.accountLocked()
	st.deadline = time.Time{}
	st.ctx, st.cancel, st.headerMD, st.trailerMD = nil, nil, nil, nil
	if len(c.free) < 256 {
		c.free = append(c.free, st)
	}
}

// open starts stream id from the header block just decoded.
func (c *conn) open(id uint32, endStream bool) error {
	h := &c.fields
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maxID = id
	switch {
	case c.goingAway || c.dead:
		c.refuseLocked(id, http2.ErrCodeRefusedStream)
		return nil
	case h.requestBad() != "":
		// A malformed request is a stream error (RFC 9113, 8.1.1).
		c.refuseLocked(id, http2.ErrCodeProtocol)
		return nil
	case c.live >= int(c.s.maxStreams):
		// Counted are the streams open and those the client reset whose
		// handlers have not answered yet: resetting streams as fast as
		// they open (CVE-2023-44487) starts no more work than the cap.
		c.refuseLocked(id, http2.ErrCodeRefusedStream)
		return nil
	}
	st := c.newStreamLocked(id)
	if endStream {
		st.remoteDone = true
	}
	if h.method != "POST" || !grpcContentType(h.contentType) {
		// Not gRPC: HTTP's answer, as grpc-go gives it, with a line of
		// text as net/http would give: the stream is open until the
		// client's window has taken it.
		st.plain, st.trailer, st.ended = true, true, true
		st.headers = true
		c.hbuf.Reset()
		c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "415"})
		c.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "text/plain; charset=utf-8"})
		c.writeBlockLocked(id, false)
		st.out = append(st.out, notGRPC...)
		c.pumpStreamLocked(st)
		c.notifyLocked()
		return nil
	}
	if h.timeoutBad {
		c.finishLocked(st, codes.Internal, "transport: malformed grpc-timeout")
		return nil
	}
	if h.timeoutSet {
		if h.timeout <= 0 {
			// Over before it starts (grpc-timeout 0): answered, never
			// handed to its handler, as grpc-go answers it.
			c.finishLocked(st, codes.DeadlineExceeded, "context deadline exceeded")
			return nil
		}
		st.deadline = time.Now().Add(h.timeout)
		if st.timer == nil {
			st.timer = time.AfterFunc(h.timeout, st.expire)
		} else {
			st.timer.Reset(h.timeout)
		}
	}
	if h.encoding != "" && h.encoding != "identity" {
		c.finishLocked(st, codes.Unimplemented, fmt.Sprintf("grpc: Decompressor is not installed for grpc-encoding %q", h.encoding))
		return nil
	}
	if f := c.s.unary[h.path]; f != nil {
		st.fast = f
		if endStream {
			c.unaryReadyLocked(st)
		}
		return nil
	}
	m := c.s.methods[h.path]
	if m == nil {
		c.finishLocked(st, codes.Unimplemented, unknownMethod(h.path))
		return nil
	}
	st.m = m
	base := context.Background()
	if !st.deadline.IsZero() {
		st.ctx, st.cancel = context.WithDeadline(base, st.deadline)
	} else {
		st.ctx, st.cancel = context.WithCancel(base)
	}
	st.owned = true
	go c.runMethod(st)
	return nil
}

// notGRPC is the body of the answer to a request that is not gRPC.
const notGRPC = "this is a gRPC server: it takes POST with content-type application/grpc\n"

// refuseLocked resets stream id before it starts.
func (c *conn) refuseLocked(id uint32, code http2.ErrCode) {
	c.writeRSTLocked(id, code)
	c.rememberLocked(id, true)
}

// unknownMethod is grpc-go's text for a path it does not serve.
func unknownMethod(path string) string {
	if len(path) > 1 && path[0] == '/' {
		for i := len(path) - 1; i > 0; i-- {
			if path[i] == '/' {
				return fmt.Sprintf("unknown method %s for service %s", path[i+1:], path[1:i])
			}
		}
	}
	return fmt.Sprintf("malformed method name: %q", path)
}

func grpcContentType(ct string) bool {
	const base = "application/grpc"
	if len(ct) < len(base) || ct[:len(base)] != base {
		return false
	}
	return len(ct) == len(base) || ct[len(base)] == '+' || ct[len(base)] == ';'
}

func (c *conn) newStreamLocked(id uint32) *Call {
	var st *Call
	if n := len(c.free); n > 0 {
		st, c.free = c.free[n-1], c.free[:n-1]
	} else {
		st = &Call{c: c}
	}
	c.live++
	c.idleSince = time.Time{}
	st.id, st.inMap, st.owned = id, true, false
	st.remoteDone, st.ended, st.headers, st.trailer, st.blocked = false, false, false, false, false
	st.plain, st.reset = false, false
	st.flagged = c.fields.flagged
	st.recvWin, st.recvDone, st.sendWin = initialWindow, 0, c.peerInit
	c.streams[id] = st
	return st
}

// receive appends a DATA frame's bytes to st's body, refusing a message
// over the cap as soon as its prefix says so; false when st ended here.
func (st *Call) receive(data []byte) bool {
	c := st.c
	was := cap(st.body)
	if n, ok := announced(st.body, data); ok && n <= c.s.maxRecv && 5+n > cap(st.body) && 5+n >= len(st.body)+len(data) {
		// The message's array is made once, at the length its prefix
		// announces, and counted in the budget at that size from its
		// first frame: doubling up to it would leave each smaller array
		// behind as garbage, uncounted.
		grown := make([]byte, len(st.body), 5+n)
		copy(grown, st.body)
		st.body = grown
	}
	st.body = append(st.body, data...)
	c.bodyCap += cap(st.body) - was
	c.held += len(data)
	if len(st.body) >= 5 {
		if n := binary.BigEndian.Uint32(st.body[1:5]); int64(n) > int64(c.s.maxRecv) {
			c.finishLocked(st, codes.ResourceExhausted,
				fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", n, c.s.maxRecv))
			return false
		}
	}
	if len(st.body) > c.s.maxRecv+5 && st.fast != nil {
		c.finishLocked(st, codes.Internal, "grpc: a unary call sent more than one message")
		return false
	}
	if len(st.body) > 2*(c.s.maxRecv+5) {
		c.finishLocked(st, codes.ResourceExhausted, "grpc: too many messages waiting to be read")
		return false
	}
	return true
}

// announced is the length of the message that body starts, once its
// prefix has come, in body and data together.
func announced(body, data []byte) (int, bool) {
	if len(body)+len(data) < 5 {
		return 0, false
	}
	var p [5]byte
	copy(p[copy(p[:], body):], data)
	return int(binary.BigEndian.Uint32(p[1:])), true
}

// remoteDoneLocked takes the client's END_STREAM on st.
func (c *conn) remoteDoneLocked(st *Call) {
	st.remoteDone = true
	if st.ended {
		return // its status is on its way
	}
	if st.fast != nil {
		c.unaryReadyLocked(st)
	}
	c.cond.Broadcast()
}

// unaryReadyLocked checks a fast call's one message and hands it to the
// handler once mu is released (readFrame).
func (c *conn) unaryReadyLocked(st *Call) {
	b := st.body
	switch {
	case len(b) < 5:
		c.finishLocked(st, codes.Internal, "grpc: server received no request message")
		return
	case b[0] == 1:
		c.finishLocked(st, codes.Internal, "grpc: compressed flag set with identity or empty encoding")
		return
	case b[0] != 0:
		c.finishLocked(st, codes.Internal, fmt.Sprintf("grpc: invalid compressed-flag %d", b[0]))
		return
	case int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5:
		c.finishLocked(st, codes.Internal, "grpc: a unary call's body is not one whole message")
		return
	case !st.deadline.IsZero() && !time.Now().Before(st.deadline):
		// Over before its handler could start: never decided. Its
		// timer's answer may not have run yet.
		c.finishLocked(st, codes.DeadlineExceeded, "context deadline exceeded")
		return
	}
	st.msg = b[5:]
	st.owned = true
	c.ready = st
}

// expire ends a call whose deadline has passed: its timer's function.
func (st *Call) expire() {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	// A timer that fired as its stream was reused sees a later deadline,
	// or none, and does nothing.
	if !st.inMap || st.ended || st.deadline.IsZero() || time.Now().Before(st.deadline) {
		return
	}
	c.finishLocked(st, codes.DeadlineExceeded, "context deadline exceeded")
}

// writeMsgLocked queues msg as one gRPC message on st, after the
// response headers, and sends what the windows allow.
func (c *conn) writeMsgLocked(st *Call, msg []byte) {
	c.writeHeadersLocked(st)
	var p [5]byte
	binary.BigEndian.PutUint32(p[1:], uint32(len(msg)))
	was := cap(st.out)
	st.out = append(append(st.out, p[:]...), msg...)
	c.outCap += cap(st.out) - was
	c.pumpStreamLocked(st)
	c.notifyLocked()
}

// writeHeadersLocked writes the response headers once.
func (c *conn) writeHeadersLocked(st *Call) {
	if st.headers {
		return
	}
	st.headers = true
	c.hbuf.Reset()
	c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	c.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	c.writeMDLocked(st.headerMD)
	c.writeBlockLocked(st.id, false)
	c.pingReset = true
}

// finishLocked decides st's status: the trailers go once what st has
// queued has left (at once, as Trailers-Only, when nothing was sent).
// It does nothing to a call already ended.
func (c *conn) finishLocked(st *Call, code codes.Code, msg string) {
	if st.ended {
		return
	}
	st.ended, st.trailer, st.code, st.status = true, true, code, msg
	if st.timer != nil {
		st.timer.Stop()
	}
	if st.cancel != nil {
		st.cancel()
	}
	c.pumpStreamLocked(st)
	c.cond.Broadcast()
	c.notifyLocked()
}

// pumpStreamLocked sends what st has queued as far as the windows let it,
// then its trailers when they are due.
func (c *conn) pumpStreamLocked(st *Call) {
	if c.dead || !st.inMap {
		return
	}
	for st.off < len(st.out) {
		n := min(int64(len(st.out)-st.off), c.sendWin, st.sendWin, int64(c.peerFrame))
		if n <= 0 {
			if !st.blocked {
				st.blocked = true
				c.blocked = append(c.blocked, st)
			}
			return
		}
		c.fr.WriteData(st.id, false, st.out[st.off:st.off+int(n)])
		st.off += int(n)
		c.sendWin -= n
		st.sendWin -= n
		c.pingReset = true
	}
	st.out, st.off = st.out[:0], 0
	c.cond.Broadcast()
	if st.trailer {
		st.trailer = false
		if st.plain {
			c.fr.WriteData(st.id, true, nil)
		} else {
			c.writeTrailersLocked(st)
		}
		if !st.remoteDone {
			// The client may still be sending: it needs telling to stop
			// (RFC 9113, 8.1).
			c.fr.WriteRSTStream(st.id, http2.ErrCodeNo)
			st.reset = true
		}
		c.removeLocked(st)
	}
}

// pumpLocked retries the streams waiting for window.
func (c *conn) pumpLocked() {
	// The streams still blocked go into the other list.
	bs := c.blocked
	c.blocked = c.retry[:0]
	for _, st := range bs {
		st.blocked = false
	}
	for i, st := range bs {
		if st.inMap {
			c.pumpStreamLocked(st)
		}
		bs[i] = nil
	}
	c.retry = bs[:0]
}

var statusText = func() (s [17]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// writeTrailersLocked ends st with its status: trailers after headers, or
// Trailers-Only (the status in the one HEADERS frame) when none went.
func (c *conn) writeTrailersLocked(st *Call) {
	c.hbuf.Reset()
	if !st.headers {
		st.headers = true
		c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		c.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
		c.writeMDLocked(st.headerMD)
	}
	code := strconv.Itoa(int(st.code))
	if int(st.code) < len(statusText) {
		code = statusText[st.code]
	}
	c.pingReset = true
	c.henc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: code})
	if st.status != "" {
		c.henc.WriteField(hpack.HeaderField{Name: "grpc-message", Value: encodeGRPCMessage(st.status)})
	}
	c.writeMDLocked(st.trailerMD)
	c.writeBlockLocked(st.id, true)
}

// writeMDLocked encodes metadata, binary values in base64 as gRPC says.
func (c *conn) writeMDLocked(md metadata.MD) {
	for k, vs := range md {
		if k == "" || k[0] == ':' || isReservedHeader(k) {
			continue
		}
		for _, v := range vs {
			if len(k) > 4 && k[len(k)-4:] == "-bin" {
				v = encodeBinHeader(v)
			}
			c.henc.WriteField(hpack.HeaderField{Name: k, Value: v})
		}
	}
}

// writeBlockLocked writes hbuf's header block on stream id: HEADERS, and
// CONTINUATION frames for what the peer's frame size leaves over.
func (c *conn) writeBlockLocked(id uint32, endStream bool) {
	b := c.hbuf.Bytes()
	first := b[:min(len(b), c.peerFrame)]
	b = b[len(first):]
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(b) == 0})
	for len(b) > 0 {
		frag := b[:min(len(b), c.peerFrame)]
		b = b[len(frag):]
		c.fr.WriteContinuation(id, len(b) == 0, frag)
	}
}

// rstLocked resets st with code and ends it.
func (c *conn) rstLocked(st *Call, code http2.ErrCode) {
	c.fr.WriteRSTStream(st.id, code)
	c.control++
	c.notifyLocked()
	st.reset = true
	c.endLocked(st)
}

// endLocked ends st at once, dropping what it had queued: the client
// reset it, or the connection is gone.
func (c *conn) endLocked(st *Call) {
	st.ended, st.trailer = true, false
	st.out, st.off = st.out[:0], 0
	if st.timer != nil {
		st.timer.Stop()
	}
	if st.cancel != nil {
		st.cancel()
	}
	c.removeLocked(st)
	c.cond.Broadcast()
}

// removeLocked takes st out of the connection's streams; once no handler
// holds it, it is kept for reuse. A draining connection closes with its
// last stream.
func (c *conn) removeLocked(st *Call) {
	if !st.inMap {
		return
	}
	delete(c.streams, st.id)
	st.inMap = false
	c.rememberLocked(st.id, st.reset || !st.remoteDone)
	if c.idleTimer != nil && len(c.streams) == 0 {
		c.idleSince = time.Now()
	}
	if !st.owned {
		c.recycleLocked(st)
	}
	if c.goingAway && len(c.streams) == 0 && !c.dead {
		c.closeAfterFlushLocked(nil)
	}
}
