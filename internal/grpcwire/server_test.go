package grpcwire

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the compressed-request test asks for gzip
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testca"
)

const echoPath = "/test.Echo/Echo"

// echo is a fast-path handler: it answers a BytesValue with itself,
// except one whose value starts with "hold", which waits in held until
// the test answers it.
type echo struct {
	held chan *Call
}

func (e *echo) serve(c *Call) {
	var v wrapperspb.BytesValue
	if err := protoUnmarshal(c.Message(), &v); err != nil {
		c.Fail(codes.InvalidArgument, err.Error())
		return
	}
	if bytes.HasPrefix(v.Value, []byte("hold")) {
		e.held <- c
		return
	}
	c.Reply(c.Message())
}

type fixture struct {
	srv  *Server
	addr string
	echo *echo
	hs   *health.Server
	done chan error
}

// start serves cfg on loopback, with tune applied to the server before
// it serves.
func start(t *testing.T, cfg Config, tune ...func(*Server)) *fixture {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(s)
	}
	f := &fixture{srv: s, echo: &echo{held: make(chan *Call, 1000)}, hs: health.NewServer(), done: make(chan error, 1)}
	s.HandleUnary(echoPath, f.echo.serve)
	healthpb.RegisterHealthServer(s, f.hs)
	reflection.Register(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	go func() { f.done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-f.done:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return f
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func call(ctx context.Context, cc *grpc.ClientConn, value []byte, opts ...grpc.CallOption) ([]byte, error) {
	var out wrapperspb.BytesValue
	err := cc.Invoke(ctx, echoPath, wrapperspb.Bytes(value), &out, opts...)
	return out.Value, err
}

// ctxT bounds a test's calls, so that a broken feature fails in seconds
// rather than hanging.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestUnary: the fast path answers, for messages of every size around
// HTTP/2's frame size and this side's stream window.
func TestUnary(t *testing.T) {
	f := start(t, Config{MaxRecvMsgSize: 8 << 20})
	cc := dial(t, f.addr)
	for _, n := range []int{0, 1, 100, 16<<10 - 10, 16 << 10, 20 << 10, 70 << 10, initialWindow + 1000, 3 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			in := bytes.Repeat([]byte{'x'}, n)
			copy(in, "v")
			out, err := call(ctxT(t), cc, in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, in) {
				t.Fatalf("echo of %d bytes came back as %d", len(in), len(out))
			}
		})
	}
}

