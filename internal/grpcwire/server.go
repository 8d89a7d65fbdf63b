package grpcwire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/internal/accept"
	"github.com/sluice-rl/sluice/internal/lograte"
	"github.com/sluice-rl/sluice/internal/membudget"
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// TLS, when set, serves TLS with it, offering ALPN "h2" (gRPC clients
	// require it); its NextProtos are replaced.
	TLS *tls.Config
	// MaxRecvMsgSize is the largest message a call may send; a larger one
	// is refused RESOURCE_EXHAUSTED. Zero: 4 MiB, grpc-go's default.
	MaxRecvMsgSize int
	// MaxConcurrentStreams is the most calls one connection may have
	// open; the client is told in SETTINGS, and a stream over it refused.
	// Zero: 1000.
	MaxConcurrentStreams uint32
	// MaxConns bounds the connections served at once, those still in
	// their TLS handshake or preface among them; one more is sent GOAWAY
	// (ENHANCE_YOUR_CALM) and closed. Zero: 10,000.
	MaxConns int
	// IdleTimeout, when positive, ends a connection that has had no call
	// open for that long with GOAWAY, as grpc-go's MaxConnectionIdle; the
	// client reconnects for its next call. Zero: never, grpc-go's default.
	IdleTimeout time.Duration
	// Budget, when set, counts what each connection holds in the
	// process's input budget: its read buffer, the requests it has read
	// and not yet handed over, the answers it has not yet written. Past
	// the budget, the largest holders (of any door) are closed, a gRPC
	// connection with GOAWAY ENHANCE_YOUR_CALM. Nil: none; each
	// connection is still bounded on its own (maxHeld, maxUnflushed).
	Budget *membudget.Budget
	// Logger logs connections that end in error. Nil: slog.Default().
	Logger *slog.Logger
	// FlagHeader, when set, names one request header (lower case) whose
	// presence a unary call reports (Call.Flagged). Empty: none.
	FlagHeader string
}

// Unary serves a unary call on the connection's reading goroutine. The
// message (without gRPC's prefix) is c.Message(); the handler must not
// block, and must end the call exactly once, now or later and on any
// goroutine, with c.Reply or c.Fail. Until then c is the handler's; after
// it, c must not be touched.
type Unary func(c *Call)

// DefaultMaxConns is Config.MaxConns's default: --max-clients's, the RESP
// door's.
const DefaultMaxConns = 10_000

// setupTimeout is how long a new connection has for its TLS handshake
// and HTTP/2 preface; grpc-go's ConnectionTimeout is 120 s.
const setupTimeout = 20 * time.Second

// ErrServerClosed is what Serve returns after Shutdown or Close.
var ErrServerClosed = errors.New("grpcwire: server closed")

// Server serves gRPC over HTTP/2.
type Server struct {
	tlsCfg       *tls.Config
	maxRecv      int
	maxStreams   uint32
	maxHeld      int           // the most bytes a connection's streams may hold unread
	maxUnflushed int           // the most bytes a connection may have waiting to be written (conn.waitFlushed)
	setupTimeout time.Duration // for a connection's TLS handshake and preface
	evictGrace   time.Duration // how long a connection the budget closes has to take its GOAWAY
	maxConns     int
	idleTimeout  time.Duration     // 0: none
	budget       *membudget.Budget // nil: none
	evictedLog   *lograte.Limiter  // the budget's closing of a connection, said once a second
	log          *slog.Logger
	flagHeader   string // Config.FlagHeader

	// Set before Serve, read-only after.
	unary   map[string]Unary   // by full path, "/pkg.Service/Method"
	methods map[string]*method // by full path
	info    map[string]grpc.ServiceInfo

	mu       sync.Mutex
	lns      map[net.Listener]struct{} // guarded by mu
	conns    map[*conn]struct{}        // guarded by mu
	open     int                       // guarded by mu: connections in serveConn, set up or not
	draining bool                      // guarded by mu: Shutdown or Close was called
	idle     chan struct{}             // guarded by mu: closed when draining and conns is empty
}

// method is one method of a registered grpc.ServiceDesc.
type method struct {
	impl   any
	unary  *grpc.MethodDesc
	stream *grpc.StreamDesc
	name   string // full path, for grpc.ServerStream's method name
}

// New builds a server; register services, then Serve.
func New(cfg Config) (*Server, error) {
	if cfg.MaxRecvMsgSize < 0 {
		return nil, errors.New("grpcwire: negative Config.MaxRecvMsgSize")
	}
	if cfg.MaxRecvMsgSize == 0 {
		cfg.MaxRecvMsgSize = 4 << 20
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = 1000
	}
	if cfg.MaxConns < 0 || cfg.IdleTimeout < 0 {
		return nil, errors.New("grpcwire: negative Config.MaxConns or IdleTimeout")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{maxRecv: cfg.MaxRecvMsgSize, maxStreams: cfg.MaxConcurrentStreams, log: cfg.Logger,
		maxConns: cfg.MaxConns, idleTimeout: cfg.IdleTimeout, budget: cfg.Budget, flagHeader: cfg.FlagHeader,
		evictedLog: lograte.New(time.Second),
		unary:      map[string]Unary{}, methods: map[string]*method{}, info: map[string]grpc.ServiceInfo{},
		lns: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}, idle: make(chan struct{})}
	// Far more than calls in flight hold (a thousand calls of a few
	// hundred bytes), and room for two of the largest messages.
	s.maxHeld = max(64<<20, 2*(cfg.MaxRecvMsgSize+5))
	s.maxUnflushed = maxUnflushed
	s.setupTimeout = setupTimeout
	s.evictGrace = time.Second
	if cfg.TLS != nil {
		s.tlsCfg = cfg.TLS.Clone()
		s.tlsCfg.NextProtos = []string{"h2"}
	}
	return s, nil
}

