// Package xds takes envoyproxy/ratelimit's configuration from an xDS
// management server instead of a directory: RateLimitConfig resources, one
// per domain, state of the world over one ADS stream, as the peer takes
// them under CONFIG_TYPE=GRPC_XDS_SOTW (Envoy Gateway serves them so).
//
// It is the gRPC transport only: each response's resources go through
// rlsconfig.FromXDS, the same checks as the YAML files, and a response that
// fails them is refused (NACK, with the reason) while the configuration
// in use stays; the same response sent again is refused again at a
// growing interval, not at once (see refusal). The stream is reopened with
// a growing, jittered wait when it breaks, asking for the version in use so
// that an unchanged server sends nothing new.
package xds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/internal/version"
	"github.com/sluice-rl/sluice/internal/watch"
	"github.com/sluice-rl/sluice/rlsconfig"
)

// TypeURL is the resource type asked for: go-control-plane's
// resource.RateLimitConfigType, the peer's.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Config configures a Client. Zero values are the documented defaults.
type Config struct {
	// Server is the management server's address, host:port (or any gRPC
	// target). Required.
	Server string
	// NodeID is the node's id, by which the server picks this node's
	// snapshot. Empty means "default", the peer's default.
	NodeID string
	// NodeMetadata is sent as the node's metadata, each value a string.
	NodeMetadata map[string]string
	// TLS, if set, secures the connection: its RootCAs (nil: the system's)
	// check the server, Certificates are this node's for mTLS, ServerName
	// overrides the name checked. Nil means plaintext.
	TLS *tls.Config
	// Headers are sent as gRPC metadata on the stream (an authorization
	// token, a tenant).
	Headers map[string]string
	// RetryInterval is the first wait before reopening a broken stream;
	// each failure in a row doubles it up to MaxRetryInterval, and every
	// wait is jittered by half either way so that a fleet restarted
	// together does not reconnect together. Zero means 3s, the peer's
	// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL.
	RetryInterval time.Duration
	// MaxRetryInterval caps the wait. Zero means 60s, the peer's
	// XDS_CLIENT_BACKOFF_MAX_INTERVAL.
	MaxRetryInterval time.Duration
	// MaxMessageSize is the largest response accepted: the whole
	// configuration comes in one. Zero means 64 MiB. gRPC's own 4 MiB, the
	// peer's default, refuses some 90,000 descriptors (20,000 of a route
	// value and a nested user key each measured 0.93 MB).
	MaxMessageSize int
	// Logger receives a line per applied or refused version and per broken
	// stream. Nil means slog.Default().
	Logger *slog.Logger
	// OnApply, if set, is called from Run's goroutine after each response
	// is applied (nil) or refused (its error).
	OnApply func(err error)
}

// Client holds the configuration received from the management server.
// Current is safe for concurrent use: a request takes it once and sees one
// configuration, old or new, never a mix.
type Client struct {
	cfg   Config
	log   *slog.Logger
	conn  *grpc.ClientConn
	node  *corev3.Node
	cur   atomic.Pointer[rlsconfig.Config]
	first chan struct{} // closed when a first configuration is applied
	// version is the version_info of the configuration in use, asked for
	// again on a new stream; written by Run's goroutine only.
	version string
	// refused is the response last refused, while no other has come since;
	// Run's goroutine only.
	refused *refusal

	mu     sync.Mutex
	status watch.Status // guarded by mu: the versions applied and refused
	inUse  string       // guarded by mu: version, for Info
}

// Status is the client's load record, as a watched file's: when the
// configuration in use was applied, and whether the server's latest
// version was refused (NACKed), so that what runs is an older one.
func (c *Client) Status() watch.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Info is INFO's Rls section for a configuration from xDS: the server,
// the version and domains in use, and the load record under the same
// names as a configuration's from files (rls_config_*).
func (c *Client) Info() [][2]string {
	c.mu.Lock()
	st, version := c.status, c.inUse
	c.mu.Unlock()
	cur := c.Current()
	digest := cur.Digest()
	if len(digest) > 16 {
		digest = digest[:16]
	}
	return append([][2]string{{"rls_xds_server", c.cfg.Server}, {"rls_xds_version", version},
		{"rls_domains", strconv.Itoa(len(cur.Domains()))}}, watch.StatusInfo("rls_config_", st, digest)...)
}

