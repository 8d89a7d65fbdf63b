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
	"github.com/sluice-rl/sluice/upstream"
)

// Config is every setting of a sidecar. DefaultConfig gives the documented
// defaults; Register makes each a flag; Validate checks them all.
type Config struct {
	Listen          string             // RESP address
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
		BatchInFlight:   1,
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
		"`address` to serve RESP on. A non-loopback address needs --requirepass")
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
		"event loops serving client connections, a thread each (`n`); 0: a goroutine per connection, as on systems other than Linux")
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
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("invalid --listen %q: %v", c.Listen, err)
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
	return checkListen(c.Listen, c.RequirePass)
}

func orZero(ok bool) string {
	if ok {
		return ", or 0"
	}
	return ""
}

// checkListen is Redis's protected mode: serving beyond this machine
// without a password would hand every quota to anyone who can connect.
func checkListen(addr, pass string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid --listen %q: %v", addr, err)
	}
	if pass != "" || isLoopback(host) {
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
