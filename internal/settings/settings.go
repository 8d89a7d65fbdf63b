// Package settings is the sidecar's one table of settings: each flag, its
// SLUICE_* variable, its default and its validation. The binary parses its
// command line with it, package app builds a sidecar from the Config it
// fills, and the injector (package inject) renders a container's
// arguments from it. It is a package of its own so that the injector
// needs only the table, not the whole sidecar; and it is a leaf: what it
// knows of the store and of the gRPC door (the upstream's address, the
// door's choices and caps) comes from internal/redisurl and
// internal/rlsopts, so that neither it nor the injector links a door, a
// store or a Redis or gRPC client (tests/imports_test.go holds it so).
//
// A setting that can be switched off is switched off by the word "off"
// (--admin-listen off, --grpc-listen off, --rls-response-headers off): an
// empty SLUICE_* variable reads as unset, so "off" is the one spelling
// that works on the command line, in the environment and in a pod's
// annotations alike. An empty address, the older spelling, still means
// off. A duration of 0 means "never" where its help says so.
package settings

import (
	"flag"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisurl"
	"github.com/sluice-rl/sluice/internal/rlsopts"
)

// Config is every setting of a sidecar. DefaultConfig gives the documented
// defaults; Register makes each a flag; Validate checks them all.
type Config struct {
	Listen          string             // RESP address: host:port, or unix:PATH
	ListenPerm      string             // a Unix socket's permission bits, octal; empty: as the umask makes them
	Upstream        string             // central Redis address; empty: the in-memory store
	KeyPrefix       string             // prefix of every key written to the upstream
	Policies        string             // the policies file; empty: none
	PoliciesPoll    time.Duration      // how often the policies file is also compared, besides file events; 0: events only
	RequirePass     string             // the password clients must give; empty: none
	LogFormat       string             // text or json
	LogLevel        slog.Level         // the least level logged
	OnFailure       engine.FailureMode // the default failure mode
	LocalShare      LocalShare         // what the local failure mode enforces: this sidecar's share, or the whole limit
	UpstreamTimeout time.Duration      // deadline of one round trip to the upstream
	Durable         engine.Durability  // the durability of requests under no policy (inline commands, gateway rules)
	DurableReplicas int                // how many replicas must acknowledge a durable charge
	UpstreamTLSCA   string             // PEM file of the upstream's CA; empty: the system's roots
	UpstreamTLSCert string             // PEM client certificate chain toward the upstream; with UpstreamTLSKey
	UpstreamTLSKey  string             // its private key
	// UpstreamRequired makes start-up wait for the upstream (at most
	// UpstreamRequiredTimeout, then fail) and readiness follow it.
	UpstreamRequired        bool
	UpstreamRequiredTimeout time.Duration // 0: wait without end
	UpstreamEvictionCheck   time.Duration // how often the masters' eviction policy is read; 0: at start only
	ShutdownTimeout         time.Duration // how long a shutdown waits for requests being answered
	ShutdownDelay           time.Duration // how long to keep serving after the signal, before draining; 0: none
	AdminListen             string        // admin HTTP address; empty: none (the flag's "off")
	// AdminOptional makes a taken AdminListen a warning rather than a
	// failure: Finish sets it when the address is the default, not one
	// asked for, so that a second sidecar on one machine starts.
	AdminOptional  bool
	BatchMax       int      // most decisions in one round trip
	BatchInFlight  int      // most round trips in flight
	MaxKeys        int      // the in-memory store's size, in keys
	DenyCacheSize  int      // most refusals remembered
	Grants         bool     // hot keys decided from units the upstream granted this sidecar
	MaxClients     int      // most client connections
	MaxInputMemory ByteSize // input all clients may buffer together
	IOLoops        int      // event loops; 0: a goroutine per connection

	// MaxReservations bounds the reservations (RL.RESERVE) held open.
	MaxReservations int

	// Envoy's rate limit service (gRPC).
	GRPCListen         string            // address; empty: off (the flag's "off")
	GRPCTLSCert        string            // PEM certificate chain; with GRPCTLSKey, serve TLS
	GRPCTLSKey         string            // PEM private key
	GRPCTLSClientCA    string            // PEM CA that client certificates must chain to; empty: none asked
	GRPCInsecure       bool              // allow a non-loopback address without client certificates
	GRPCExplain        bool              // answer x-sluice-explain request metadata with explanations
	GRPCTransport      rlsopts.Transport // the gRPC server: Sluice's own, or grpc-go's
	GRPCMaxConns       int               // most gRPC connections at once
	GRPCIdleTimeout    time.Duration     // GOAWAY to a gRPC connection with no call open this long; 0: never
	RLSConfig          string            // directory of envoyproxy/ratelimit YAML files
	RLSConfigPoll      time.Duration     // how often to re-read RLSConfig besides file events; 0: events only
	RLSOverlay         string            // a file giving the rules Sluice's algorithms and periods (rlsconfig.Overlay); empty: none
	RLSStopOverLimit   bool              // charge no descriptor of a call when any is over its limit
	RLSHeaders         rlsopts.Headers   // response headers Envoy is asked to add
	RLSShadow          bool              // every rule in shadow mode: counted, never refused (the peer's SHADOW_MODE)
	RLSPeerKeys        bool              // count rules without Sluice's own fields in envoyproxy/ratelimit's keys
	RLSPeerKeyPrefix   string            // starts the peer's keys (its CACHE_KEY_PREFIX)
	RLSPeerKeyJitter   time.Duration     // most added to a peer key's TTL (its EXPIRATION_JITTER_MAX_SECONDS)
	RLSReadyWithConfig bool              // not ready while no domain is configured (the peer's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)
	RLSHTTPListen      string            // address of the peer's HTTP port (/json, /healthcheck); empty: off
	RLSMaxDescriptors  int               // most descriptors in one ShouldRateLimit call
	RLSMaxEntries      int               // most entries in one descriptor

	// The peer's answers and metrics beyond its decisions (peer.go).
	RLSDynamicMetadata   bool    // return the peer's response dynamic metadata
	RLSPeerMetrics       bool    // serve the peer's Prometheus metrics beside Sluice's
	RLSPeerMetricsMapper string  // a statsd mapper file that renames the peer's metrics; empty: its default names
	RLSNearLimitRatio    float64 // the peer's near-limit threshold, a share of the limit
	MetricsPath          string  // the admin port's path of /metrics

	// The rate limit service's configuration over xDS, instead of RLSConfig.
	RLSXDSServer             string        // management server address; empty: none
	RLSXDSNodeID             string        // the node's id; empty: "default", as the peer's
	RLSXDSNodeMetadata       KeyValues     // the node's metadata
	RLSXDSHeaders            KeyValues     // gRPC metadata sent on the stream
	RLSXDSTLS                bool          // TLS to the server, with the system's roots unless RLSXDSTLSCA
	RLSXDSTLSCA              string        // PEM CA the server's certificate must chain to
	RLSXDSTLSCert            string        // PEM client certificate chain (mTLS); with RLSXDSTLSKey
	RLSXDSTLSKey             string        // PEM client private key
	RLSXDSTLSServerName      string        // name checked in the server's certificate; empty: the address's host
	RLSXDSRetry              time.Duration // first wait before reconnecting or refusing a resent version again; doubles to a minute
	RLSXDSStartWithoutConfig bool          // serve before the first configuration arrives
	RLSXDSMaxMessage         ByteSize      // largest xDS response accepted

	// The HTTP check endpoint.
	HTTPListen    string // address; empty: off (the flag's "off")
	HTTPKeyHeader string // request header whose value is the key when none is given
	HTTPToken     string // bearer token callers must send; empty: none
	HTTPTLSCert   string // PEM certificate chain; with HTTPTLSKey, serve HTTPS
	HTTPTLSKey    string // PEM private key
	HTTPInsecure  bool   // allow a non-loopback address without TLS or a token
	HTTPMaxConns  int    // most HTTP check connections at once

	Record Recording // decision inputs recorded for sluice simulate

	env map[string]bool // the flags Finish set from their SLUICE_* variables, named so in errors
}

