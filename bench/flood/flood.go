// Package flood is the hostile clients of issue 44's memory shapes, one
// function per shape and door, for the commands that measure a Sluice
// binary's memory under them (bench/grpcflood, bench/doorflood). Each
// function plays one client: it holds what the shape holds until its
// context ends, and when the server closes its connection it connects
// again at once, as a hostile client would, so that a shape keeps its
// pressure for the whole run. A client whose dial fails tries again after
// a few milliseconds (a door at its connection cap, or the descriptors
// of this process running out) rather than spinning.
//
// Every shape is sent to the address given, which the commands keep on
// 127.0.0.1; nothing here reads the server's memory.
package flood

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// redialPause is how long a client waits after a failed dial.
const redialPause = 10 * time.Millisecond

// dial connects to addr, with a small receive buffer (a client that reads
// nothing), until it succeeds or ctx ends. The connection is closed when
// ctx ends, so that a write or read blocked on it returns.
func dial(ctx context.Context, addr string) (net.Conn, bool) {
	var d net.Dialer
	for {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			if tc, ok := nc.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4 << 10)
			}
			stop := context.AfterFunc(ctx, func() { nc.Close() })
			return &conn{Conn: nc, stop: stop}, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(redialPause):
		}
	}
}

// conn is a connection whose Close also forgets the close at ctx's end.
type conn struct {
	net.Conn
	stop func() bool
}

func (c *conn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// writeAll writes b, retrying a write that the server has stopped reading
// (its deadline passed) until ctx ends; false when the connection failed.
func writeAll(ctx context.Context, nc net.Conn, b []byte) bool {
	for len(b) > 0 {
		if ctx.Err() != nil {
			return false
		}
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		n, err := nc.Write(b)
		b = b[n:]
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return false
		}
	}
	return true
}

// hold waits until the server closes nc or ctx ends, discarding what the
// server sends (an error reply, then the close).
func hold(nc net.Conn) {
	_ = nc.SetReadDeadline(time.Time{})
	buf := make([]byte, 512)
	for {
		if _, err := nc.Read(buf); err != nil {
			return
		}
	}
}

// dialH2 opens a raw HTTP/2 connection: the preface and SETTINGS sent.
func dialH2(ctx context.Context, addr string) (net.Conn, *http2.Framer, bool) {
	nc, ok := dial(ctx, addr)
	if !ok {
		return nil, nil, false
	}
	fr := http2.NewFramer(nc, nc)
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		nc.Close()
		return nil, nil, false
	}
	_ = fr.WriteSettings()
	return nc, fr, true
}

// GRPCPings writes PINGs on a connection to a gRPC door and never reads,
// until ctx ends (issue 44: 60 such clients held 395 MB before the door
// policed PINGs).
func GRPCPings(ctx context.Context, addr string) {
	var buf bytes.Buffer
	w := http2.NewFramer(&buf, nil)
	for range 1000 {
		_ = w.WritePing(false, [8]byte{1, 2, 3})
	}
	batch := buf.Bytes()
	for ctx.Err() == nil {
		nc, _, ok := dialH2(ctx, addr)
		if !ok {
			return
		}
		for writeAll(ctx, nc, batch) {
		}
		nc.Close()
	}
}

// GRPCStreams opens n streams of 4 MiB messages on a connection to a gRPC
// door (Envoy's ShouldRateLimit), sends all of each but its last KiB, and
// holds them until ctx ends (issue 44: 6 such clients of 16 streams held
// 466 MB before the door counted them in the input budget).
func GRPCStreams(ctx context.Context, addr string, n int) {
	var hbuf bytes.Buffer
	henc := hpack.NewEncoder(&hbuf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	const size = 4 << 20
	chunk := make([]byte, 16384)
	for ctx.Err() == nil {
		nc, fr, ok := dialH2(ctx, addr)
		if !ok {
			return
		}
		if deadline, ok := ctx.Deadline(); ok {
			_ = nc.SetWriteDeadline(deadline)
		}
		_ = fr.WriteWindowUpdate(0, 1<<30)
		sent := func() bool {
			for i := range n {
				id := uint32(2*i + 1)
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true})
				prefix := binary.BigEndian.AppendUint32([]byte{0}, size-5)
				if err := fr.WriteData(id, false, prefix); err != nil {
					return false
				}
				for sent := 5; sent < size-1024; sent += len(chunk) {
					if err := fr.WriteData(id, false, chunk); err != nil {
						return false
					}
				}
			}
			return true
		}()
		if sent {
			hold(nc)
		}
		nc.Close()
	}
}

// The RESP shapes' messages, made once and shared by all their clients
// (read only): a flood of hundreds must not hold hundreds of copies.
var (
	largeArg = sync.OnceValue(func() []byte {
		return append([]byte("*5\r\n$7\r\nRL.GCRA\r\n$16000000\r\n"), bytes.Repeat([]byte("a"), 2<<20)...)
	})
	largeEcho = sync.OnceValue(func() []byte {
		const n = 2 << 20
		cmd := append([]byte("*2\r\n$4\r\nECHO\r\n$"+strconv.Itoa(n)+"\r\n"), bytes.Repeat([]byte("a"), n)...)
		return append(cmd, "\r\n"...)
	})
)

// RESPLargeArg sends a RESP door the first 2 MiB of a command's 16 MB
// argument and holds it unfinished until ctx ends (issue 28: 200 such
// clients held 1.23 GB before the input budget).
func RESPLargeArg(ctx context.Context, addr string) {
	msg := largeArg()
	for ctx.Err() == nil {
		nc, ok := dial(ctx, addr)
		if !ok {
			return
		}
		if writeAll(ctx, nc, msg) {
			hold(nc)
		}
		nc.Close()
	}
}

// RESPUnread pipelines 2 MiB ECHOs to a RESP door without end and never
// reads their replies, until ctx ends: a slow client whose replies the
// server holds (issue 28: 100 such clients of 8 commands held 653 MB).
func RESPUnread(ctx context.Context, addr string) {
	cmd := largeEcho()
	for ctx.Err() == nil {
		nc, ok := dial(ctx, addr)
		if !ok {
			return
		}
		for writeAll(ctx, nc, cmd) {
		}
		nc.Close()
	}
}

// HTTPHeader sends an HTTP check a request line and one header line of
// size bytes it never ends, and holds the connection until the server
// closes it (a 431, or a 503 past the connection cap) or ctx ends (issue
// 44: 300 such clients of 1,000,000 bytes held 290 MB before the door
// capped headers and connections).
func HTTPHeader(ctx context.Context, addr string, size int) {
	head := []byte("GET /v1/check?policy=api&key=flood HTTP/1.1\r\nHost: sluice\r\nX-Flood: ")
	chunk := bytes.Repeat([]byte("a"), 16<<10)
	for ctx.Err() == nil {
		nc, ok := dial(ctx, addr)
		if !ok {
			return
		}
		sent := writeAll(ctx, nc, head)
		for left := size; sent && left > 0; left -= len(chunk) {
			sent = writeAll(ctx, nc, chunk[:min(left, len(chunk))])
		}
		if sent {
			hold(nc)
		}
		nc.Close()
	}
}