// TestConcurrentStreams: many calls at once over one connection, each
// answered with its own message.
func TestConcurrentStreams(t *testing.T) {
	f := start(t, Config{})
	cc := dial(t, f.addr)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for g := range 200 {
		wg.Go(func() {
			for i := range 25 {
				want := fmt.Sprintf("g%d-%d", g, i)
				out, err := call(ctx, cc, []byte(want))
				if err == nil && string(out) != want {
					err = fmt.Errorf("asked %q, answered %q", want, out)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestStatuses: what grpc-go's server answers for calls it cannot serve,
// answered here the same.
func TestStatuses(t *testing.T) {
	f := start(t, Config{MaxRecvMsgSize: 1000})
	cc := dial(t, f.addr)
	for _, tc := range []struct {
		name string
		do   func(ctx context.Context) error
		code codes.Code
		msg  string
	}{
		{"unknown method", func(ctx context.Context) error {
			return cc.Invoke(ctx, "/test.Echo/Nope", wrapperspb.Bytes(nil), new(wrapperspb.BytesValue))
		}, codes.Unimplemented, "unknown method Nope for service test.Echo"},
		{"unknown service", func(ctx context.Context) error {
			return cc.Invoke(ctx, "/nope.Svc/M", wrapperspb.Bytes(nil), new(wrapperspb.BytesValue))
		}, codes.Unimplemented, "unknown method M for service nope.Svc"},
		{"compressed", func(ctx context.Context) error {
			_, err := call(ctx, cc, []byte("v"), grpc.UseCompressor("gzip"))
			return err
		}, codes.Unimplemented, `grpc: Decompressor is not installed for grpc-encoding "gzip"`},
		{"too large", func(ctx context.Context) error {
			_, err := call(ctx, cc, make([]byte, 2000))
			return err
		}, codes.ResourceExhausted, "grpc: received message larger than max (2003 vs. 1000)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(ctxT(t))
			if s := status.Convert(err); s.Code() != tc.code || s.Message() != tc.msg {
				t.Fatalf("got %v %q, want %v %q", s.Code(), s.Message(), tc.code, tc.msg)
			}
		})
	}
	// The connection serves on after each.
	if _, err := call(ctxT(t), cc, []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// TestDeadline: a call whose handler has not answered by its
// grpc-timeout is answered DEADLINE_EXCEEDED by the server (the trailers
// are read raw, so that the client's own timer is not what answers), and
// the handler's late answer is dropped.
func TestDeadline(t *testing.T) {
	f := start(t, Config{})
	rc := rawDial(t, f.addr)
	rc.request(1, echoPath, "50m", []byte("\x0a\x04hold"))
	held := <-f.echo.held
	start := time.Now()
	fr := rc.readUntilEnd(t, 1)
	if fr.status != "4" {
		t.Fatalf("grpc-status %q (%q), want 4 (DEADLINE_EXCEEDED)", fr.status, fr.message)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("the deadline answer took %v", waited)
	}
	held.Reply([]byte("late")) // dropped, without harm
	// Still serving, on the same connection.
	rc.request(3, echoPath, "", []byte("\x0a\x01v"))
	if fr := rc.readUntilEnd(t, 3); fr.status != "0" || string(fr.data) != "\x0a\x01v" {
		t.Fatalf("after the deadline: status %q data %q", fr.status, fr.data)
	}
}

// TestCancel: a call the client cancels is reset; its handler's answer
// is dropped, and the stream leaves the connection's count.
func TestCancel(t *testing.T) {
	f := start(t, Config{})
	cc := dial(t, f.addr)
	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error, 1)
	go func() {
		_, err := call(ctx, cc, []byte("hold"))
		errc <- err
	}()
	held := <-f.echo.held
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want Canceled", err)
	}
	c := held.c
	waitFor(t, "the stream to be reset", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.streams) == 0
	})
	held.Reply([]byte("late"))
	if _, err := call(ctxT(t), cc, []byte("v")); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestHealth: grpc-go's own health service, served through a
// registered ServiceDesc: Check (unary) and Watch (server stream).
func TestHealth(t *testing.T) {
	f := start(t, Config{})
	cc := dial(t, f.addr)
	hc := healthpb.NewHealthClient(cc)
	ctx := ctxT(t)
	f.hs.SetServingStatus("x", healthpb.HealthCheckResponse_SERVING)
	r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "x"})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check: %v %v", r, err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown service: %v, want NotFound", err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING} {
		r, err := w.Recv()
		if err != nil || r.Status != want {
			t.Fatalf("Watch: %v %v, want %v", r, err, want)
		}
		f.hs.SetServingStatus("x", healthpb.HealthCheckResponse_NOT_SERVING)
	}
}

// TestReflection: server reflection (a bidirectional stream) lists the
// registered services, as grpcurl asks.
func TestReflection(t *testing.T) {
	f := start(t, Config{})
	s := f.srv
	s.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Echo", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Echo"}}}, struct{}{})
	cc := dial(t, f.addr)
	stream, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // twice on one stream
		if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, sv := range r.GetListServicesResponse().GetService() {
			names = append(names, sv.Name)
		}
		if got, want := strings.Join(names, ","), "grpc.health.v1.Health,grpc.reflection.v1.ServerReflection,grpc.reflection.v1alpha.ServerReflection,test.Echo"; got != want {
			t.Fatalf("services %s, want %s", got, want)
		}
	}
	// A file descriptor, larger than a frame header block: the health
	// proto's.
	if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "grpc.health.v1.Health"}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || len(r.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file containing grpc.health.v1.Health: %v %v", r, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// TestTLS: TLS with ALPN h2, the certificate from a test CA.
func TestTLS(t *testing.T) {
	ca := testca.New(t)
	cert := ca.Issue(t, "server")
	f := start(t, Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}})
	cc := dial(t, f.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, ServerName: "localhost"})))
	if out, err := call(ctxT(t), cc, []byte("v")); err != nil || string(out) != "v" {
		t.Fatalf("over TLS: %q %v", out, err)
	}
	// A TLS client that does not offer h2 is turned away.
	conn, err := tls.Dial("tcp", f.addr, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err == nil {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Fatal("a client without h2 was served")
	}
}

