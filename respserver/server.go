package respserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/accept"
	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/internal/lograte"
	"github.com/sluice-rl/sluice/internal/membudget"
	"github.com/sluice-rl/sluice/internal/monitor"
	"github.com/sluice-rl/sluice/internal/redisadmin"
	"github.com/sluice-rl/sluice/internal/transport"
	"github.com/sluice-rl/sluice/service"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("respserver: server closed")

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Service decides the requests and owns the rules every door shares:
	// policies, prefixes, shadow mode, counting, tracing. Required.
	Service *service.Service
	// RequirePass, when set, is the password every connection must give
	// (AUTH or HELLO … AUTH) before any other command.
	RequirePass string
	// Logger receives connection-level events at debug level and internal
	// errors at error level. Nil means slog.Default().
	Logger *slog.Logger
	// MaxRequestBytes bounds a command as sent, its framing included, and
	// so each of its arguments: a command of exactly this size is run, a
	// bulk header announcing more than its command has room for is
	// refused at once ("invalid bulk length", as Redis refuses a bulk past
	// its proto-max-bulk-len), and so is a connection that sends more
	// without completing a command; the connection is then closed. Zero
	// means 16 MiB.
	MaxRequestBytes int
	// MaxArgs bounds the arguments of one command; a command of more is
	// read to its end and refused with an error, and the connection reads
	// on. Zero means DefaultMaxArgs.
	MaxArgs int
	// MaxConns bounds concurrent connections; more are refused with an
	// error and closed. Zero means 10,000.
	MaxConns int
	// MaxInputMemory bounds what all connections hold together, as Redis
	// 7's maxmemory-clients does: their input buffers at their capacity
	// (commands read and not yet run, and unfinished ones, an argument's
	// announced length charged as it starts) and their replies not yet
	// sent. Past it, the connection holding the most is closed with an
	// error, and the next, until the total is back under. Zero means 256
	// MiB. Ignored when Budget is set.
	MaxInputMemory int64
	// Budget, when set, is the input budget this server's connections
	// count in, shared with the process's other doors; nil: a budget of
	// MaxInputMemory of this server's own.
	Budget *membudget.Budget
	// Info adds sections to INFO after the server's own; INFO sluice shows
	// them all. A section named as one of the server's own (Memory) adds
	// its fields to it.
	Info []InfoSection
	// Keys counts the keys this server holds, for DBSIZE and INFO
	// keyspace; it is called on the connection's loop, so it must be
	// quick. Nil means none.
	Keys func() int
	// Loops are the event loops that serve connections, each on one
	// thread (Linux only; see evloop): a loop reads every connection that
	// has sent something, decides all they sent as one batch and writes
	// every reply, so connections cost no goroutine switches and their
	// decisions batch together. The caller runs and closes them; a
	// connection is given to the loop serving the fewest. None (the zero
	// value, as --io-loops 0) gives each connection a goroutine of its
	// own.
	Loops []*evloop.Loop
}

// InfoSection is one section of INFO, read each time INFO selects it.
type InfoSection = redisadmin.Section

// Server serves the RESP protocol. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	started time.Time
	nextID  atomic.Int64
	budget  *membudget.Budget // Config.Budget, or one of its own
	stats   stats

	mu       sync.Mutex
	conns    map[*client]struct{} // guarded by mu
	closing  bool                 // guarded by mu
	listener net.Listener         // guarded by mu
	loops    []*transport.Loop    // guarded by mu; set by Serve
	idle     chan struct{}        // guarded by mu; closed when no connection is left while closing

	monitors monitor.Hub // MONITOR's watchers (monitor.go)
}