var _ grpc.ServiceRegistrar = (*Server)(nil)

// RegisterService serves desc's methods with impl, each through its
// generated handler on a goroutine of its own. Call it before Serve.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	info := grpc.ServiceInfo{Metadata: desc.Metadata}
	for i := range desc.Methods {
		m := &desc.Methods[i]
		name := "/" + desc.ServiceName + "/" + m.MethodName
		s.methods[name] = &method{impl: impl, unary: m, name: name}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: m.MethodName})
	}
	for i := range desc.Streams {
		sd := &desc.Streams[i]
		name := "/" + desc.ServiceName + "/" + sd.StreamName
		s.methods[name] = &method{impl: impl, stream: sd, name: name}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: sd.StreamName,
			IsClientStream: sd.ClientStreams, IsServerStream: sd.ServerStreams})
	}
	s.info[desc.ServiceName] = info
}

// HandleUnary serves the unary method at fullPath ("/pkg.Service/Method")
// with h, on the fast path, in place of its registered handler (register
// the service too, for reflection to list it). Call it before Serve.
func (s *Server) HandleUnary(fullPath string, h Unary) {
	if !strings.HasPrefix(fullPath, "/") {
		panic(fmt.Sprintf("grpcwire: method path %q must start with /", fullPath))
	}
	s.unary[fullPath] = h
}

// GetServiceInfo lists the registered services, as grpc.Server's does:
// what server reflection reads.
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo { return s.info }

// Serve accepts connections on ln and serves each on goroutines of its
// own until Shutdown or Close, then returns ErrServerClosed; or returns
// the listener's error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	ln = accept.Retrying(ln, s.log, "grpc")
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			draining := s.draining
			s.mu.Unlock()
			if draining {
				return ErrServerClosed
			}
			// The listener retries every failure but its closing.
			return fmt.Errorf("grpcwire: accept: %w", err)
		}
		go s.serveConn(nc)
	}
}

// serveConn runs one connection: the TLS handshake if any, then the
// reading loop on this goroutine.
func (s *Server) serveConn(nc net.Conn) {
	s.mu.Lock()
	full := s.open >= s.maxConns
	if !full {
		s.open++
	}
	s.mu.Unlock()
	if full {
		s.refuse(nc)
		return
	}
	defer func() {
		s.mu.Lock()
		s.open--
		s.mu.Unlock()
	}()
	// A connection that never completes its handshake and preface holds
	// a goroutine: it has setupTimeout to do so (cleared by conn.serve
	// once the preface is read).
	nc.SetDeadline(time.Now().Add(s.setupTimeout))
	if s.tlsCfg != nil {
		tc := tls.Server(nc, s.tlsCfg)
		if err := tc.Handshake(); err != nil {
			s.log.Debug("grpcwire: TLS handshake", "remote", nc.RemoteAddr().String(), "err", err)
			nc.Close()
			return
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			s.log.Debug("grpcwire: client did not negotiate h2", "remote", nc.RemoteAddr().String(), "alpn", p)
			nc.Close()
			return
		}
		nc = tc
	}
	c := newConn(s, nc)
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.serve()
	s.mu.Lock()
	delete(s.conns, c)
	if s.draining && len(s.conns) == 0 {
		closeOnce(s.idle)
	}
	s.mu.Unlock()
}

// refuse turns away a connection over MaxConns: in plain text, with
// SETTINGS and GOAWAY (ENHANCE_YOUR_CALM, which grpc-go's clients and
// Envoy take as "try later or elsewhere"), over TLS by closing it, since
// answering would cost a handshake.
func (s *Server) refuse(nc net.Conn) {
	s.log.Debug("grpcwire: refusing a connection over the cap", "remote", nc.RemoteAddr().String(), "max_conns", s.maxConns)
	if s.tlsCfg == nil {
		var b outBuf
		fr := http2.NewFramer(&b, nil)
		fr.WriteSettings()
		fr.WriteGoAway(0, http2.ErrCodeEnhanceYourCalm, []byte("max number of connections reached"))
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(b.b)
	}
	nc.Close()
}

// released notes a large buffer dropped (membudget.Budget.Released).
func (s *Server) released(n int) {
	if s.budget != nil {
		s.budget.Released(n)
	}
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// stopAccepting closes the listeners and returns the connections open.
func (s *Server) stopAccepting() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
	for ln := range s.lns {
		ln.Close()
	}
	if len(s.conns) == 0 {
		closeOnce(s.idle)
	}
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	return cs
}

// Shutdown drains: listeners close, each connection is sent GOAWAY and
// takes no new call, and each closes once its calls have been answered.
// It returns nil then, or, when ctx ends first, closes what is left and
// returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	for _, c := range s.stopAccepting() {
		c.goAway()
	}
	select {
	case <-s.idle:
		return nil
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once; calls in
// flight are not answered.
func (s *Server) Close() {
	for _, c := range s.stopAccepting() {
		c.close(errors.New("server closed"))
	}
	<-s.idle
}