// TestGracefulShutdown: Shutdown sends GOAWAY, answers the calls in
// flight, takes no new one, and returns once they are answered; a
// Shutdown whose context ends first closes what is left.
func TestGracefulShutdown(t *testing.T) {
	f := start(t, Config{})
	cc := dial(t, f.addr)
	ctx := ctxT(t)
	if _, err := call(ctx, cc, []byte("warm")); err != nil {
		t.Fatal(err)
	}
	const n = 5
	errc := make(chan error, n)
	for range n {
		go func() {
			out, err := call(ctx, cc, []byte("hold"))
			if err == nil && string(out) != "\x0a\x04hold" && string(out) != "hold" {
				err = fmt.Errorf("answered %q", out)
			}
			errc <- err
		}()
	}
	var held []*Call
	for range n {
		held = append(held, <-f.echo.held)
	}
	shut := make(chan error, 1)
	go func() { shut <- f.srv.Shutdown(ctx) }()
	// GOAWAY reaches the client: a new call does not go to this server.
	waitFor(t, "GOAWAY", func() bool {
		c := held[0].c
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.goingAway
	})
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with calls in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	for _, c := range held {
		c.Reply(c.Message())
	}
	for range n {
		if err := <-errc; err != nil {
			t.Errorf("a call in flight at Shutdown: %v", err)
		}
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-f.done; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	f.done <- ErrServerClosed // for the cleanup
}

// TestShutdownTimeout: a call never answered does not hold Shutdown past
// its context.
func TestShutdownTimeout(t *testing.T) {
	f := start(t, Config{})
	cc := dial(t, f.addr)
	errc := make(chan error, 1)
	go func() {
		_, err := call(ctxT(t), cc, []byte("hold"))
		errc <- err
	}()
	<-f.echo.held
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := f.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the context's error", err)
	}
	if err := <-errc; err == nil {
		t.Fatal("the call never answered succeeded")
	}
}

// TestStreamCap: MaxConcurrentStreams counts the calls whose handlers
// still hold them after the client reset them, so that resetting
// streams as fast as they open starts no more work than the cap.
func TestStreamCap(t *testing.T) {
	f := start(t, Config{MaxConcurrentStreams: 2})
	rc := rawDial(t, f.addr)
	rc.request(1, echoPath, "", []byte("\x0a\x04hold"))
	rc.request(3, echoPath, "", []byte("\x0a\x04hold"))
	held := []*Call{<-f.echo.held, <-f.echo.held}
	rc.fr.WriteRSTStream(1, 0x8) // CANCEL
	rc.fr.WriteRSTStream(3, 0x8)
	rc.request(5, echoPath, "", []byte("\x0a\x01v"))
	if a := rc.readUntilEnd(t, 5); !a.rst {
		t.Fatalf("a third call beside two held was answered %+v; want REFUSED_STREAM", a)
	}
	for _, c := range held {
		c.Reply(c.Message())
	}
	rc.request(7, echoPath, "", []byte("\x0a\x01v"))
	if a := rc.readUntilEnd(t, 7); a.status != "0" {
		t.Fatalf("once the handlers answered: %+v", a)
	}
}

// TestClientNotReading: a client that sends and never reads fills its
// own socket, not this process: the server stops reading once its
// unwritten answers to control frames pass maxControl (grpc-go's limit).
func TestClientNotReading(t *testing.T) {
	f := start(t, Config{}, func(s *Server) { s.maxUnflushed = 64 << 10 })
	rc := rawDial(t, f.addr)
	if tc, ok := rc.nc.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10)
	}
	// Empty SETTINGS, each answered with an ack that no flow control
	// bounds (PINGs so many would be refused as too many).
	ping := make([]byte, 0, 9*1000)
	for range 1000 {
		ping = append(ping, 0, 0, 0, 0x4, 0, 0, 0, 0, 0)
	}
	wrote := make(chan int, 1)
	go func() {
		rc.nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n := 0
		for {
			if _, err := rc.nc.Write(ping); err != nil {
				break
			}
			n += len(ping)
		}
		wrote <- n
	}()
	n := <-wrote
	var most int
	f.srv.mu.Lock()
	for c := range f.srv.conns {
		c.mu.Lock()
		most = max(most, len(c.out.b))
		c.mu.Unlock()
	}
	f.srv.mu.Unlock()
	// grpc-go's limit, 100 acks of 9 bytes, written out so that a larger
	// maxControl fails.
	if most > 100*9 {
		t.Fatalf("%d bytes of answers wait in the server after %d bytes of SETTINGS; want at most 100 acks", most, n)
	}
	if n > 64<<20 {
		t.Fatalf("the server read %d bytes of SETTINGS from a client that read none of their acks", n)
	}
}