// record notes a response applied (err nil) or refused.
func (c *Client) record(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if err != nil {
		c.status.Failures++
		c.status.Failing = true
		c.status.LastFailure, c.status.LastError = now, err.Error()
		return
	}
	c.status.Loaded, c.status.Failing = now, false
	c.inUse = c.version
}

// New checks cfg and prepares the connection; nothing is dialled before
// Run. Until a first configuration arrives, Current has no domains, so
// every request is of an unknown domain and answered OK.
func New(cfg Config) (*Client, error) {
	if cfg.Server == "" {
		return nil, errors.New("xds: no management server address")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "default"
	}
	if cfg.RetryInterval < 0 || cfg.MaxRetryInterval < 0 {
		return nil, errors.New("xds: negative retry interval")
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 3 * time.Second
	}
	if cfg.MaxRetryInterval == 0 {
		cfg.MaxRetryInterval = time.Minute
	}
	cfg.MaxRetryInterval = max(cfg.MaxRetryInterval, cfg.RetryInterval)
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = 64 << 20
	}
	c := &Client{cfg: cfg, log: cfg.Logger, first: make(chan struct{})}
	if c.log == nil {
		c.log = slog.Default()
	}
	md := make(map[string]*structpb.Value, len(cfg.NodeMetadata))
	for k, v := range cfg.NodeMetadata {
		md[k] = structpb.NewStringValue(v)
	}
	c.node = &corev3.Node{Id: cfg.NodeID, Metadata: &structpb.Struct{Fields: md},
		UserAgentName: "sluice", UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: version.String()}}
	empty, err := rlsconfig.FromXDS()
	if err != nil {
		return nil, err
	}
	c.cur.Store(empty)
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	// The channel's own reconnection waits as long as the stream's, so
	// that one setting paces both.
	connect := grpc.ConnectParams{MinConnectTimeout: 20 * time.Second, Backoff: backoff.Config{
		BaseDelay: cfg.RetryInterval, Multiplier: 2, Jitter: 0.5, MaxDelay: cfg.MaxRetryInterval}}
	if c.conn, err = grpc.NewClient(cfg.Server, grpc.WithTransportCredentials(creds), grpc.WithConnectParams(connect),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMessageSize))); err != nil {
		return nil, fmt.Errorf("xds: management server %q: %w", cfg.Server, err)
	}
	return c, nil
}

// Current is the configuration in use.
func (c *Client) Current() *rlsconfig.Config { return c.cur.Load() }

// Applied is closed once a first configuration from the server is in use:
// a sidecar that must not answer before it has one waits on it.
func (c *Client) Applied() <-chan struct{} { return c.first }

// Run keeps a stream open to the management server until ctx ends, then
// closes the connection and returns nil.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	if len(c.cfg.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.cfg.Headers))
	}
	wait := c.cfg.RetryInterval
	for {
		got, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			wait = c.cfg.RetryInterval // the server was there: start again from the first wait
		}
		d := jittered(wait)
		c.log.Warn("rls config: xDS stream broken; the configuration in use stays", "server", c.cfg.Server, "err", err, "retry_in", d)
		if !sleep(ctx, d) {
			return nil
		}
		wait = min(2*wait, c.cfg.MaxRetryInterval)
	}
}

// jittered is d, give or take half, so that a fleet started together does
// not ask together.
func jittered(d time.Duration) time.Duration { return d/2 + rand.N(d) }

// sleep waits d, or less when ctx ends first; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// A refusal is a response refused, kept to know it when the server sends
// it again: go-control-plane's snapshot cache (Envoy Gateway's) answers a
// NACK at once with the version it refused, as long as that is its latest,
// and a client that refuses at once again spins with it (a thousand
// times a second on loopback) for as long as the version stays.
type refusal struct {
	digest [sha256.Size]byte // of the version and the resources
	err    error
	// wait is how long the next NACK of the same response waits: the
	// first again is sent at once, then after RetryInterval, doubling to
	// MaxRetryInterval. The server holds no watch meanwhile, so a newer
	// version comes when the wait ends.
	wait time.Duration
}

