package grpcwire

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

func protoUnmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }

// rawConn is an HTTP/2 client written frame by frame, for what a gRPC
// client hides: the server's own deadline answer, and malformed input.
type rawConn struct {
	nc   net.Conn
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
	dec  *hpack.Decoder
}

// rawDial connects and sends the preface and SETTINGS with settings; a
// header table size among them is the size its decoder keeps.
func rawDial(t *testing.T, addr string, settings ...http2.Setting) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return rawOver(t, nc, settings...)
}

// rawOver is rawDial's on a connection already made.
func rawOver(t *testing.T, nc net.Conn, settings ...http2.Setting) *rawConn {
	t.Helper()
	t.Cleanup(func() { nc.Close() })
	rc := &rawConn{nc: nc, fr: http2.NewFramer(nc, nc)}
	rc.henc = hpack.NewEncoder(&rc.hbuf)
	table := uint32(4096)
	for _, st := range settings {
		if st.ID == http2.SettingHeaderTableSize {
			table = st.Val
		}
	}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(table, nil)
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return rc
}

// request opens stream id with a gRPC call of msg (gRPC's prefix added).
func (rc *rawConn) request(id uint32, path, timeout string, msg []byte) {
	rc.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		rc.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if timeout != "" {
		rc.henc.WriteField(hpack.HeaderField{Name: "grpc-timeout", Value: timeout})
	}
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndHeaders: true})
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	copy(body[5:], msg)
	for len(body) > defaultFrame {
		rc.fr.WriteData(id, false, body[:defaultFrame])
		body = body[defaultFrame:]
	}
	rc.fr.WriteData(id, true, body)
}

type rawAnswer struct {
	status, message string
	data            []byte // the messages, without their prefixes
	frames          []int  // each DATA frame's length
	rst             bool
	raw             []byte
	onData          func(*rawAnswer) // called after each DATA frame
}

// unframe strips gRPC's prefixes from b's messages.
func unframe(b []byte) []byte {
	var out []byte
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n > len(b)-5 {
			break
		}
		out = append(out, b[5:5+n]...)
		b = b[5+n:]
	}
	return out
}

// readUntilEnd reads frames until stream id ends, answering SETTINGS and
// PING, and returns what the stream got.
func (rc *rawConn) readUntilEnd(t *testing.T, id uint32) rawAnswer {
	return rc.readUntilEndWith(t, id, nil)
}

func (rc *rawConn) readUntilEndWith(t *testing.T, id uint32, onData func(*rawAnswer)) rawAnswer {
	t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	a := rawAnswer{onData: onData}
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading stream %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				rc.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				rc.fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v %s", f.ErrCode, f.DebugData())
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			for _, hf := range f.Fields {
				switch hf.Name {
				case "grpc-status":
					a.status = hf.Value
				case "grpc-message":
					a.message = hf.Value
				}
			}
			if f.StreamEnded() {
				a.data = unframe(a.raw)
				return a
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				a.raw = append(a.raw, f.Data()...)
				a.frames = append(a.frames, len(f.Data()))
				if a.onData != nil {
					a.onData(&a)
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				a.rst = true
				return a
			}
		}
	}
}
