package rls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/accept"
	"github.com/sluice-rl/sluice/internal/grpcwire"
	"github.com/sluice-rl/sluice/internal/membudget"
	"github.com/sluice-rl/sluice/internal/rlsopts"
	"github.com/sluice-rl/sluice/rls/peerstats"
	"github.com/sluice-rl/sluice/rlsconfig"
	"github.com/sluice-rl/sluice/service"
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Service decides. Required.
	Service *service.Service
	// Rules returns the configuration in use; it is called once per call,
	// so that a reload applies to the next call whole. Required; a nil
	// configuration knows no domain, and every descriptor is then OK.
	Rules func() *rlsconfig.Config
	// StopWhenOverLimit charges no descriptor of a call when any of them
	// is over its limit, as the peer's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
	// does. It costs a second pass (see ShouldRateLimit). False, the peer's
	// default: every descriptor is charged whatever the others decide.
	StopWhenOverLimit bool
	// Shadow answers every descriptor as if its rule were in shadow mode
	// (counted, reported, never refused): the peer's SHADOW_MODE.
	Shadow bool
	// Headers picks the response headers; zero: none, as the peer.
	Headers rlsopts.Headers
	// DynamicMetadata returns, in each response's dynamic_metadata, the
	// request's domain and descriptors and the metadata of the rules whose
	// descriptors passed, as the peer's RESPONSE_DYNAMIC_METADATA does
	// (see dynamicMetadata). False, the peer's default: none.
	DynamicMetadata bool
	// PeerStats, when set, counts each call and each descriptor's decision
	// as the peer's statistics do, for its Prometheus metrics. Nil: none.
	PeerStats *peerstats.Stats
	// PeerKeys, when set, counts the rules without Sluice's own fields in
	// envoyproxy/ratelimit's keys, as the peer counts them (see
	// rlsconfig.PeerKeys). Nil: every rule in Sluice's keys.
	PeerKeys *rlsconfig.PeerKeys
	// MaxDescriptors is the most descriptors one call may carry, and
	// MaxEntries the most entries one descriptor may; a call over either
	// is refused INVALID_ARGUMENT, naming the cap. Zero:
	// rlsopts.DefaultMaxDescriptors and rlsopts.DefaultMaxEntries. The peer has no such
	// caps; see partSize for how a call of more than the default is
	// decided.
	MaxDescriptors, MaxEntries int
	// Ready reports whether the sidecar can decide: the health service
	// answers NOT_SERVING while it returns an error. Nil: always ready.
	Ready func() error
	// TLS, when set, serves gRPC over TLS with it (client certificates are
	// its ClientAuth's business).
	TLS *tls.Config
	// Transport picks the gRPC server: zero, the own (package grpcwire);
	// rlsopts.TransportGRPCGo, grpc-go's.
	Transport rlsopts.Transport
	// MaxConns bounds the connections served at once: on the own
	// transport one more is sent GOAWAY and closed, on grpc-go's closed.
	// Zero: DefaultMaxConns.
	MaxConns int
	// IdleTimeout, when positive, sends GOAWAY to a connection that has
	// had no call open for that long (grpc-go's MaxConnectionIdle).
	// Zero: never.
	IdleTimeout time.Duration
	// Budget, when set, counts what the own transport's connections hold
	// in the process's input budget (grpcwire.Config.Budget). grpc-go's
	// buffers are its own, outside it.
	Budget *membudget.Budget
	// Logger logs what goes wrong beyond one call. Nil: slog.Default().
	Logger *slog.Logger
	// Explain answers a call that carries the request metadata
	// x-sluice-explain with each descriptor's explanation in the response
	// header x-sluice-explanation (explain.go). False: the metadata is
	// ignored, so that nothing a gateway forwards can ask.
	Explain bool
}

// Server serves Envoy's rate limit service, the health service and server
// reflection on one gRPC server.
type Server struct {
	svc      *service.Service
	rules    func() *rlsconfig.Config
	stop     bool
	shadow   bool
	headers  rlsopts.Headers
	metadata bool                // Config.DynamicMetadata
	explain  bool                // Config.Explain
	stats    *peerstats.Stats    // nil: no peer statistics
	peer     *rlsconfig.PeerKeys // nil: Sluice's keys
	ready    func() error

	maxDescriptors, maxEntries int
	maxConns                   int // grpc-go's connections (capped by Serve's listener); the own transport caps its own
	fallbacks                  fallbackLog

	log      *slog.Logger
	g        *grpc.Server     // with rlsopts.TransportGRPCGo
	w        *grpcwire.Server // with rlsopts.TransportOwn
	draining atomic.Bool
	calls    sync.Pool // *call
	requests sync.Pool // *request
	replies  sync.Pool // *reply

	pb.UnimplementedRateLimitServiceServer
}

var _ pb.RateLimitServiceServer = (*Server)(nil)

