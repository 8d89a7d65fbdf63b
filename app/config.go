package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/upstream"
)

// Config is every setting of a sidecar. DefaultConfig gives the documented
// defaults; Register makes each a flag; Validate checks them all.
type Config struct {
	Listen          string             // RESP address: host:port, or unix:PATH
	ListenPerm      string             // a Unix socket's permission bits, octal; empty: as the umask makes them
	Upstream        string             // central Redis address; empty: the in-memory store
	KeyPrefix       string             // prefix of every key written to the upstream
	Policies        string             // the policies file; empty: none
	PoliciesPoll    time.Duration      // how often the policies file is compared; 0: only on Reload
	RequirePass     string             // the password clients must give; empty: none
	LogFormat       string             // text or json
	LogLevel        slog.Level         // the least level logged
	OnFailure       engine.FailureMode // the default failure mode
	UpstreamTimeout time.Duration      // deadline of one round trip to the upstream
	UpstreamTLSCA   string             // PEM file of the upstream's CA; empty: the system's roots
	ShutdownTimeout time.Duration      // how long a shutdown waits for requests being answered
	ShutdownDelay   time.Duration      // how long to keep serving after the signal, before draining; 0: none
	AdminListen     string             // admin HTTP address; "off" or empty: none
	BatchMax        int                // most decisions in one round trip
	BatchInFlight   int                // most round trips in flight
	MaxKeys         int                // the in-memory store's size, in keys
	DenyCacheSize   int                // most refusals remembered
	MaxClients      int                // most client connections
	MaxInputMemory  byteSize           // input all clients may buffer together
	IOLoops         int                // event loops; 0: a goroutine per connection

	// Envoy's rate limit service (gRPC).
	GRPCListen       string        // address; empty: off
	GRPCTLSCert      string        // PEM certificate chain; with GRPCTLSKey, serve TLS
	GRPCTLSKey       string        // PEM private key
	GRPCTLSClientCA  string        // PEM CA that client certificates must chain to; empty: none asked
	GRPCInsecure     bool          // allow a non-loopback address without client certificates
	RLSConfig        string        // directory of envoyproxy/ratelimit YAML files
	RLSConfigPoll    time.Duration // how often to re-read RLSConfig besides file events; 0: events only
	RLSStopOverLimit bool          // charge no descriptor of a call when any is over its limit
	RLSHeaders       rls.Headers   // response headers Envoy is asked to add

	// The HTTP check endpoint.
	HTTPListen    string // address; empty: off
	HTTPKeyHeader string // request header whose value is the key when none is given
	HTTPToken     string // bearer token callers must send; empty: none
	HTTPTLSCert   string // PEM certificate chain; with HTTPTLSKey, serve HTTPS
	HTTPTLSKey    string // PEM private key
	HTTPInsecure  bool   // allow a non-loopback address without TLS or a token
}