// stats are the connection-level counters; decisions and errors are
// counted by the service.
type stats struct {
	connsTotal   atomic.Int64
	commands     atomic.Int64
	rejectedConn atomic.Int64
	evicted      atomic.Int64 // connections closed for the input budget
	evictedLog   *lograte.Limiter
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Server, error) {
	if cfg.Service == nil {
		return nil, errors.New("respserver: Config.Service is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxRequestBytes < 0 || cfg.MaxInputMemory < 0 || cfg.MaxConns < 0 || cfg.MaxArgs < 0 {
		return nil, errors.New("respserver: negative limit in Config")
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
	if cfg.MaxInputMemory == 0 {
		cfg.MaxInputMemory = 256 << 20
	}
	budget := cfg.Budget
	if budget == nil {
		var err error
		if budget, err = membudget.New(cfg.MaxInputMemory); err != nil {
			return nil, fmt.Errorf("respserver: %w", err)
		}
	}
	return &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		started: time.Now(),
		budget:  budget,
		conns:   make(map[*client]struct{}),
		stats:   stats{evictedLog: lograte.New(time.Second)},
	}, nil
}

// Serve accepts connections on ln until Shutdown or Close, and then returns
// ErrServerClosed. Any other error is the listener's.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.listener != nil {
		s.mu.Unlock()
		return errors.New("respserver: Serve called twice")
	}
	ln = accept.Retrying(ln, s.log, "resp")
	s.listener = ln
	loops, err := transport.Start(s.cfg.Service, s.log, s.cfg.Loops)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.loops = loops
	s.mu.Unlock()

	for {
		nc, err := ln.Accept()
		if err == nil {
			s.adopt(nc)
			continue
		}
		s.mu.Lock()
		closing := s.closing
		s.mu.Unlock()
		if closing {
			return ErrServerClosed
		}
		// The listener retries every failure but its closing.
		return err
	}
}

// adopt gives a new connection to an event loop, or to a goroutine of its
// own where no loop can take it (no loops, or no file descriptor).
func (s *Server) adopt(nc net.Conn) {
	s.mu.Lock()
	l := transport.Pick(s.loops, nc)
	s.mu.Unlock()
	c := s.register(nc, l)
	if c == nil {
		if l != nil {
			l.Unpick()
		}
		return
	}
	if g, ok := c.conn.(*transport.GoConn); ok {
		go g.Serve()
		return
	}
	if err := l.Adopt(nc, c.conn, func(fd int) { c.fd.Store(int32(fd)) }); err != nil {
		s.log.Debug("connection not adopted", "id", c.id, "err", err)
		l.Unpick()
		_ = nc.Close()
		s.closed(c, nil)
		return
	}
}

// register counts a new connection in, or refuses it (closing, or too
// many connections) and returns nil. l is the event loop that will serve
// it, or nil for a goroutine of its own; its transport is set here, under
// mu, where CLIENT KILL reads it.
func (s *Server) register(nc net.Conn, l *transport.Loop) *client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || len(s.conns) >= s.cfg.MaxConns {
		if !s.closing {
			s.stats.rejectedConn.Add(1)
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = nc.Write([]byte("-ERR max number of clients reached\r\n"))
		}
		_ = nc.Close()
		return nil
	}
	addr, laddr, monAddr := connAddrs(nc)
	c := newClient(s, addr)
	c.laddr, c.monAddr = laddr, monAddr
	if l == nil {
		c.conn = transport.NewGoConn(nc, c, s.cfg.Service)
		c.fd.Store(connFD(nc))
	} else {
		c.conn = l.NewConn(c)
	}
	s.conns[c] = struct{}{}
	s.stats.connsTotal.Add(1)
	return c
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
	ln, loops := s.listener, s.loops
	if s.idle == nil {
		s.idle = make(chan struct{})
		if len(s.conns) == 0 {
			close(s.idle)
		}
	}
	idle := s.idle
	until := time.Now().Add(drainGrace)
	for c := range s.conns {
		c.conn.Drain(until)
	}
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, l := range loops {
		l.DrainUntil(until)
	}
	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	for c := range s.conns {
		c.conn.CloseNow()
	}
	s.mu.Unlock()
	for _, l := range loops {
		l.Stop() // closes what it still serves
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

// closed counts a connection out.
func (s *Server) closed(c *client, err error) {
	c.account(0)
	c.budget.Leave()
	s.budget.Released(max(cap(c.in.buf), cap(c.out)))
	c.unmonitor()
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
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, io.EOF) {
		s.log.Debug("connection closed", "id", c.id, "addr", c.addr, "err", err)
	}
}