// Default is the configuration of a sidecar started with no flags.
func Default() Config {
	return Config{
		Listen:                  "127.0.0.1:6380",
		KeyPrefix:               redisurl.DefaultPrefix,
		PoliciesPoll:            2 * time.Second,
		LogFormat:               "text",
		LogLevel:                slog.LevelInfo,
		OnFailure:               engine.FailLocal,
		UpstreamTimeout:         100 * time.Millisecond,
		DurableReplicas:         1,
		UpstreamRequiredTimeout: 30 * time.Second,
		UpstreamEvictionCheck:   15 * time.Second,
		ShutdownTimeout:         10 * time.Second,
		AdminListen:             "127.0.0.1:9380",
		BatchMax:                1024,
		BatchInFlight:           2,
		MaxKeys:                 100_000,
		MaxReservations:         100_000,
		DenyCacheSize:           50_000,
		MaxClients:              10_000,
		HTTPMaxConns:            1024,
		MaxInputMemory:          256 << 20,
		IOLoops:                 1,

		GRPCMaxConns:      rlsopts.DefaultMaxConns,
		RLSMaxDescriptors: rlsopts.DefaultMaxDescriptors,
		RLSMaxEntries:     rlsopts.DefaultMaxEntries,
		RLSNearLimitRatio: 0.8,
		MetricsPath:       "/metrics",
		RLSXDSRetry:       3 * time.Second,
		RLSXDSMaxMessage:  64 << 20,

		Record: Recording{Sample: 1, MaxRate: 50_000, MaxSize: 64 << 20, Keep: 2, Keys: "hashed"},
	}
}

