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

func rawDial(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawConn{nc: nc, fr: http2.NewFramer(nc, nc)}
	rc.henc = hpack.NewEncoder(&rc.hbuf)
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
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
	rc.fr.WriteData(id, true, body)
}

type rawAnswer struct {
	status, message string
	data            []byte
	rst             bool
}

// readUntilEnd reads frames until stream id ends, answering SETTINGS and
// PING, and returns what the stream got.
func (rc *rawConn) readUntilEnd(t *testing.T, id uint32) rawAnswer {
	t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var a rawAnswer
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
				return a
			}
		case *http2.DataFrame:
			if f.StreamID == id && len(f.Data()) >= 5 {
				a.data = append(a.data, f.Data()[5:]...)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				a.rst = true
				return a
			}
		}
	}
}
