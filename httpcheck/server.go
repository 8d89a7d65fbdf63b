// Package httpcheck is the HTTP check endpoint that API gateways call on
// every request before forwarding it: nginx's auth_request, Traefik's
// forwardAuth, Envoy's ext_authz (HTTP). It decides by a named policy, as
// RL.ALLOW does over RESP, and answers in HTTP's terms: 200 when allowed,
// 429 (or the 401/403 nginx's auth_request needs) with Retry-After when
// refused, the X-RateLimit-* headers and the IETF draft's RateLimit-Policy
// and RateLimit fields on every answer, and a 400 with a one-line reason,
// never a decision, for a check it cannot read.
//
// Like every door it is a thin codec over the service layer: the decision,
// the failure mode during an outage, the deny cache and the metrics are
// the same as RESP's, and concurrent checks share the batcher's round
// trips. The parser (Parse) is a pure function, fuzzed, and shaped so that
// each gateway's recipe leaves a client no header to choose its own policy,
// key or cost with (see Parse and docs/gateways.md).
package httpcheck

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/accept"
	"github.com/sluice-rl/sluice/internal/ratefields"
	"github.com/sluice-rl/sluice/service"
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Service decides. Required.
	Service *service.Service
	// KeyHeader names the request header the key comes from when a check
	// gives none (see Parse); empty: none.
	KeyHeader string
	// Token, when set, must come with every check as
	// "Authorization: Bearer TOKEN" or in the X-Sluice-Token header (for
	// ext_authz, which forwards the client's own Authorization).
	Token string
	// TLS, when set, serves HTTPS with it.
	TLS *tls.Config
	// Logger logs what goes wrong beyond one check. Nil: slog.Default().
	Logger *slog.Logger
	// MaxConns bounds the connections open at once: past it a new one is
	// answered 503 and closed. Zero means DefaultMaxConns.
	MaxConns int
}

// The memory a connection can make the check hold is bounded by what it
// may send before its check is read: a request's line and headers, at
// most MaxHeaderBytes (net/http adds 4 KiB of slack, and answers 431
// past it), held until ReadHeaderTimeout. A check needs what its gateway
// forwards: nginx's auth_request forwards the client's headers, which
// nginx itself bounds to 4 × 8 KB (large_client_header_buffers); Envoy's
// ext_authz forwards the few headers allowed_headers names; a check's
// own policy, key, cost and token are a few short headers. 32 KiB is
// nginx's bound, with room for what the gateway adds; net/http's default,
// 1 MiB, let 300 connections that never ended a header line hold 186 MB.
// Reading a header line costs net/http about twice its length (the line
// is grown by appending 4 KiB reads), so a connection holds at most about
// 80 KiB before its check is read (measured: docs/operating.md).
const (
	MaxHeaderBytes = 32 << 10
	// DefaultMaxConns is Config.MaxConns's default: a gateway keeps a few
	// pooled connections per worker, so a thousand serves a fleet of
	// gateways, and bounds what headers in flight hold to under 100 MB.
	DefaultMaxConns = 1024
)

// Server serves the check.
type Server struct {
	svc       *service.Service
	keyHeader string
	token     []byte
	tls       *tls.Config
	log       *slog.Logger
	http      *http.Server
	checks    sync.Pool // *check
	maxConns  int64
	conns     atomic.Int64 // connections open, counted by connState
	refused   atomic.Int64 // connections refused past maxConns
	lastWarn  atomic.Int64 // UnixNano of the last warning about refusals
}

