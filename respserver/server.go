package respserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
)

// Version is the version HELLO and INFO report.
const Version = "0.1.0"

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("respserver: server closed")

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Store decides requests. Required.
	Store engine.Store
	// Policies resolves RL.ALLOW's policy names. Nil means no policies:
	// RL.ALLOW then replies with an error that says how to load some.
	Policies engine.Policies
	// RequirePass, when set, is the password every connection must give
	// (AUTH or HELLO … AUTH) before any other command.
	RequirePass string
	// Logger receives connection-level events at debug level and internal
	// errors at error level. Nil means slog.Default().
	Logger *slog.Logger
	// ResetTimeout bounds one Store.Reset call. Zero means 2s. Decisions
	// get no deadline here: the store bounds its own waits (the batcher's
	// round-trip deadline), and a timer per pipeline would be paid on
	// every request.
	ResetTimeout time.Duration
	// MaxRequestBytes bounds how many bytes a connection may send without
	// completing a command; past it the connection gets a protocol error and
	// is closed. Zero means 16 MiB.
	MaxRequestBytes int
	// MaxArgs bounds the arguments of one command; more get a protocol
	// error. Zero means DefaultMaxArgs.
	MaxArgs int
	// MaxConns bounds concurrent connections; more are refused with an
	// error and closed. Zero means 10,000.
	MaxConns int
	// Observer, if set, is told of every decision and error reply, for
	// metrics.
	Observer Observer
	// Info adds sections to INFO after the server's own; INFO sluice shows
	// them all.
	Info []InfoSection
	// Tracer, when set, records a span for each decision of a connection
	// that asked for tracing with RL.TRACE. Nil turns RL.TRACE away.
	Tracer trace.Tracer
}

// Observer counts what the server answers. It runs once per run of alike
// decisions in a pipeline, so it must be cheap, and safe for concurrent
// use.
type Observer interface {
	// Decided is told of n decisions alike: the policy's name ("inline"
	// for the inline commands), the algorithm, whether they were allowed,
	// whether a shadow-mode policy allowed what it refused, and what
	// decided them. A pipeline's decisions come in runs, so that a busy
	// connection pays for one call, not one per decision.
	Decided(policy string, alg engine.Algorithm, allowed, shadow bool, path engine.Path, n int)
	// Failed is told of each error reply: "request" (the client's input),
	// "store" (the store could not decide) or "connection".
	Failed(kind string)
}

// InfoSection is one section of INFO, read each time INFO asks.
type InfoSection struct {
	Name   string             // its title, such as "Upstream"; INFO upstream selects it
	Fields func() [][2]string // name and value pairs, in order
}

// Server serves the RESP protocol. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	started time.Time
	nextID  atomic.Int64
	stats   stats

	mu       sync.Mutex
	conns    map[*client]struct{} // guarded by mu
	closing  bool                 // guarded by mu
	listener *drainListener       // guarded by mu
	idle     chan struct{}        // guarded by mu; closed when no connection is left while closing
}

type stats struct {
	connsTotal   atomic.Int64
	commands     atomic.Int64
	allowed      atomic.Int64
	denied       atomic.Int64
	shadowed     atomic.Int64 // refused, but allowed by a shadow-mode policy
	errors       atomic.Int64
	rejectedConn atomic.Int64
	paths        [8]atomic.Int64 // decisions by engine.Path
}

func (s *Server) observeFailure(kind string) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Failed(kind)
	}
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("respserver: Config.Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ResetTimeout < 0 || cfg.MaxRequestBytes < 0 || cfg.MaxConns < 0 || cfg.MaxArgs < 0 {
		return nil, errors.New("respserver: negative limit in Config")
	}
	if cfg.ResetTimeout == 0 {
		cfg.ResetTimeout = 2 * time.Second
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = 16 << 20
	}
	if cfg.MaxArgs == 0 {
		cfg.MaxArgs = DefaultMaxArgs
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 10_000
	}
	return &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		started: time.Now(),
		conns:   make(map[*client]struct{}),
	}, nil
}

// Serve accepts connections on ln until Shutdown or Close, and then returns
// ErrServerClosed. Any other error is the listener's.
func (s *Server) Serve(ln net.Listener) error {
	dl := &drainListener{Listener: ln, max: s.cfg.MaxRequestBytes, maxArgs: s.cfg.MaxArgs, drained: make(chan struct{})}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.listener != nil {
		s.mu.Unlock()
		return errors.New("respserver: Serve called twice")
	}
	s.listener = dl
	s.mu.Unlock()

	rs := redcon.NewServerNetwork(ln.Addr().Network(), ln.Addr().String(), s.handle, s.accept, s.closed)
	rs.AcceptError = func(err error) {
		// redcon retries at once; out of file descriptors, that would spin.
		s.log.Warn("accept failed; retrying in 10ms", "err", err)
		time.Sleep(10 * time.Millisecond)
	}
	err := rs.Serve(dl)
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return ErrServerClosed
	}
	if err == nil {
		err = dl.err
	}
	return err
}