// New checks cfg and builds the server; Serve serves.
func New(cfg Config) (*Server, error) {
	if cfg.Service == nil {
		return nil, errors.New("rls: Config.Service is required")
	}
	if cfg.Rules == nil {
		return nil, errors.New("rls: Config.Rules is required")
	}
	if cfg.Headers > rlsopts.HeadersBoth {
		return nil, errors.New("rls: unknown Config.Headers")
	}
	if cfg.PeerKeys != nil {
		if err := cfg.PeerKeys.Validate(); err != nil {
			return nil, err
		}
	}
	if cfg.MaxDescriptors < 0 || cfg.MaxEntries < 0 {
		return nil, errors.New("rls: negative Config.MaxDescriptors or MaxEntries")
	}
	if cfg.MaxDescriptors == 0 {
		cfg.MaxDescriptors = rlsopts.DefaultMaxDescriptors
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = rlsopts.DefaultMaxEntries
	}
	if cfg.Ready == nil {
		cfg.Ready = func() error { return nil }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{svc: cfg.Service, rules: cfg.Rules, stop: cfg.StopWhenOverLimit, shadow: cfg.Shadow, headers: cfg.Headers, metadata: cfg.DynamicMetadata, stats: cfg.PeerStats, peer: cfg.PeerKeys,
		ready: cfg.Ready, log: cfg.Logger, maxDescriptors: cfg.MaxDescriptors, maxEntries: cfg.MaxEntries,
		fallbacks: fallbackLog{log: cfg.Logger, now: time.Now}, explain: cfg.Explain}
	s.calls.New = func() any {
		c := newCall(s.svc)
		c.landed = func() { s.landed(c) }
		return c
	}
	s.requests.New = func() any { return new(request) }
	s.replies.New = func() any { return &reply{pool: &s.replies} }
	if cfg.Transport > rlsopts.TransportGRPCGo {
		return nil, errors.New("rls: unknown Config.Transport")
	}
	if cfg.MaxConns < 0 || cfg.IdleTimeout < 0 {
		return nil, errors.New("rls: negative Config.MaxConns or IdleTimeout")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	s.maxConns = cfg.MaxConns
	if cfg.Transport == rlsopts.TransportOwn {
		w, err := grpcwire.New(grpcwire.Config{TLS: cfg.TLS, Logger: cfg.Logger, MaxConns: cfg.MaxConns,
			IdleTimeout: cfg.IdleTimeout, Budget: cfg.Budget, FlagHeader: explainFlag(cfg.Explain)})
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		// Registered for reflection to list it; the fast path serves it.
		w.RegisterService(&pb.RateLimitService_ServiceDesc, s)
		w.HandleUnary(shouldRateLimitPath, s.serveCall)
		healthpb.RegisterHealthServer(w, &health{s: s})
		reflection.Register(w)
		s.w = w
		return s, nil
	}
	// A call waits for its batch's round trip to Redis in its handler, so
	// a worker per call in flight: calls then reuse goroutines whose stacks
	// have grown, instead of a new goroutine growing its stack each time.
	opts := []grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers), grpc.ForceServerCodecV2(newCodec(s.overCaps))}
	if cfg.IdleTimeout > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}))
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.g = grpc.NewServer(opts...)
	s.g.RegisterService(&serviceDesc, s)
	healthpb.RegisterHealthServer(s.g, &health{s: s})
	reflection.Register(s.g)
	return s, nil
}

// serviceDesc is RateLimitService as its generated code describes it,
// with a handler that reads each call into a pooled request and answers
// with a pooled reply, which the codec puts back once written: grpc's
// generated handler makes a new message each call. Reflection finds the
// service by the same name and proto file.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: pb.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: pb.RateLimitService_ServiceDesc.HandlerType,
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: handleShouldRateLimit}},
	Metadata:    pb.RateLimitService_ServiceDesc.Metadata,
}

// handleShouldRateLimit is the generated handler's work without its new
// message. This server installs no interceptor, so none is called. A
// call whose deadline is over before it starts (grpc-timeout 0) is
// answered DEADLINE_EXCEEDED, never decided nor charged, as on the own
// transport.
func handleShouldRateLimit(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	s := srv.(*Server)
	if s.stats != nil {
		defer s.called(time.Now())
	}
	req := s.requests.Get().(*request)
	defer func() {
		req.reset()
		s.requests.Put(req)
	}()
	if err := dec(req); err != nil {
		return nil, err
	}
	if req.refused != nil {
		return nil, req.refused
	}
	rep := s.replies.Get().(*reply)
	if _, err := s.decideIn(ctx, &req.msg, rep); err != nil {
		rep.release()
		return nil, err
	}
	return rep, nil
}

// streamWorkers is how many calls in flight are served by reused
// goroutines; more get a goroutine each, as without workers.
const streamWorkers = 256

// ErrServerClosed is what Serve returns after Shutdown.
var ErrServerClosed = errors.New("rls: server closed")

// Serve answers on ln until Shutdown; it then returns ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	if s.w != nil {
		if err := s.w.Serve(ln); err != nil && !errors.Is(err, grpcwire.ErrServerClosed) && !s.draining.Load() {
			return err
		}
		return ErrServerClosed
	}
	err := s.g.Serve(capListener(accept.Retrying(ln, s.log, "grpc"), s.maxConns))
	if err == nil || errors.Is(err, grpc.ErrServerStopped) || s.draining.Load() {
		return ErrServerClosed
	}
	return err
}

// Shutdown drains: the health service turns NOT_SERVING, no new call is
// taken, and every call already received is answered, until ctx ends;
// then the remaining connections are closed and ctx's error returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	if s.w != nil {
		return s.w.Shutdown(ctx)
	}
	done := make(chan struct{})
	go func() {
		s.g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.g.Stop()
		<-done
		return ctx.Err()
	}
}