// New checks cfg and builds the server; Serve serves.
func New(cfg Config) (*Server, error) {
	if cfg.Service == nil {
		return nil, errors.New("httpcheck: Config.Service is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.MaxConns < 0:
		return nil, errors.New("httpcheck: Config.MaxConns must not be negative")
	case cfg.MaxConns == 0:
		cfg.MaxConns = DefaultMaxConns
	}
	s := &Server{svc: cfg.Service, keyHeader: cfg.KeyHeader, tls: cfg.TLS, log: cfg.Logger, maxConns: int64(cfg.MaxConns)}
	if cfg.Token != "" {
		s.token = []byte(cfg.Token)
	}
	s.checks.New = func() any { return &check{b: s.svc.NewBatch().From("http")} }
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: MaxHeaderBytes, ConnState: s.connState,
		TLSConfig: cfg.TLS, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	return s, nil
}

// connState counts the connections open, and refuses one past maxConns:
// a plain-HTTP client is told why (503) before the close. It runs on
// net/http's accept loop for a new connection, where a write of a few
// bytes to a fresh socket goes to its empty send buffer at once.
func (s *Server) connState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		if s.conns.Add(1) <= s.maxConns {
			return
		}
		if s.tls == nil {
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(tooManyConns)
		}
		_ = c.Close() // net/http then reports it closed, which counts it out
		s.refused.Add(1)
		now := time.Now().UnixNano()
		if last := s.lastWarn.Load(); now-last >= int64(10*time.Second) && s.lastWarn.CompareAndSwap(last, now) {
			s.log.Warn("http check: connections refused past --http-max-conns", "max_conns", s.maxConns, "refused", s.refused.Load())
		}
	case http.StateClosed, http.StateHijacked:
		s.conns.Add(-1)
	}
}

var tooManyConns = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 52\r\n\r\n" +
	"too many connections to the check: --http-max-conns\n")

// ErrServerClosed is what Serve returns after Shutdown.
var ErrServerClosed = http.ErrServerClosed

// Serve answers on ln until Shutdown; it then returns ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	ln = accept.Retrying(ln, s.log, "http check")
	if s.tls != nil {
		return s.http.ServeTLS(ln, "", "")
	}
	return s.http.Serve(ln)
}

// Shutdown drains: no new check is taken, every check already read is
// answered, until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

// check is one request's scratch, pooled.
type check struct {
	b   *service.Batch
	buf []byte
}

// ServeHTTP answers one check, whatever its method: a gateway may forward
// the original one.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.token != nil && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		plain(w, http.StatusUnauthorized, "missing or wrong token: send Authorization: Bearer TOKEN or "+HeaderToken)
		return
	}
	if r.URL.Path == SettlePath {
		s.settle(w, r)
		return
	}
	ck, err := Parse(r.URL.Path, r.URL.RawQuery, r.Header, s.keyHeader)
	if err != nil {
		status := http.StatusBadRequest
		if !strings.HasPrefix(r.URL.Path, Path) {
			status = http.StatusNotFound
		}
		plain(w, status, err.Error())
		return
	}
	c := s.checks.Get().(*check)
	defer func() {
		c.b.Clear()
		s.checks.Put(c)
	}()
	i, err := c.b.Add(service.Request{ByPolicy: true, Policy: ck.Policy, Key: ck.Key, Cost: ck.Cost, Charge: ck.Charge,
		Reserve: ck.Reserve, ReserveTTL: ck.ReserveTTL, Detail: true})
	var full *service.TooManyReservationsError
	switch {
	case errors.As(err, &full):
		plain(w, http.StatusServiceUnavailable, err.Error())
		return
	case err != nil:
		plain(w, http.StatusBadRequest, err.Error())
		return
	}
	s.svc.DecideWait(c.b)
	d, err := c.b.Result(i)
	if err != nil {
		if errors.Is(err, engine.ErrInvalid) {
			plain(w, http.StatusBadRequest, err.Error())
			return
		}
		s.log.Debug("http check: no decision", "policy", ck.Policy, "err", err)
		plain(w, http.StatusServiceUnavailable, "no decision: "+err.Error())
		return
	}
	if s.explainAsked(r) {
		explain(w.Header(), c.b, i)
	}
	s.answer(w, c, ck, d, i)
}

func (s *Server) authorized(r *http.Request) bool {
	got := r.Header.Get(HeaderToken)
	if got == "" {
		a := r.Header.Get("Authorization")
		if len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
			return false
		}
		got = a[7:]
	}
	return subtle.ConstantTimeCompare([]byte(got), s.token) == 1
}