// drainGrace is how long, from Shutdown, a connection keeps reading: long
// enough for it to read what its client sent before the shutdown (already
// in the socket's buffer, so read at once), short enough not to hold the
// shutdown for a client that keeps sending.
const drainGrace = 200 * time.Millisecond

// Shutdown stops accepting connections and waits until every connection has
// read and answered what its client had sent (each reads on for drainGrace,
// then closes), also requests still in the socket's buffer behind a partly
// read pipeline. Requests a client sends later are not answered. If ctx
// ends first, the remaining connections are closed at once and ctx's error
// is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	dl := s.listener
	if s.idle == nil {
		s.idle = make(chan struct{})
		if len(s.conns) == 0 {
			close(s.idle)
		}
	}
	idle := s.idle
	until := time.Now().Add(drainGrace)
	for c := range s.conns {
		// Closing an idle connection now would drop requests already sent
		// but not yet read; the failed read closes it instead.
		_ = c.netConn.SetReadDeadline(until)
	}
	s.mu.Unlock()
	if dl != nil {
		dl.stop()
	}
	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	for c := range s.conns {
		c.netConn.Close()
	}
	s.mu.Unlock()
	if dl != nil {
		dl.finish()
	}
	return err
}

// Close closes the listener and every connection at once, without draining.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Clients reports how many clients are connected.
func (s *Server) Clients() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.conns))
}

// Addr is the address Serve listens on, or nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return nil
	}
	return s.listener.Addr()
}

func (s *Server) accept(rc redcon.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	if len(s.conns) >= s.cfg.MaxConns {
		s.stats.rejectedConn.Add(1)
		rc.WriteError("ERR max number of clients reached")
		_ = redcon.BaseWriter(rc).Flush()
		return false
	}
	c := newClient(s, rc)
	s.conns[c] = struct{}{}
	rc.SetContext(c)
	s.stats.connsTotal.Add(1)
	return true
}

func (s *Server) closed(rc redcon.Conn, err error) {
	c, _ := rc.Context().(*client)
	if c == nil {
		return
	}
	s.mu.Lock()
	delete(s.conns, c)
	if s.closing && len(s.conns) == 0 && s.idle != nil {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
	s.mu.Unlock()
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
		s.log.Debug("connection closed", "id", c.id, "addr", rc.RemoteAddr(), "err", err)
	}
}

// handle is redcon's handler. It takes the rest of the pipeline at once so
// that decisions in it form one batch, and writes all replies with one
// flush (redcon flushes after the handler returns).
func (s *Server) handle(rc redcon.Conn, first redcon.Command) {
	c, _ := rc.Context().(*client)
	if c == nil {
		_ = rc.Close()
		return
	}
	if lc, ok := rc.NetConn().(*limitConn); ok {
		lc.in.unparsed = 0
	}
	rest := rc.ReadPipeline()
	defer func() {
		if r := recover(); r != nil {
			// A bug, not an input: it must not take the process down.
			s.log.Error("panic in command handler", "panic", fmt.Sprint(r), "id", c.id)
			c.out = appendError(c.out, "ERR internal error")
			c.quit = true
		}
		rc.WriteRaw(c.out)
		if cap(c.out) > 1<<20 {
			c.out = nil // do not keep a huge pipeline's buffer per connection
		} else {
			c.out = c.out[:0]
		}
		// While closing, the connection reads on until Shutdown's read
		// deadline, so that requests already sent are answered too.
		if c.quit {
			_ = rc.Close()
		}
	}()
	c.exec(first.Args)
	for i := range rest {
		if c.quit {
			break
		}
		c.exec(rest[i].Args)
	}
	c.settle()
}

// drainListener lets Shutdown stop accepting without redcon noticing:
// redcon closes every connection as soon as Accept fails, which would cut
// off requests being answered, so after stop, Accept blocks until finish.
type drainListener struct {
	net.Listener
	max      int
	maxArgs  int
	stopOnce sync.Once
	stopped  atomic.Bool
	drained  chan struct{}
	doneOnce sync.Once
	err      error // the listener's own error, set before Accept returns it
}

func (l *drainListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		if l.stopped.Load() {
			<-l.drained
			return nil, net.ErrClosed
		}
		l.err = err
		return nil, err
	}
	return newLimitConn(nc, l.max, l.maxArgs), nil
}

func (l *drainListener) stop() {
	l.stopOnce.Do(func() {
		l.stopped.Store(true)
		_ = l.Listener.Close()
	})
}

func (l *drainListener) finish() { l.doneOnce.Do(func() { close(l.drained) }) }
