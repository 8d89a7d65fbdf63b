// Command sluice runs the Sluice rate limiter: a RESP server on localhost
// that any Redis client can ask for rate-limit decisions, keeping its state
// in a central Redis (--upstream) or, without one, in memory.
//
// This is the composition root: flags and SLUICE_* environment variables
// become Config structs, the logger is made here and injected, and signals
// become a draining Shutdown. Nothing below it reads flags or globals.
package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/policy"
	"github.com/sluice-rl/sluice/respserver"
	"github.com/sluice-rl/sluice/telemetry"
	"github.com/sluice-rl/sluice/upstream"
)

func main() {
	tuneGC(os.Getenv)
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stderr))
}

// defaultGCPercent is the collector's target unless GOGC says otherwise.
// Sluice's live heap is small (a few MB in front of Redis, tens of MB with
// a full in-memory store) while every decision allocates a little, so
// Go's default of 100 collects often for little: at 400, the sidecar
// spent about a tenth less CPU per decision (redis-benchmark -P 16
// through Redis, three runs side by side with each setting), for a heap
// that may grow to five times the live one. GOMEMLIMIT caps it where
// memory is tight.
const defaultGCPercent = 400

func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// options are the parsed flags.
type options struct {
	listen          string
	upstream        string
	keyPrefix       string
	policies        string
	requirePass     string
	logFormat       string
	logLevel        string
	onFailure       engine.FailureMode
	shutdownTimeout time.Duration
	policiesPoll    time.Duration
	adminListen     string
	upstreamTimeout time.Duration
	upstreamTLSCA   string
	batchMax        int
	batchInFlight   int
	maxKeys         int
	denyCacheSize   int
	maxClients      int
	ioLoops         int // 0: a goroutine per connection
}

const usageHead = `Usage: sluice [flags]

Sluice is a rate limiter that speaks the Redis protocol. Point any Redis
client (or redis-cli) at --listen and send RL.* or CL.THROTTLE commands.
Every flag can also be set by the environment variable shown in brackets;
a flag given on the command line wins.

Flags:
`