// answer writes the decision of check i (in c's batch) as headers and
// status.
func (s *Server) answer(w http.ResponseWriter, c *check, ck Check, d *engine.Decision, i int) {
	h := w.Header()
	reset := ratefields.Seconds(d.ResetAfter)
	remaining := max(d.Remaining, 0)
	h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(d.Limit, 10)}
	h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(remaining, 10)}
	h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(reset, 10)}
	_, limits, parts := c.b.Detail(i)
	h["Ratelimit-Policy"] = []string{string(appendPolicies(c.buf[:0], ck.Policy, limits))}
	h["Ratelimit"] = []string{string(appendRateLimits(c.buf[:0], ck.Policy, limits, parts))}
	if d.Remaining < 0 {
		// A charge's answer, over the budget: by how many units, which
		// the draft's fields, never below zero, cannot say.
		h["X-Ratelimit-Over"] = []string{strconv.FormatInt(-d.Remaining, 10)}
	}
	if id := c.b.Reservation(i); id != "" {
		h[HeaderReservation] = []string{id}
	}
	if d.Allowed || ck.Charge {
		// A charge is never refused: the work is done, and it was taken.
		if d.Delay > 0 {
			// The leaky bucket admits with a wait: the gateway (or the
			// client) should hold the request that long.
			h["X-Ratelimit-Delay-Ms"] = []string{strconv.FormatInt(d.Delay.Milliseconds(), 10)}
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	retry := max(ratefields.Seconds(d.RetryAfter), 1)
	h["Retry-After"] = []string{strconv.FormatInt(retry, 10)}
	h["Content-Type"] = []string{"application/problem+json"}
	w.WriteHeader(ck.DenyStatus)
	// The title is the status's own (a 403 asked for by deny_status is no
	// "Too Many Requests"), and the detail says why: over the limit, or
	// refused because the store cannot be reached and the policy fails
	// closed, which no client's pacing would have avoided.
	b := append(c.buf[:0], `{"type":"about:blank","title":"`...)
	b = append(b, http.StatusText(ck.DenyStatus)...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(ck.DenyStatus), 10)
	if c.b.Path(i) == engine.PathFailClosed {
		b = append(b, `,"detail":"the rate limit store cannot be reached and this policy refuses while it cannot (on_failure: deny); retry after `...)
	} else {
		b = append(b, `,"detail":"rate limit exceeded; retry after `...)
	}
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, ` s","retry_after":`...)
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, "}\n"...)
	_, _ = w.Write(b)
	c.buf = b
}

// itemName is the draft's name for one of a policy's limits: the policy's
// own for its one limit, "policy.limit" for each of several.
func itemName(dst []byte, policy string, limits []engine.NamedLimit, j int) []byte {
	dst = append(dst, policy...)
	if len(limits) == 1 && limits[0].Name == policy {
		return dst
	}
	return append(append(dst, '.'), limits[j].Name...)
}

// appendPolicies appends RateLimit-Policy: an item per limit (ratefields),
// so that a client of a multi-limit policy sees each rate it must keep.
func appendPolicies(dst []byte, policy string, limits []engine.NamedLimit) []byte {
	var name [256]byte
	for j, l := range limits {
		if j > 0 {
			dst = append(dst, ", "...)
		}
		dst = ratefields.AppendLimitPolicy(dst, string(itemName(name[:0], policy, limits, j)), l.Limit)
	}
	return dst
}

// appendRateLimits appends RateLimit: per limit, what can be spent now and
// when it is whole again.
func appendRateLimits(dst []byte, policy string, limits []engine.NamedLimit, parts []engine.Decision) []byte {
	var name [256]byte
	for j := range limits {
		if j > 0 {
			dst = append(dst, ", "...)
		}
		p := &parts[j]
		dst = ratefields.AppendRateLimit(dst, string(itemName(name[:0], policy, limits, j)), max(p.Remaining, 0), ratefields.Seconds(p.ResetAfter))
	}
	return dst
}

// plain writes a one-line text answer.
func plain(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(strings.ReplaceAll(msg, "\n", " ") + "\n"))
}