// responseDigest tells a response sent again from a new one. The
// resources are taken in any order: the snapshot cache keeps them in a
// map, and sends them in its order of the moment.
func responseDigest(resp *discoveryv3.DiscoveryResponse) [sha256.Size]byte {
	each := make([][sha256.Size]byte, len(resp.GetResources()))
	for i, r := range resp.GetResources() {
		each[i] = sha256.Sum256(append([]byte(r.GetTypeUrl()+"\x00"), r.GetValue()...))
	}
	slices.SortFunc(each, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	h.Write([]byte(resp.GetVersionInfo()))
	for _, d := range each {
		h.Write(d[:])
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// decide applies resp, or, when it is the response last refused sent
// again, refuses it again after the refusal's wait without loading,
// logging or counting it a second time. It returns the reason for a
// NACK, nil for an ACK; ok is false when ctx ended during the wait.
func (c *Client) decide(ctx context.Context, resp *discoveryv3.DiscoveryResponse) (refused error, ok bool) {
	digest := responseDigest(resp)
	if r := c.refused; r != nil && r.digest == digest {
		if r.wait == 0 {
			c.log.Warn("rls config: the xDS server sent the refused version again; refusing it again at a growing interval, a new version is taken when it ends",
				"version", resp.GetVersionInfo(), "first_wait", c.cfg.RetryInterval, "max_wait", c.cfg.MaxRetryInterval)
			r.wait = c.cfg.RetryInterval
			return r.err, true
		}
		d := jittered(r.wait)
		r.wait = min(2*r.wait, c.cfg.MaxRetryInterval)
		c.log.Debug("rls config: the same xDS version, NACKed again", "version", resp.GetVersionInfo(), "nack_in", d)
		return r.err, sleep(ctx, d)
	}
	err := c.apply(resp)
	c.record(err)
	if c.cfg.OnApply != nil {
		c.cfg.OnApply(err)
	}
	c.refused = nil
	if err != nil {
		c.log.Error("rls config: xDS version refused; the configuration in use stays",
			"version", resp.GetVersionInfo(), "in_use", c.version, "err", err)
		c.refused = &refusal{digest: digest, err: err}
	}
	return err, true
}

// stream opens one ADS stream and applies what it receives until it
// breaks; got reports whether any response came.
func (c *Client) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream on every return
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// No resource names: every RateLimitConfig of this node (a wildcard).
	// The version in use, so that a server that still has it sends nothing
	// until it changes.
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.version}); err != nil {
		return false, err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return got, err
		}
		got = true
		ack := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		refused, ok := c.decide(ctx, resp)
		if !ok {
			return got, ctx.Err()
		}
		if refused != nil {
			ack.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: refused.Error()}
		}
		ack.VersionInfo = c.version
		if err := s.Send(ack); err != nil {
			return got, err
		}
	}
}

// apply makes a response's resources the configuration in use.
func (c *Client) apply(resp *discoveryv3.DiscoveryResponse) error {
	if resp.GetTypeUrl() != TypeURL {
		return fmt.Errorf("xds: a response of type %q; want %s", resp.GetTypeUrl(), TypeURL)
	}
	rcs := make([]*rlspb.RateLimitConfig, 0, len(resp.GetResources()))
	for i, r := range resp.GetResources() {
		rc := &rlspb.RateLimitConfig{}
		if err := r.UnmarshalTo(rc); err != nil {
			return fmt.Errorf("xds: resource %d: %w", i, err)
		}
		rcs = append(rcs, rc)
	}
	cfg, err := rlsconfig.FromXDS(rcs...)
	if err != nil {
		return err
	}
	old := c.cur.Swap(cfg)
	c.version = resp.GetVersionInfo()
	select {
	case <-c.first:
	default:
		close(c.first)
	}
	if old.Digest() != cfg.Digest() {
		rlsconfig.WarnRemoved(c.log, old, cfg)
		c.log.Info("rls config applied from xDS", "version", c.version, "domains", cfg.Domains())
		for _, msg := range cfg.Warnings() {
			c.log.Warn("rls config: accepted but ignored", "detail", msg)
		}
	}
	return nil
}