const usageTail = `
Upstream address forms (--upstream):
  redis://[user:pass@]host:6379[/db]          one Redis server
  rediss://...                                the same over TLS
  redis+sentinel://host1:26379,host2:26379/mymaster
                                              Sentinel: the sentinels, then the master name
  redis+cluster://host1:7000,host2:7001       Redis Cluster: seed nodes
  (rediss+sentinel:// and rediss+cluster:// use TLS; query parameters are
  go-redis's: ?dial_timeout=1s&read_timeout=500ms&pool_size=20 ...)
`

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&o.listen, "listen", env("SLUICE_LISTEN", "127.0.0.1:6380"),
		"`address` to serve RESP on. A non-loopback address needs --requirepass [SLUICE_LISTEN]")
	fs.StringVar(&o.upstream, "upstream", env("SLUICE_UPSTREAM", ""),
		"central Redis `address` (see below); empty: the in-memory store, limits local to this process [SLUICE_UPSTREAM]")
	fs.StringVar(&o.keyPrefix, "key-prefix", env("SLUICE_KEY_PREFIX", upstream.DefaultPrefix),
		"`prefix` of every key Sluice writes to the upstream Redis [SLUICE_KEY_PREFIX]")
	fs.StringVar(&o.policies, "policies", env("SLUICE_POLICIES", ""),
		"YAML `file` of named policies for RL.ALLOW; a bad file stops start-up [SLUICE_POLICIES]")
	fs.StringVar(&o.requirePass, "requirepass", env("SLUICE_REQUIREPASS", ""),
		"`password` clients must give with AUTH (or HELLO ... AUTH) before any other command [SLUICE_REQUIREPASS]")
	fs.StringVar(&o.logFormat, "log-format", env("SLUICE_LOG_FORMAT", "text"),
		"log `format`: text or json [SLUICE_LOG_FORMAT]")
	fs.StringVar(&o.logLevel, "log-level", env("SLUICE_LOG_LEVEL", "info"),
		"log `level`: debug, info, warn or error [SLUICE_LOG_LEVEL]")
	onFailure := env("SLUICE_ON_UPSTREAM_FAILURE", "local")
	fs.StringVar(&onFailure, "on-upstream-failure", onFailure,
		"what a decision gets when the upstream Redis cannot answer in time, unless its policy says otherwise (`mode`): "+
			"allow, deny, or local (this sidecar's in-memory store enforces the same limits alone) [SLUICE_ON_UPSTREAM_FAILURE]")
	poll := env("SLUICE_POLICIES_POLL", "2s")
	fs.StringVar(&poll, "policies-poll", poll,
		"how often to check --policies for changes and reload it (`duration`; 0: only on SIGHUP) [SLUICE_POLICIES_POLL]")
	timeout := env("SLUICE_SHUTDOWN_TIMEOUT", "10s")
	fs.StringVar(&timeout, "shutdown-timeout", timeout,
		"on SIGTERM or SIGINT, how long to wait for requests being answered (`duration`) [SLUICE_SHUTDOWN_TIMEOUT]")
	fs.StringVar(&o.adminListen, "admin-listen", env("SLUICE_ADMIN_LISTEN", "127.0.0.1:9380"),
		"`address` of the admin HTTP server: /metrics (Prometheus), /healthz, /readyz; \"off\" disables it [SLUICE_ADMIN_LISTEN]")
	upTimeout := env("SLUICE_UPSTREAM_TIMEOUT", "100ms")
	fs.StringVar(&upTimeout, "upstream-timeout", upTimeout,
		"deadline of each round trip to the upstream Redis (`duration`); past it the failure mode decides [SLUICE_UPSTREAM_TIMEOUT]")
	fs.StringVar(&o.upstreamTLSCA, "upstream-tls-ca", env("SLUICE_UPSTREAM_TLS_CA", ""),
		"PEM `file` of the CA that rediss:// upstream certificates must chain to; empty: the system's roots [SLUICE_UPSTREAM_TLS_CA]")
	ints := []struct {
		dst       *int
		name, env string
		def       int
		usage     string
		zeroOK    bool
	}{
		{&o.batchMax, "batch-max", "SLUICE_BATCH_MAX", 1024, "most decisions sent to the upstream in one round trip (`n`) [SLUICE_BATCH_MAX]", false},
		{&o.batchInFlight, "batch-inflight", "SLUICE_BATCH_INFLIGHT", 1, "most round trips to the upstream in flight at once (`n`) [SLUICE_BATCH_INFLIGHT]", false},
		{&o.maxKeys, "max-keys", "SLUICE_MAX_KEYS", 100_000, "most keys the in-memory store keeps, about 300 bytes each (`n`) [SLUICE_MAX_KEYS]", false},
		{&o.denyCacheSize, "deny-cache-size", "SLUICE_DENY_CACHE_SIZE", 50_000, "most refusals remembered locally, about 350 bytes each (`n`) [SLUICE_DENY_CACHE_SIZE]", false},
		{&o.maxClients, "max-clients", "SLUICE_MAX_CLIENTS", 10_000, "most client connections at once (`n`) [SLUICE_MAX_CLIENTS]", false},
		{&o.ioLoops, "io-loops", "SLUICE_IO_LOOPS", 1, "event loops serving client connections, a thread each (`n`); 0: a goroutine per connection, as on systems other than Linux [SLUICE_IO_LOOPS]", true},
	}
	intText := make([]string, len(ints))
	for i, f := range ints {
		intText[i] = env(f.env, strconv.Itoa(f.def))
		fs.StringVar(&intText[i], f.name, intText[i], f.usage)
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
		fmt.Fprint(stderr, usageTail)
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: sluice takes only flags (see --help)", fs.Arg(0))
	}
	d, err := time.ParseDuration(timeout)
	if err != nil || d < 0 {
		return o, fmt.Errorf("invalid --shutdown-timeout %q: must be a duration such as 10s", timeout)
	}
	o.shutdownTimeout = d
	if o.policiesPoll, err = time.ParseDuration(poll); err != nil || o.policiesPoll < 0 {
		return o, fmt.Errorf("invalid --policies-poll %q: must be a duration such as 2s, or 0", poll)
	}
	if o.onFailure, err = engine.ParseFailureMode(onFailure); err != nil {
		return o, fmt.Errorf("invalid --on-upstream-failure %q: must be allow, deny or local", onFailure)
	}
	if o.upstreamTimeout, err = time.ParseDuration(upTimeout); err != nil || o.upstreamTimeout <= 0 {
		return o, fmt.Errorf("invalid --upstream-timeout %q: must be a positive duration such as 100ms", upTimeout)
	}
	for i, f := range ints {
		n, err := strconv.Atoi(intText[i])
		if err != nil || n < 0 || n == 0 && !f.zeroOK {
			if f.zeroOK {
				return o, fmt.Errorf("invalid --%s %q: must be a positive integer, or 0", f.name, intText[i])
			}
			return o, fmt.Errorf("invalid --%s %q: must be a positive integer", f.name, intText[i])
		}
		*f.dst = n
	}
	return o, nil
}