// TestCurl: another HTTP/2 implementation (curl's, nghttp2, which Envoy
// has used too) gets the same answers. One call per curl: curl 7.88
// fails a second POST on a connection whose first answer had trailers,
// against grpc-go's server as against this one.
func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("this test needs curl with HTTP/2 (nghttp2) on PATH")
	}
	f := start(t, Config{})
	dir := t.TempDir()
	body := filepath.Join(dir, "req")
	if err := os.WriteFile(body, grpcMsg([]byte("\x0a\x02hi")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, header string
		want         []string
		body         []byte
	}{
		{echoPath, "x-a: b", []string{"< grpc-status: 0"}, grpcMsg([]byte("\x0a\x02hi"))},
		{"/test.Echo/Nope", "x-a: b", []string{"< grpc-status: 12", "< grpc-message: unknown method Nope for service test.Echo"}, nil},
		{echoPath, "grpc-encoding: gzip", []string{"< grpc-status: 12", `< grpc-message: grpc: Decompressor is not installed for grpc-encoding "gzip"`}, nil},
	} {
		out := filepath.Join(dir, "out")
		os.Remove(out)
		args := []string{"-sS", "-v", "--http2-prior-knowledge", "-H", "content-type: application/grpc", "-H", "te: trailers",
			"-H", tc.header, "-o", out, "http://" + f.addr + tc.path}
		if tc.body != nil {
			args = append(args, "--data-binary", "@"+body)
		} else {
			// A call answered before its message is read ends with
			// RST_STREAM(NO_ERROR) when the client is still sending
			// (RFC 9113, 8.1), as on grpc-go; curl 7.88 reports that as
			// an error when it lands before its upload ends. Refused
			// calls are sent without a message.
			args = append(args, "-X", "POST")
		}
		text, err := exec.Command(curl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %s: %v\n%s", tc.path, err, text)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(text), w) {
				t.Errorf("%s with %s: no %q in\n%s", tc.path, tc.header, w, text)
			}
		}
		if got, _ := os.ReadFile(out); !bytes.Equal(got, tc.body) {
			t.Errorf("%s with %s: body %q, want %q", tc.path, tc.header, got, tc.body)
		}
	}
}

// TestClientSettings: what the client's SETTINGS say is honoured when
// writing: its header table size (0: a decoder without a dynamic table
// reads every answer), its initial window (no more data than it allows
// before its WINDOW_UPDATE), and its max frame size.
func TestClientSettings(t *testing.T) {
	f := start(t, Config{})
	value := bytes.Repeat([]byte{'v'}, 40000)
	msg := append([]byte{0x0a, 0xc0, 0xb8, 0x02}, value...) // BytesValue{Value: 40000 bytes}
	t.Run("header table size 0", func(t *testing.T) {
		rc := rawDial(t, f.addr, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		for id := uint32(1); id < 7; id += 2 {
			rc.request(id, echoPath, "", []byte("\x0a\x01v"))
			if a := rc.readUntilEnd(t, id); a.status != "0" {
				t.Fatalf("call %d: %+v", id, a)
			}
		}
	})
	t.Run("initial window", func(t *testing.T) {
		const window = 1000
		rc := rawDial(t, f.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
		rc.request(1, echoPath, "", msg)
		allowed := window
		a := rc.readUntilEndWith(t, 1, func(a *rawAnswer) {
			if len(a.raw) > allowed {
				t.Fatalf("%d bytes of data sent where the client allowed %d", len(a.raw), allowed)
			}
			if len(a.raw) == allowed {
				rc.fr.WriteWindowUpdate(1, window)
				allowed += window
			}
		})
		if a.status != "0" || !bytes.Equal(a.data, msg) {
			t.Fatalf("status %q, %d bytes back", a.status, len(a.data))
		}
	})
	t.Run("max frame size", func(t *testing.T) {
		for _, size := range []uint32{16384, 32768} {
			rc := rawDial(t, f.addr, http2.Setting{ID: http2.SettingMaxFrameSize, Val: size})
			rc.fr.SetMaxReadFrameSize(size)
			rc.request(1, echoPath, "", msg)
			a := rc.readUntilEnd(t, 1)
			if a.status != "0" || !bytes.Equal(a.data, msg) || slices.Max(a.frames) != int(size) {
				t.Fatalf("max frame size %d: status %q, %d bytes back in frames of %v", size, a.status, len(a.data), a.frames)
			}
		}
	})
}

// TestSetupTimeout: a connection that never sends its preface (or never
// completes TLS) is closed after the setup timeout.
func TestSetupTimeout(t *testing.T) {
	ca := testca.New(t)
	cert := ca.Issue(t, "server")
	for _, cfg := range []Config{{}, {TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}}} {
		f := start(t, cfg, func(s *Server) { s.setupTimeout = 100 * time.Millisecond })
		nc, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		_, err = io.Copy(io.Discard, nc)
		nc.Close()
		if err != nil {
			t.Fatalf("TLS %v: the silent connection was not closed: %v", cfg.TLS != nil, err)
		}
		if waited := time.Since(start); waited > 3*time.Second {
			t.Fatalf("TLS %v: closed after %v", cfg.TLS != nil, waited)
		}
	}
}