// DefaultConfig is the configuration of a sidecar started with no flags.
func DefaultConfig() Config {
	return Config{
		Listen:          "127.0.0.1:6380",
		KeyPrefix:       upstream.DefaultPrefix,
		PoliciesPoll:    2 * time.Second,
		LogFormat:       "text",
		LogLevel:        slog.LevelInfo,
		OnFailure:       engine.FailLocal,
		UpstreamTimeout: 100 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second,
		AdminListen:     "127.0.0.1:9380",
		BatchMax:        1024,
		BatchInFlight:   2,
		MaxKeys:         100_000,
		DenyCacheSize:   50_000,
		MaxClients:      10_000,
		MaxInputMemory:  256 << 20,
		IOLoops:         1,
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
		"how often to check --policies for changes and reload it (`duration`; 0: only on SIGHUP)")
	fs.StringVar(&c.RequirePass, "requirepass", c.RequirePass,
		"`password` clients must give with AUTH (or HELLO ... AUTH) before any other command")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format`: text or json")
	fs.TextVar(&c.LogLevel, "log-level", c.LogLevel, "log `level`: debug, info, warn or error")
	fs.TextVar(&c.OnFailure, "on-upstream-failure", c.OnFailure,
		"what a decision gets when the upstream Redis cannot answer in time, unless its policy says otherwise (`mode`): "+
			"allow, deny, or local (this sidecar's in-memory store enforces the same limits alone)")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", c.UpstreamTimeout,
		"deadline of each round trip to the upstream Redis (`duration`); past it the failure mode decides")
	fs.StringVar(&c.UpstreamTLSCA, "upstream-tls-ca", c.UpstreamTLSCA,
		"PEM `file` of the CA that rediss:// upstream certificates must chain to; empty: the system's roots")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout,
		"on SIGTERM or SIGINT, how long to wait for requests being answered (`duration`)")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", c.ShutdownDelay,
		"on SIGTERM or SIGINT, keep serving for this long before draining (`duration`): for a plain sidecar "+
			"container, stopped at the same time as the application it serves")
	fs.StringVar(&c.AdminListen, "admin-listen", c.AdminListen,
		"`address` of the admin HTTP server: /metrics (Prometheus), /healthz, /readyz; \"off\" disables it")
	fs.IntVar(&c.BatchMax, "batch-max", c.BatchMax, "most decisions sent to the upstream in one round trip (`n`)")
	fs.IntVar(&c.BatchInFlight, "batch-inflight", c.BatchInFlight, "most round trips to the upstream in flight at once (`n`)")
	fs.IntVar(&c.MaxKeys, "max-keys", c.MaxKeys, "most keys the in-memory store keeps, about 300 bytes each (`n`)")
	fs.IntVar(&c.DenyCacheSize, "deny-cache-size", c.DenyCacheSize, "most refusals remembered locally, about 350 bytes each (`n`)")
	fs.IntVar(&c.MaxClients, "max-clients", c.MaxClients, "most client connections at once (`n`)")
	fs.Var(&c.MaxInputMemory, "max-input-memory",
		"most input all clients may have sent and not finished, together (`size`: 256mb, 1gb); past it the client holding the most is closed, as Redis's maxmemory-clients does")
	fs.IntVar(&c.IOLoops, "io-loops", c.IOLoops,
		"event loops serving client connections, a thread each (`n`); the upstream's connection is read on the first; 0: a goroutine per connection, as on systems other than Linux")

	fs.StringVar(&c.GRPCListen, "grpc-listen", c.GRPCListen,
		"`address` to serve Envoy's rate limit service on (gRPC, envoyproxy/ratelimit's port is 8081); empty: off. Needs --rls-config. "+
			"A non-loopback address needs --grpc-tls-client-ca or --grpc-insecure")
	fs.StringVar(&c.GRPCTLSCert, "grpc-tls-cert", c.GRPCTLSCert, "PEM `file` of the gRPC server's certificate chain; with --grpc-tls-key, serve TLS")
	fs.StringVar(&c.GRPCTLSKey, "grpc-tls-key", c.GRPCTLSKey, "PEM `file` of the gRPC server's private key")
	fs.StringVar(&c.GRPCTLSClientCA, "grpc-tls-client-ca", c.GRPCTLSClientCA,
		"PEM `file` of the CA that gRPC clients' certificates must chain to; every client must then present one")
	fs.BoolVar(&c.GRPCInsecure, "grpc-insecure", c.GRPCInsecure,
		"allow --grpc-listen on a non-loopback address without client certificates (a pod-local listener)")
	fs.StringVar(&c.RLSConfig, "rls-config", c.RLSConfig,
		"`directory` of envoyproxy/ratelimit's YAML configuration (every *.yaml, one domain each), watched and reloaded")
	fs.DurationVar(&c.RLSConfigPoll, "rls-config-poll", c.RLSConfigPoll,
		"also re-read --rls-config this often, where the file system reports no changes (`duration`; 0: on changes and SIGHUP only)")
	fs.BoolVar(&c.RLSStopOverLimit, "rls-stop-charging-when-over-limit", c.RLSStopOverLimit,
		"charge no descriptor of a call when any of them is over its limit (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); "+
			"costs a look before the charge, and is not atomic across sidecars")
	fs.TextVar(&c.RLSHeaders, "rls-response-headers", c.RLSHeaders,
		"headers Envoy is asked to add to responses (`set`): off; peer (RateLimit-Limit, -Remaining, -Reset, as LIMIT_RESPONSE_HEADERS_ENABLED); "+
			"draft (the IETF RateLimit-Policy and RateLimit fields, Retry-After when over); both")

	fs.StringVar(&c.HTTPListen, "http-listen", c.HTTPListen,
		"`address` to serve the HTTP check (/v1/check) on for nginx auth_request, Traefik forwardAuth, Envoy ext_authz; empty: off. "+
			"A non-loopback address needs --http-token, --http-tls-cert or --http-insecure")
	fs.StringVar(&c.HTTPKeyHeader, "http-key-header", c.HTTPKeyHeader,
		"request `header` whose value is the key when the check names none, such as X-Forwarded-For (its last address is used)")
	fs.StringVar(&c.HTTPToken, "http-token", c.HTTPToken, "bearer `token` every HTTP check must carry (Authorization: Bearer ...)")
	fs.StringVar(&c.HTTPTLSCert, "http-tls-cert", c.HTTPTLSCert, "PEM `file` of the HTTP check's certificate chain; with --http-tls-key, serve HTTPS")
	fs.StringVar(&c.HTTPTLSKey, "http-tls-key", c.HTTPTLSKey, "PEM `file` of the HTTP check's private key")
	fs.BoolVar(&c.HTTPInsecure, "http-insecure", c.HTTPInsecure,
		"allow --http-listen on a non-loopback address without TLS or a token (a pod-local listener)")
}

// EnvName is the environment variable that sets flag name:
// SLUICE_ and the name in capitals, dashes as underscores.
func EnvName(name string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ApplyEnv sets each flag of fs not given on the command line from its
// variable (EnvName), if getenv has it: a flag given wins.
func ApplyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v := getenv(EnvName(f.Name))
		if err != nil || given[f.Name] || v == "" {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("invalid %s %q: %v", EnvName(f.Name), v, e)
		}
	})
	return err
}

// Validate checks every setting, naming the flag of the first that is
// wrong.
func (c *Config) Validate() error {
	if err := c.validateListen(); err != nil {
		return err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("invalid --log-format %q: must be text or json", c.LogFormat)
	}
	if c.OnFailure == engine.FailDefault {
		return errors.New("invalid --on-upstream-failure: must be allow, deny or local")
	}
	durations := []struct {
		name   string
		d      time.Duration
		zeroOK bool
	}{
		{"policies-poll", c.PoliciesPoll, true},
		{"rls-config-poll", c.RLSConfigPoll, true},
		{"shutdown-timeout", c.ShutdownTimeout, true},
		{"shutdown-delay", c.ShutdownDelay, true},
		{"upstream-timeout", c.UpstreamTimeout, false},
	}
	for _, d := range durations {
		if d.d < 0 || d.d == 0 && !d.zeroOK {
			return fmt.Errorf("invalid --%s %q: must be a positive duration such as 100ms%s", d.name, d.d, orZero(d.zeroOK))
		}
	}
	ints := []struct {
		name   string
		n      int
		zeroOK bool
	}{
		{"batch-max", c.BatchMax, false},
		{"batch-inflight", c.BatchInFlight, false},
		{"max-keys", c.MaxKeys, false},
		{"deny-cache-size", c.DenyCacheSize, false},
		{"max-clients", c.MaxClients, false},
		{"io-loops", c.IOLoops, true},
	}
	for _, n := range ints {
		if n.n < 0 || n.n == 0 && !n.zeroOK {
			return fmt.Errorf("invalid --%s %q: must be a positive integer%s", n.name, strconv.Itoa(n.n), orZero(n.zeroOK))
		}
	}
	if c.MaxInputMemory <= 0 {
		return fmt.Errorf("invalid --max-input-memory %q: must be a positive size such as 256mb", c.MaxInputMemory.String())
	}
	if err := c.validateGRPC(); err != nil {
		return err
	}
	return c.validateHTTP()
}

// validateGRPC is the gRPC door's protected mode. A password is not a gRPC
// thing: beyond loopback, clients prove themselves with certificates, or
// the operator says the address is reachable only from the pod.
func (c *Config) validateGRPC() error {
	if err := pairedFiles("grpc", c.GRPCTLSCert, c.GRPCTLSKey); err != nil {
		return err
	}
	if c.GRPCTLSClientCA != "" && c.GRPCTLSCert == "" {
		return errors.New("invalid --grpc-tls-client-ca: it needs --grpc-tls-cert and --grpc-tls-key, as client certificates are asked for over TLS")
	}
	if c.GRPCListen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.GRPCListen)
	if err != nil {
		return fmt.Errorf("invalid --grpc-listen %q: %v", c.GRPCListen, err)
	}
	if c.RLSConfig == "" {
		return errors.New("--grpc-listen needs --rls-config DIR: the rate limit service answers from envoyproxy/ratelimit's YAML files")
	}
	if isLoopback(host) || c.GRPCTLSClientCA != "" || c.GRPCInsecure {
		return nil
	}
	return fmt.Errorf("refusing to serve gRPC on %q without client certificates: it is reachable from other machines. "+
		"Set --grpc-tls-cert, --grpc-tls-key and --grpc-tls-client-ca, listen on 127.0.0.1, "+
		"or set --grpc-insecure if only this pod can reach the address", c.GRPCListen)
}

// validateHTTP is the HTTP check's protected mode: TLS, a bearer token, or
// the operator's word that the address is pod-local.
func (c *Config) validateHTTP() error {
	if err := pairedFiles("http", c.HTTPTLSCert, c.HTTPTLSKey); err != nil {
		return err
	}
	if c.HTTPListen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.HTTPListen)
	if err != nil {
		return fmt.Errorf("invalid --http-listen %q: %v", c.HTTPListen, err)
	}
	if isLoopback(host) || c.HTTPToken != "" || c.HTTPTLSCert != "" || c.HTTPInsecure {
		return nil
	}
	return fmt.Errorf("refusing to serve the HTTP check on %q unprotected: it is reachable from other machines. "+
		"Set --http-token (SLUICE_HTTP_TOKEN) or --http-tls-cert and --http-tls-key, listen on 127.0.0.1, "+
		"or set --http-insecure if only this pod can reach the address", c.HTTPListen)
}

func pairedFiles(door, cert, key string) error {
	if (cert == "") != (key == "") {
		return fmt.Errorf("invalid --%s-tls-cert and --%s-tls-key: give both or neither", door, door)
	}
	return nil
}

func orZero(ok bool) string {
	if ok {
		return ", or 0"
	}
	return ""
}

// validateListen checks --listen and --listen-perm, and is Redis's
// protected mode: serving beyond this machine without a password would
// hand every quota to anyone who can connect. A Unix socket is reached
// only on this machine, by whom its permissions let in.
func (c *Config) validateListen() error {
	addr := c.Listen
	if path := SocketPath(addr); path != "" {
		_, err := parsePerm(c.ListenPerm)
		return err
	}
	if addr == unixPrefix {
		return fmt.Errorf("invalid --listen %q: want unix:PATH, the socket's path", addr)
	}
	if c.ListenPerm != "" {
		return fmt.Errorf("invalid --listen-perm %q: it applies to a Unix socket (--listen unix:PATH), not to %q", c.ListenPerm, addr)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid --listen %q: %v", addr, err)
	}
	if c.RequirePass != "" || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %q without a password: it is reachable from other machines. "+
		"Set --requirepass (SLUICE_REQUIREPASS), or listen on 127.0.0.1", addr)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