// Register makes every setting a flag of fs, bound to c's field and
// defaulting to its current value. The flags are the one table of
// settings: --help, the SLUICE_* variables (EnvName) and the injector's
// container arguments all come from it.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen,
		"`address` to serve RESP on: host:port, or unix:PATH for a Unix socket. A non-loopback address needs --requirepass")
	fs.StringVar(&c.ListenPerm, "listen-perm", c.ListenPerm,
		"permission `bits` of a unix: --listen socket, in octal (660: its owner and group may connect); empty: as the umask makes them")
	fs.StringVar(&c.Upstream, "upstream", c.Upstream,
		"central Redis `address` (see below); empty: the in-memory store, limits local to this process")
	fs.StringVar(&c.KeyPrefix, "key-prefix", c.KeyPrefix,
		"`prefix` of every key Sluice writes to the upstream Redis")
	fs.StringVar(&c.Policies, "policies", c.Policies,
		"YAML `file` of named policies for RL.ALLOW; a bad file stops start-up")
	fs.DurationVar(&c.PoliciesPoll, "policies-poll", c.PoliciesPoll,
		"also compare --policies with the policies in use this often, where the file system reports no changes (`duration`; 0: on changes and SIGHUP only)")
	fs.StringVar(&c.RequirePass, "requirepass", c.RequirePass,
		"`password` clients must give with AUTH (or HELLO ... AUTH) before any other command")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format`: text or json")
	fs.TextVar(&c.LogLevel, "log-level", c.LogLevel, "log `level`: debug, info, warn or error")
	fs.TextVar(&c.OnFailure, "on-upstream-failure", c.OnFailure,
		"what a decision gets when the upstream Redis cannot answer in time, unless its policy says otherwise (`mode`): "+
			"allow, deny, or local (this sidecar's in-memory store enforces its share of each limit alone: --local-share)")
	fs.TextVar(&c.LocalShare, "local-share", c.LocalShare,
		"what the local failure mode enforces in this sidecar while the upstream Redis cannot answer (`share`): "+
			"fleet, 1/N of each limit, N the live sidecars Redis last counted (each says it is alive every second), so that the fleet admits about the limit; "+
			"or whole, the whole limit in every sidecar, which N sidecars admit N times over")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", c.UpstreamTimeout,
		"deadline of each round trip to the upstream Redis (`duration`); past it the failure mode decides")
	fs.TextVar(&c.Durable, "durable", c.Durable,
		"answer the requests of no named policy (inline commands, gateway rules) only once a replica holds their charges (`durability`): "+
			"none, replica (WAIT) or disk (WAITAOF, Redis 7.2); a policy says its own with durable:")
	fs.IntVar(&c.DurableReplicas, "durable-replicas", c.DurableReplicas,
		"how many replicas must acknowledge a durable request's charge before it is answered (`n`)")
	fs.StringVar(&c.UpstreamTLSCA, "upstream-tls-ca", c.UpstreamTLSCA,
		"PEM `file` of the CA that rediss:// upstream certificates must chain to; empty: the system's roots")
	fs.StringVar(&c.UpstreamTLSCert, "upstream-tls-cert", c.UpstreamTLSCert,
		"PEM `file` of the client certificate chain presented to a rediss:// upstream that asks for one (tls-auth-clients); "+
			"with --upstream-tls-key. Read again when it changes: new connections present the new pair")
	fs.StringVar(&c.UpstreamTLSKey, "upstream-tls-key", c.UpstreamTLSKey, "PEM `file` of --upstream-tls-cert's private key")
	fs.BoolVar(&c.UpstreamRequired, "upstream-required", c.UpstreamRequired,
		"wait at start-up until the upstream Redis answers, listening on no port meanwhile, and fail after --upstream-required-timeout "+
			"naming the cause; then report not ready (/readyz) while it cannot be used, whatever the failure mode (as envoyproxy/ratelimit)")
	fs.DurationVar(&c.UpstreamRequiredTimeout, "upstream-required-timeout", c.UpstreamRequiredTimeout,
		"with --upstream-required, how long start-up waits for the upstream Redis before it fails (`duration`; 0: without end)")
	fs.DurationVar(&c.UpstreamEvictionCheck, "upstream-eviction-check", c.UpstreamEvictionCheck,
		"how often to read every master's maxmemory-policy and evicted_keys, besides at start (`duration`; 0: at start only): "+
			"a policy that can evict Sluice's keys resets their limits, and is warned of")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout,
		"on SIGTERM or SIGINT, how long to wait for requests being answered (`duration`)")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", c.ShutdownDelay,
		"on SIGTERM or SIGINT, keep serving for this long before draining (`duration`): for a plain sidecar "+
			"container, stopped at the same time as the application it serves")
	fs.Var((*offAddr)(&c.AdminListen), "admin-listen",
		"`address` of the admin HTTP server: /metrics (Prometheus), /healthz, /readyz; off: none. "+
			"Left at its default and taken (a second sidecar on this machine), it is off with a warning")
	fs.IntVar(&c.BatchMax, "batch-max", c.BatchMax, "most decisions sent to the upstream in one round trip (`n`)")
	fs.IntVar(&c.BatchInFlight, "batch-inflight", c.BatchInFlight, "most round trips to the upstream in flight at once, per master on Redis Cluster (`n`)")
	fs.IntVar(&c.MaxKeys, "max-keys", c.MaxKeys, "most keys the in-memory store keeps, about 300 bytes each with 128-byte keys, 430 for a sliding log; past it a key's count can be evicted and forgotten (`n`)")
	fs.IntVar(&c.MaxReservations, "max-reservations", c.MaxReservations,
		"most reservations (RL.RESERVE, the HTTP check's reserve=N) this sidecar holds open, about 350 bytes each with 128-byte keys (`n`); past it a reservation is refused with an error")
	fs.IntVar(&c.DenyCacheSize, "deny-cache-size", c.DenyCacheSize, "most refusals remembered locally, about 350 bytes each (`n`)")
	fs.BoolVar(&c.Grants, "grants", c.Grants,
		"decide a hot key (one this sidecar decides often) from units the upstream Redis grants this sidecar, with no round trip, "+
			"exactly: the fleet never admits more than the limit; units held in one sidecar's grant may refuse another's request meanwhile (docs/operating.md#grants)")
	fs.IntVar(&c.MaxClients, "max-clients", c.MaxClients, "most client connections at once (`n`)")
	fs.Var(&c.MaxInputMemory, "max-input-memory",
		"most input and unread replies all clients may hold, together (`size`: 256mb, 1gb): an argument is charged its announced length as it starts; past it the client holding the most is closed, as Redis's maxmemory-clients does")
	fs.IntVar(&c.IOLoops, "io-loops", c.IOLoops,
		"event loops serving client connections, a thread each (`n`); the upstream's connection is read on the first; 0: a goroutine per connection, as on systems other than Linux")

	fs.Var((*offAddr)(&c.GRPCListen), "grpc-listen",
		"`address` to serve Envoy's rate limit service on (gRPC, envoyproxy/ratelimit's port is 8081), or off. Needs --rls-config or --rls-xds-server. "+
			"A non-loopback address needs --grpc-tls-client-ca or --grpc-insecure")
	fs.StringVar(&c.GRPCTLSCert, "grpc-tls-cert", c.GRPCTLSCert, "PEM `file` of the gRPC server's certificate chain; with --grpc-tls-key, serve TLS")
	fs.StringVar(&c.GRPCTLSKey, "grpc-tls-key", c.GRPCTLSKey, "PEM `file` of the gRPC server's private key")
	fs.StringVar(&c.GRPCTLSClientCA, "grpc-tls-client-ca", c.GRPCTLSClientCA,
		"PEM `file` of the CA that gRPC clients' certificates must chain to; every client must then present one")
	fs.BoolVar(&c.GRPCInsecure, "grpc-insecure", c.GRPCInsecure,
		"allow --grpc-listen on a non-loopback address without client certificates (a pod-local listener)")
	fs.BoolVar(&c.GRPCExplain, "grpc-explain", c.GRPCExplain,
		"answer a rate limit call that carries the metadata x-sluice-explain with each descriptor's explanation in the response header "+
			"x-sluice-explanation; off by default, so that nothing a gateway forwards can ask")
	fs.TextVar(&c.GRPCTransport, "grpc-transport", c.GRPCTransport,
		"the gRPC door's server (`name`): own (Sluice's HTTP/2 transport, the default: about half grpc-go's CPU per call) or grpc-go")
	fs.IntVar(&c.GRPCMaxConns, "grpc-max-conns", c.GRPCMaxConns,
		"most gRPC connections at once (`n`); one more is sent GOAWAY and closed")
	fs.DurationVar(&c.GRPCIdleTimeout, "grpc-idle-timeout", c.GRPCIdleTimeout,
		"send GOAWAY to a gRPC connection that has had no call open this long (`duration`), as grpc-go's MaxConnectionIdle; 0: never")
	fs.StringVar(&c.RLSConfig, "rls-config", c.RLSConfig,
		"`directory` of envoyproxy/ratelimit's YAML configuration (every *.yaml, one domain each), watched and reloaded")
	fs.DurationVar(&c.RLSConfigPoll, "rls-config-poll", c.RLSConfigPoll,
		"also compare --rls-config with the configuration in use this often, where the file system reports no changes (`duration`; 0: on changes and SIGHUP only)")
	fs.StringVar(&c.RLSOverlay, "rls-overlay", c.RLSOverlay,
		"YAML `file` giving rules of --rls-config or --rls-xds-server Sluice's algorithms, periods and bursts, by domain, descriptor path or name: "+
			"what a gateway's configuration cannot say. Watched as --rls-config (and --rls-config-poll); a bad file stops start-up, a bad change keeps the one in use")
	fs.BoolVar(&c.RLSStopOverLimit, "rls-stop-charging-when-over-limit", c.RLSStopOverLimit,
		"charge no descriptor of a call when any of them is over its limit (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); "+
			"costs a look before the charge, and is not atomic across sidecars")
	fs.TextVar(&c.RLSHeaders, "rls-response-headers", c.RLSHeaders,
		"headers Envoy is asked to add to responses (`set`): off; peer (RateLimit-Limit, -Remaining, -Reset, as LIMIT_RESPONSE_HEADERS_ENABLED); "+
			"draft (the IETF RateLimit-Policy and RateLimit fields, Retry-After when over); both")
	fs.BoolVar(&c.RLSShadow, "rls-shadow", c.RLSShadow,
		"answer every descriptor OK, counting it and reporting what it would have been (envoyproxy/ratelimit's SHADOW_MODE)")
	fs.BoolVar(&c.RLSReadyWithConfig, "rls-ready-with-config", c.RLSReadyWithConfig,
		"report not ready (/readyz, /healthcheck, gRPC health) while the rate limit service's configuration has no domain, "+
			"such as before xDS has sent one (envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)")
	fs.BoolVar(&c.RLSPeerKeys, "rls-peer-keys", c.RLSPeerKeys,
		"count the rules without Sluice's own fields (algorithm, period, burst) in envoyproxy/ratelimit's keys, its count and expiry, "+
			"so that its pods and Sluice's share one count on one Redis during a rolling update (on by default when started as ratelimit)")
	fs.StringVar(&c.RLSPeerKeyPrefix, "rls-peer-key-prefix", c.RLSPeerKeyPrefix,
		"`prefix` of envoyproxy/ratelimit's keys with --rls-peer-keys: its CACHE_KEY_PREFIX (empty by default, as the peer's)")
	fs.DurationVar(&c.RLSPeerKeyJitter, "rls-peer-key-jitter", c.RLSPeerKeyJitter,
		"with --rls-peer-keys, lengthen each key's TTL by a random part of this, in whole seconds (`duration`): the peer's EXPIRATION_JITTER_MAX_SECONDS")
	fs.Var((*offAddr)(&c.RLSHTTPListen), "rls-http-listen",
		"`address` to serve envoyproxy/ratelimit's HTTP port on (its 8080): /json answers a rate limit request written in JSON, "+
			"/healthcheck the readiness; or off. Needs --grpc-listen; a non-loopback address needs --grpc-insecure")
	fs.IntVar(&c.RLSMaxDescriptors, "rls-max-descriptors", c.RLSMaxDescriptors,
		"most descriptors in one rate limit call (`n`); a call with more is refused INVALID_ARGUMENT, naming the cap")
	fs.IntVar(&c.RLSMaxEntries, "rls-max-entries", c.RLSMaxEntries,
		"most entries in one descriptor of a rate limit call (`n`); a descriptor with more is refused INVALID_ARGUMENT, naming the cap")
	c.registerXDS(fs)
	c.registerPeer(fs)

	fs.Var((*offAddr)(&c.HTTPListen), "http-listen",
		"`address` to serve the HTTP check (/v1/check) on for nginx auth_request, Traefik forwardAuth, Envoy ext_authz, or off. "+
			"A non-loopback address needs --http-token, --http-tls-cert or --http-insecure")
	fs.StringVar(&c.HTTPKeyHeader, "http-key-header", c.HTTPKeyHeader,
		"request `header` whose value is the key when the check names none, such as X-Forwarded-For (its last address is used)")
	fs.StringVar(&c.HTTPToken, "http-token", c.HTTPToken, "bearer `token` every HTTP check must carry (Authorization: Bearer ...)")
	fs.StringVar(&c.HTTPTLSCert, "http-tls-cert", c.HTTPTLSCert, "PEM `file` of the HTTP check's certificate chain; with --http-tls-key, serve HTTPS")
	fs.StringVar(&c.HTTPTLSKey, "http-tls-key", c.HTTPTLSKey, "PEM `file` of the HTTP check's private key")
	fs.IntVar(&c.HTTPMaxConns, "http-max-conns", c.HTTPMaxConns,
		"most HTTP check connections at once (`n`); past it a new one is answered 503 and closed")
	fs.BoolVar(&c.HTTPInsecure, "http-insecure", c.HTTPInsecure,
		"allow --http-listen on a non-loopback address without TLS or a token (a pod-local listener)")
	c.registerRecord(fs)
}

// NewLogger is the logger the settings ask for, writing to w. Durations
// are written as Go writes them ("100ms"), not as nanoseconds.
func (c *Config) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