func newLogger(o options, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: must be debug, info, warn or error", o.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("invalid --log-format %q: must be text or json", o.logFormat)
}

// checkListen is Redis's protected mode: serving beyond this machine
// without a password would hand every quota to anyone who can connect.
func checkListen(addr, pass string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid --listen %q: %v", addr, err)
	}
	if pass != "" {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("refusing to listen on %q without a password: it is reachable from other machines. "+
		"Set --requirepass (SLUICE_REQUIREPASS), or listen on 127.0.0.1", addr)
}

// newUpstreamClient turns --upstream into a go-redis client, using
// go-redis's own URL parsers for the options.
func newUpstreamClient(addr string) (redis.UniversalClient, string, error) {
	return newUpstreamClientTLS(addr, nil)
}

// loadCA reads --upstream-tls-ca: the CA a private Redis's certificate
// chains to, which the system's roots do not hold.
func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("invalid --upstream-tls-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("invalid --upstream-tls-ca %q: no PEM certificate in it", path)
	}
	return roots, nil
}

// newUpstreamClientTLS is newUpstreamClient; roots, when not nil, are the
// CAs that a rediss:// server's certificate must chain to. Every client
// honours its context's deadline (--upstream-timeout): go-redis otherwise
// waits out its own 3s read timeout on a Redis that accepts connections but
// does not answer (paused, overloaded), and every request with it.
func newUpstreamClientTLS(addr string, roots *x509.CertPool) (redis.UniversalClient, string, error) {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return nil, "", fmt.Errorf("invalid --upstream %q: expected redis://host:port, redis+sentinel://… or redis+cluster://…", addr)
	}
	base, kind, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, "", fmt.Errorf("invalid --upstream %q: scheme must be redis, rediss, redis+sentinel, redis+cluster, rediss+sentinel or rediss+cluster", addr)
	}
	if roots != nil && base != "rediss" {
		return nil, "", fmt.Errorf("invalid --upstream-tls-ca: --upstream %q does not use TLS (rediss://)", redactedHosts(addr))
	}
	// A comma-separated host list becomes go-redis's addr= parameters.
	userHosts, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		userHosts, pathQuery = rest[:i], rest[i:]
	}
	userinfo, hosts := "", userHosts
	if i := strings.LastIndex(userHosts, "@"); i >= 0 {
		userinfo, hosts = userHosts[:i+1], userHosts[i+1:]
	}
	list := strings.Split(hosts, ",")
	path, query, _ := strings.Cut(pathQuery, "?")
	var extra []string
	for _, h := range list[1:] {
		extra = append(extra, "addr="+h)
	}
	switch kind {
	case "":
		if len(list) > 1 {
			return nil, "", fmt.Errorf("invalid --upstream %q: several hosts need redis+sentinel:// or redis+cluster://", addr)
		}
		opt, err := redis.ParseURL(addr)
		if err != nil {
			return nil, "", fmt.Errorf("invalid --upstream: %w", err)
		}
		if roots != nil {
			opt.TLSConfig.RootCAs = roots
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), "standalone", nil
	case "sentinel":
		master := strings.Trim(path, "/")
		if master == "" {
			return nil, "", fmt.Errorf("invalid --upstream %q: a Sentinel address ends with the master name: redis+sentinel://host:26379/mymaster", addr)
		}
		extra = append(extra, "master_name="+master)
		u := base + "://" + userinfo + list[0] + "?" + joinQuery(query, extra)
		opt, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, "", fmt.Errorf("invalid --upstream: %w", err)
		}
		if roots != nil {
			opt.TLSConfig.RootCAs = roots
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(opt), "sentinel", nil
	case "cluster":
		u := base + "://" + userinfo + list[0] + "?" + joinQuery(query, extra)
		opt, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, "", fmt.Errorf("invalid --upstream: %w", err)
		}
		if roots != nil {
			opt.TLSConfig.RootCAs = roots
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opt), "cluster", nil
	}
	return nil, "", fmt.Errorf("invalid --upstream %q: unknown kind %q (sentinel or cluster)", addr, kind)
}

