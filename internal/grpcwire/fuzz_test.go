package grpcwire

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// frames builds a client's frames after the preface, for seeds.
type frames struct {
	buf  bytes.Buffer
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

func newFrames() *frames {
	f := &frames{}
	f.fr = http2.NewFramer(&f.buf, nil)
	f.henc = hpack.NewEncoder(&f.hbuf)
	return f
}

func (f *frames) block(path string, extra ...string) []byte {
	f.hbuf.Reset()
	fields := append([]string{":method", "POST", ":scheme", "http", ":path", path, ":authority", "x",
		"content-type", "application/grpc", "te", "trailers"}, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		f.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(f.hbuf.Bytes())
}

func grpcMsg(b []byte) []byte {
	out := make([]byte, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	copy(out[5:], b)
	return out
}

func fuzzSeeds() [][]byte {
	var seeds [][]byte
	add := func(build func(f *frames)) {
		f := newFrames()
		f.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		build(f)
		seeds = append(seeds, bytes.Clone(f.buf.Bytes()))
	}
	add(func(f *frames) { // a unary call, whole
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: f.block(echoPath), EndHeaders: true})
		f.fr.WriteData(1, true, grpcMsg([]byte("\x0a\x01v")))
	})
	add(func(f *frames) { // headers in CONTINUATION, padded data, a deadline
		b := f.block(echoPath, "grpc-timeout", "1S")
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:3]})
		f.fr.WriteContinuation(1, true, b[3:])
		f.fr.WriteDataPadded(1, true, grpcMsg([]byte("\x0a\x01v")), make([]byte, 7))
	})
	add(func(f *frames) { // a message in two frames, window updates, ping, reset
		m := grpcMsg([]byte("\x0a\x03abc"))
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: f.block(echoPath), EndHeaders: true})
		f.fr.WriteData(3, false, m[:4])
		f.fr.WriteWindowUpdate(0, 1000)
		f.fr.WritePing(false, [8]byte{1})
		f.fr.WriteData(3, true, m[4:])
		f.fr.WriteWindowUpdate(3, 10)
		f.fr.WriteRSTStream(3, http2.ErrCodeCancel)
	})
	add(func(f *frames) { // health Check and Watch on registered methods
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: f.block("/grpc.health.v1.Health/Check"), EndHeaders: true})
		f.fr.WriteData(1, true, grpcMsg(nil))
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: f.block("/grpc.health.v1.Health/Watch"), EndHeaders: true})
		f.fr.WriteData(3, true, grpcMsg(nil))
		f.fr.WriteRSTStream(3, http2.ErrCodeCancel)
	})
	add(func(f *frames) { // compressed, unknown method, client trailers
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: f.block(echoPath, "grpc-encoding", "gzip"), EndHeaders: true})
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: f.block("/x.Y/Z"), EndHeaders: true, EndStream: true})
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: f.block(echoPath), EndHeaders: true})
		f.fr.WriteData(5, false, grpcMsg([]byte("\x0a\x01v")))
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: f.block(echoPath), EndHeaders: true, EndStream: true})
	})
	add(func(f *frames) { // settings that shrink the peer's window and frame size, then a GOAWAY
		f.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0},
			http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: f.block(echoPath), EndHeaders: true})
		f.fr.WriteData(1, true, grpcMsg([]byte("\x0a\x01v")))
		f.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
		f.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	})
	return seeds
}

// FuzzConn feeds a connection raw bytes after the preface, with a
// handler on the fast path and health on a registered one: whatever the
// bytes, the server does not panic, and the connection ends once the
// client goes.
func FuzzConn(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	s, err := New(Config{MaxRecvMsgSize: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	e := &echo{held: make(chan *Call, 1)}
	s.HandleUnary(echoPath, func(c *Call) {
		if bytes.Contains(c.Message(), []byte("hold")) {
			go func() { time.Sleep(time.Millisecond); c.Reply(nil) }()
			return
		}
		e.serve(c)
	})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			s.serveConn(server)
			close(done)
		}()
		go io.Copy(io.Discard, client)
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		client.Write([]byte(http2.ClientPreface))
		client.Write(in)
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the connection did not end after the client closed")
		}
	})
}

// TestMalformed: input HTTP/2 calls a connection error is answered with
// GOAWAY and its code, and the connection closed; each row is a frame
// sequence after the preface and the client's SETTINGS.
func TestMalformed(t *testing.T) {
	f := start(t, Config{})
	for _, tc := range []struct {
		name  string
		build func(f *frames)
		code  http2.ErrCode
	}{
		{"DATA on an idle stream", func(f *frames) { f.fr.WriteData(5, true, []byte("x")) }, http2.ErrCodeProtocol},
		{"an even stream id", func(f *frames) {
			f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: f.block(echoPath), EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"a header block that is not HPACK", func(f *frames) {
			f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, http2.ErrCodeCompression},
		{"CONTINUATION of nothing", func(f *frames) { f.fr.WriteContinuation(1, true, f.block(echoPath)) }, http2.ErrCodeProtocol},
		{"another frame inside a header block", func(f *frames) {
			f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: f.block(echoPath)[:2]})
			f.fr.WritePing(false, [8]byte{})
		}, http2.ErrCodeProtocol},
		{"the connection's window overflowing", func(f *frames) { f.fr.WriteWindowUpdate(0, 1<<31-1) }, http2.ErrCodeFlowControl},
		{"an invalid setting", func(f *frames) {
			f.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 100})
		}, http2.ErrCodeProtocol},
		{"a window past 2^31-1 by SETTINGS", func(f *frames) {
			f.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, http2.ErrCodeFlowControl},
		{"PUSH_PROMISE from a client", func(f *frames) {
			f.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: f.block(echoPath), EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"a header block past the cap", func(f *frames) {
			f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: make([]byte, defaultFrame)})
			for range 2 * maxHeaderList / defaultFrame {
				f.fr.WriteContinuation(1, false, make([]byte, defaultFrame))
			}
		}, http2.ErrCodeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := newFrames()
			fr.fr.WriteSettings()
			tc.build(fr)
			nc, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			go func() {
				nc.Write([]byte(http2.ClientPreface))
				nc.Write(fr.buf.Bytes())
			}()
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			rd := http2.NewFramer(io.Discard, nc)
			for {
				got, err := rd.ReadFrame()
				if err != nil {
					t.Fatalf("no GOAWAY before %v", err)
				}
				if g, ok := got.(*http2.GoAwayFrame); ok {
					if g.ErrCode != tc.code {
						t.Fatalf("GOAWAY %v (%s), want %v", g.ErrCode, g.DebugData(), tc.code)
					}
					break
				}
			}
			if _, err := io.Copy(io.Discard, nc); err != nil {
				t.Fatalf("the connection was not closed after GOAWAY: %v", err)
			}
		})
	}
}