func joinQuery(q string, extra []string) string {
	parts := extra
	if q != "" {
		parts = append([]string{q}, extra...)
	}
	return strings.Join(parts, "&")
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	o, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	log, err := newLogger(o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	if err := serve(ctx, o, log); err != nil {
		log.Error("sluice stopped", "err", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, o options, log *slog.Logger) error {
	// Catch SIGTERM before anything listens: a signal that arrives once a
	// client can connect must drain, not kill.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	if err := checkListen(o.listen, o.requirePass); err != nil {
		return err
	}
	mem, err := engine.NewMemoryStore(engine.MemoryConfig{MaxKeys: o.maxKeys})
	if err != nil {
		return err
	}
	tel, tracer, closeTel, err := newTelemetry(ctx, o)
	if err != nil {
		return err
	}
	defer closeTel()
	var (
		store engine.Store = mem
		chain *upstreamChain
	)
	if o.upstream == "" {
		log.Info("no --upstream: using the in-memory store; limits apply to this process only")
	} else {
		if chain, err = newUpstreamChain(o, mem, tel, log); err != nil {
			return err
		}
		defer chain.close()
		store = chain.guard
	}
	var (
		policies engine.Policies
		live     *policy.Live
	)
	if o.policies != "" {
		set, err := policy.Load(o.policies)
		if err != nil {
			return err
		}
		log.Info("policies loaded", "file", o.policies, "count", set.Len(), "names", set.Names())
		live = policy.NewLive(set)
		policies = live
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go watchPolicies(wctx, o.policies, o.policiesPoll, hup, live, log)
	}
	srv, err := respserver.New(respserver.Config{
		Store: store, Policies: policies, RequirePass: o.requirePass, Logger: log,
		MaxConns: o.maxClients, Observer: tel, Info: infoSections(o, mem, chain, live), Tracer: tracer,
		Loops: cmp.Or(o.ioLoops, -1),
	})
	if err != nil {
		return err
	}
	sources := telemetry.Sources{Clients: srv.Clients, Memory: mem.Len}
	if chain != nil {
		sources.DenyCache, sources.Guard, sources.Batcher = chain.deny.Stats, chain.guard.Stats, chain.batcher.Stats
	}
	tel.SetSources(sources)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	log.Info("listening", "addr", ln.Addr().String(), "version", respserver.Version, "auth", o.requirePass != "")
	stopAdmin, err := serveAdmin(o, tel, chain, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopAdmin()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	case sig := <-sigs:
		log.Info("shutting down: draining connections", "signal", sig.String(), "timeout", o.shutdownTimeout)
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown did not drain in time", "err", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, respserver.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// watchPolicies reloads the policies file on SIGHUP, and when its size or
// modification time changes (a Kubernetes ConfigMap update swaps a symlink,
// which os.Stat follows). A file that no longer parses is logged and the
// policies in use are kept: a typo must not take limits away.
func watchPolicies(ctx context.Context, path string, every time.Duration, hup <-chan os.Signal, live *policy.Live, log *slog.Logger) {
	stamp := func() string {
		fi, err := os.Stat(path)
		if err != nil {
			return "missing"
		}
		return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	}
	last := stamp()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-tick:
			if now := stamp(); now == last {
				continue
			}
		}
		last = stamp()
		set, err := policy.Load(path)
		if err != nil {
			log.Error("policies not reloaded: keeping the ones in use", "err", err)
			continue
		}
		live.Replace(set)
		log.Info("policies reloaded", "file", path, "count", set.Len(), "names", set.Names())
	}
}

// upstreamChain is what stands in front of the central Redis: the Redis
// store; the batcher, so that all connections' decisions share round
// trips; the deny cache, so that a refused key is refused locally until
// its retry-after; and the guard, which answers by each request's failure
// mode (the in-memory store enforcing limits locally, by default) while
// Redis cannot.
type upstreamChain struct {
	kind    string
	ping    func(context.Context) error
	batcher *engine.Batcher
	deny    *engine.DenyCache
	guard   *engine.Guard
	close   func()
}

func newUpstreamChain(o options, mem *engine.MemoryStore, tel *telemetry.Telemetry, log *slog.Logger) (*upstreamChain, error) {
	var roots *x509.CertPool
	if o.upstreamTLSCA != "" {
		var err error
		if roots, err = loadCA(o.upstreamTLSCA); err != nil {
			return nil, err
		}
	}
	client, kind, err := newUpstreamClientTLS(o.upstream, roots)
	if err != nil {
		return nil, err
	}
	up, err := upstream.New(upstream.Config{Client: client, Prefix: o.keyPrefix})
	if err != nil {
		client.Close()
		return nil, err
	}
	batcher, err := engine.NewBatcher(engine.BatcherConfig{Store: up, MaxBatch: o.batchMax,
		MaxInFlight: o.batchInFlight, Timeout: o.upstreamTimeout, OnBatch: tel.ObserveBatch})
	if err != nil {
		client.Close()
		return nil, err
	}
	ping := func(ctx context.Context) error { return client.Ping(ctx).Err() }
	c := &upstreamChain{kind: kind, ping: ping, batcher: batcher, close: func() {
		batcher.Close()
		client.Close()
	}}
	if c.deny, err = engine.NewDenyCache(engine.DenyCacheConfig{Store: batcher, MaxEntries: o.denyCacheSize}); err != nil {
		c.close()
		return nil, err
	}
	c.guard, err = engine.NewGuard(engine.GuardConfig{
		Store: c.deny, Local: mem, Default: o.onFailure,
		OnBreaker: func(open bool, cause error) {
			if open {
				log.Warn("upstream Redis failing: deciding by each request's failure mode", "err", cause, "default", o.onFailure.String())
			} else {
				log.Info("upstream Redis answering again")
			}
		},
	})
	if err != nil {
		c.close()
		return nil, err
	}
	// Resets made through any sidecar reach this one: drop what it
	// remembers of the key, the refusal and the fallback's local count.
	subCtx, stopSub := context.WithCancel(context.Background())
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		up.Subscribe(subCtx, func(key string) {
			c.deny.Forget(key)
			_ = mem.Reset(subCtx, key)
		})
	}()
	closeChain := c.close
	c.close = func() {
		stopSub()
		<-subDone
		closeChain()
	}
	log.Info("using the upstream Redis", "kind", kind, "addrs", redactedHosts(o.upstream),
		"key_prefix", o.keyPrefix, "on_upstream_failure", o.onFailure.String(),
		"upstream_timeout", o.upstreamTimeout, "batch_max", o.batchMax, "batch_inflight", o.batchInFlight,
		"deny_cache_size", o.denyCacheSize)
	return c, nil
}

// newTelemetry sets up metrics (Prometheus, and OTLP when configured) and,
// when an OTLP endpoint is configured, batch traces.
func newTelemetry(ctx context.Context, o options) (*telemetry.Telemetry, trace.Tracer, func(), error) {
	tracer, stopTraces, err := telemetry.TracerFromEnv(ctx, os.Getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	var readers []sdkmetric.Reader
	reader, err := telemetry.MetricReaderFromEnv(ctx, os.Getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	if reader != nil {
		readers = append(readers, reader)
	}
	tel, err := telemetry.New(telemetry.Config{Tracer: tracer, Upstream: redactedHosts(o.upstream),
		Parent: telemetry.TraceParent(os.Getenv), Readers: readers})
	if err != nil {
		return nil, nil, nil, err
	}
	return tel, tracer, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = stopTraces(sctx)
		_ = tel.Shutdown(sctx)
	}, nil
}

// ready is /readyz: Sluice can decide unless the upstream is failing and
// the default failure mode refuses everything. While the breaker is open
// it asks Redis itself, so that a pod taken out of service (and so sent no
// requests that would probe) still becomes ready when Redis is back.
func ready(o options, chain *upstreamChain) func() error {
	return func() error {
		if chain == nil || o.onFailure != engine.FailClosed || !chain.guard.Stats().BreakerOpen {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.upstreamTimeout)
		defer cancel()
		if err := chain.ping(ctx); err != nil {
			return fmt.Errorf("the upstream Redis is not answering (%v) and --on-upstream-failure is deny", err)
		}
		return nil
	}
}

// serveAdmin starts the admin HTTP server, unless --admin-listen is off.
func serveAdmin(o options, tel *telemetry.Telemetry, chain *upstreamChain, log *slog.Logger) (func(), error) {
	if o.adminListen == "off" || o.adminListen == "" {
		return func() {}, nil
	}
	// The admin port shows counts and health, never keys or decisions on
	// demand, so unlike the RESP port it may listen beyond loopback (a
	// Prometheus in another pod scrapes it) without a password.
	ln, err := net.Listen("tcp", o.adminListen)
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	tel.SetReady(ready(o, chain))
	hs := &http.Server{Handler: tel.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	log.Info("admin endpoints", "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}, nil
}

// infoSections are INFO's Sluice sections: INFO sluice shows them all.
func infoSections(o options, mem *engine.MemoryStore, chain *upstreamChain, live *policy.Live) []respserver.InfoSection {
	itoa := func(n uint64) string { return strconv.FormatUint(n, 10) }
	secs := []respserver.InfoSection{{Name: "Memory", Fields: func() [][2]string {
		return [][2]string{{"memory_store_keys", strconv.Itoa(mem.Len())}, {"memory_store_max_keys", strconv.Itoa(o.maxKeys)}}
	}}}
	secs = append(secs, respserver.InfoSection{Name: "Policies", Fields: func() [][2]string {
		if live == nil {
			return [][2]string{{"policies", "0"}, {"policies_file", ""}}
		}
		set := live.Current()
		return [][2]string{{"policies", strconv.Itoa(set.Len())}, {"policies_file", o.policies},
			{"policy_names", strings.Join(set.Names(), ",")}}
	}})
	if chain == nil {
		return append(secs, respserver.InfoSection{Name: "Upstream", Fields: func() [][2]string {
			return [][2]string{{"upstream", "none"}}
		}})
	}
	secs = append(secs,
		respserver.InfoSection{Name: "Upstream", Fields: func() [][2]string {
			g := chain.guard.Stats()
			open := "0"
			if g.BreakerOpen {
				open = "1"
			}
			return [][2]string{{"upstream", chain.kind}, {"upstream_addrs", redactedHosts(o.upstream)},
				{"upstream_timeout_ms", strconv.FormatInt(o.upstreamTimeout.Milliseconds(), 10)},
				{"breaker_open", open}, {"fallback_decisions", itoa(g.Fallbacks)},
				{"on_upstream_failure", o.onFailure.String()}}
		}},
		respserver.InfoSection{Name: "Batcher", Fields: func() [][2]string {
			b := chain.batcher.Stats()
			avg := "0"
			if b.Batches > 0 {
				avg = strconv.FormatFloat(float64(b.Decisions)/float64(b.Batches), 'f', 2, 64)
			}
			return [][2]string{{"batches", itoa(b.Batches)}, {"batched_decisions", itoa(b.Decisions)},
				{"avg_batch_size", avg}, {"batch_max", strconv.Itoa(o.batchMax)}, {"batch_inflight", strconv.Itoa(o.batchInFlight)}}
		}},
		respserver.InfoSection{Name: "Denycache", Fields: func() [][2]string {
			d := chain.deny.Stats()
			return [][2]string{{"deny_cache_hits", itoa(d.Hits)}, {"deny_cache_misses", itoa(d.Misses)},
				{"deny_cache_evictions", itoa(d.Evictions)}, {"deny_cache_entries", strconv.Itoa(d.Entries)},
				{"deny_cache_size", strconv.Itoa(o.denyCacheSize)}}
		}})
	return secs
}

// redactedHosts is --upstream without its password, for the log.
func redactedHosts(addr string) string {
	_, rest, _ := strings.Cut(addr, "://")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexAny(rest, "?"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
