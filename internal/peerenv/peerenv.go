// Package peerenv reads envoyproxy/ratelimit's environment variables into
// Sluice's settings, so that Sluice started as /bin/ratelimit (or as
// `sluice envoy-ratelimit`) by a platform that deploys the peer — Envoy
// Gateway, Istio's sample — serves what the peer serves with exactly the
// environment written for the peer.
//
// Map is a pure function of the environment: no file is read and nothing
// listens, so a table test covers every variable. Each of the peer's
// variables is in one of three groups (Vars, which docs/gateways.md
// mirrors): mapped onto a setting; accepted and not used (statistics,
// connection pools, timeouts the peer tunes and Sluice does otherwise),
// each named once in a Note; or refused when it asks for what Sluice does
// not offer, with one line naming it. Variables the peer does not read
// are ignored, as the peer ignores them.
//
// Sluice's own protected mode is not applied here: the peer listens on
// every address without asking, and the platforms that run it protect it
// with their NetworkPolicy and TLS settings; in this mode they protect
// Sluice the same way.
package peerenv

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/rlsopts"
	"github.com/sluice-rl/sluice/internal/settings"
)

// OverlayVar is the one variable of Sluice's own read in the peer's
// environment: --rls-overlay's file, which the peer has no setting for.
var OverlayVar = settings.EnvName("rls-overlay")

// Note is a variable that was set and is accepted but not used, with what
// Sluice does instead: said once in the log at start-up.
type Note struct {
	Var, Why string
}

// denyCacheEntryBytes is about what one remembered refusal costs
// (--deny-cache-size's help says the same).
const denyCacheEntryBytes = 350

// respListen is where the RESP door listens in this mode: the peer has no
// such door, so it is on loopback only, at a port the system picks, where
// it neither collides with a port of the peer's nor reaches beyond the pod.
const respListen = "127.0.0.1:0"

// Map turns envoyproxy/ratelimit's environment into Sluice's settings.
// The error is one line naming the first variable that is malformed or
// asks for what Sluice does not offer.
func Map(env map[string]string) (settings.Config, []Note, error) {
	m := &mapper{env: env}
	cfg := settings.Default()
	cfg.Listen = respListen
	m.refusals()
	m.doors(&cfg)
	m.logging(&cfg)
	m.redis(&cfg)
	m.rules(&cfg)
	m.notes()
	if m.err != nil {
		return settings.Config{}, nil, m.err
	}
	return cfg, m.out, nil
}

// mapper reads one environment. Only its first error is kept, so that
// Map's names the first variable found wrong, in one line.
type mapper struct {
	env map[string]string
	err error
	out []Note
}

// str is the variable's value, or the peer's default (Vars) when unset.
// envconfig, the peer's reader, takes an empty value as unset too.
func (m *mapper) str(name string) string {
	if v := m.env[name]; v != "" {
		return v
	}
	return peerDefault(name)
}

func (m *mapper) set(name string) bool { return m.env[name] != "" }

func (m *mapper) fail(name, format string, args ...any) {
	if m.err != nil {
		return
	}
	what := name + "=" + m.env[name]
	if !m.set(name) {
		what = fmt.Sprintf("%s unset (the peer's default is %q)", name, peerDefault(name))
	}
	m.err = fmt.Errorf("%s: %s", what, fmt.Sprintf(format, args...))
}

// bool reads a boolean as the peer's envconfig does (strconv.ParseBool).
func (m *mapper) bool(name string) bool {
	b, err := strconv.ParseBool(m.str(name))
	if err != nil {
		m.fail(name, "must be true or false")
	}
	return b
}

func (m *mapper) port(name string) string {
	v := m.str(name)
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
		m.fail(name, "must be a port number from 0 to 65535")
	}
	return v
}

// addr reads a listening address as the peer's Go server takes it
// (":19001": every interface).
func (m *mapper) addr(name string) string {
	host, port, err := net.SplitHostPort(m.str(name))
	if err != nil {
		m.fail(name, "must be host:port or :port")
		return ""
	}
	if host == "" {
		host = "0.0.0.0"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		m.fail(name, "must end in a port number from 0 to 65535")
	}
	return net.JoinHostPort(host, port)
}

func (m *mapper) duration(name string) time.Duration {
	d, err := time.ParseDuration(m.str(name))
	if err != nil || d <= 0 {
		m.fail(name, "must be a positive duration such as 3s")
	}
	return d
}

// doors maps the peer's three ports and the gRPC port's TLS.
func (m *mapper) doors(cfg *settings.Config) {
	cfg.GRPCListen = net.JoinHostPort(m.str("GRPC_HOST"), m.port("GRPC_PORT"))
	cfg.RLSHTTPListen = net.JoinHostPort(m.str("HOST"), m.port("PORT"))
	cfg.AdminListen = net.JoinHostPort(m.str("DEBUG_HOST"), m.port("DEBUG_PORT"))
	if m.bool("USE_PROMETHEUS") {
		// Where the platform scrapes the peer's metrics (Envoy Gateway's
		// pod annotations name PROMETHEUS_ADDR): Sluice's admin
		// endpoints, /metrics among them, are served there instead.
		cfg.AdminListen = m.addr("PROMETHEUS_ADDR")
		cfg.MetricsPath = m.str("PROMETHEUS_PATH")
		if !strings.HasPrefix(cfg.MetricsPath, "/") {
			m.fail("PROMETHEUS_PATH", "must be a path such as /metrics")
		}
		// The peer's own metrics, for the dashboards written for it.
		cfg.RLSPeerMetrics = true
		cfg.RLSPeerMetricsMapper = m.env["PROMETHEUS_MAPPER_YAML"]
	}
	if r, err := strconv.ParseFloat(m.str("NEAR_LIMIT_RATIO"), 64); err != nil || r < 0 || r > 1 {
		m.fail("NEAR_LIMIT_RATIO", "must be a number from 0 to 1")
	} else {
		cfg.RLSNearLimitRatio = r
	}
	// The platform protects these ports as it protects the peer's.
	cfg.GRPCInsecure = true
	if !m.bool("GRPC_SERVER_USE_TLS") {
		return // the peer reads its certificate variables only with TLS
	}
	cfg.GRPCTLSCert, cfg.GRPCTLSKey = m.env["GRPC_SERVER_TLS_CERT"], m.env["GRPC_SERVER_TLS_KEY"]
	if cfg.GRPCTLSCert == "" || cfg.GRPCTLSKey == "" {
		m.fail("GRPC_SERVER_USE_TLS", "TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	cfg.GRPCTLSClientCA = m.env["GRPC_CLIENT_TLS_CACERT"]
	if m.set("GRPC_CLIENT_TLS_SAN") {
		m.fail("GRPC_CLIENT_TLS_SAN", "Sluice checks that a client certificate chains to GRPC_CLIENT_TLS_CACERT, not its SAN: unset it")
	}
}

// logging maps LOG_LEVEL (logrus's levels, any case) and LOG_FORMAT (json,
// or text for anything else, as the peer).
func (m *mapper) logging(cfg *settings.Config) {
	switch strings.ToLower(m.str("LOG_LEVEL")) {
	case "trace", "debug":
		cfg.LogLevel = slog.LevelDebug
	case "info":
		cfg.LogLevel = slog.LevelInfo
	case "warn", "warning":
		cfg.LogLevel = slog.LevelWarn
	case "error", "fatal", "panic":
		cfg.LogLevel = slog.LevelError
	default:
		m.fail("LOG_LEVEL", "must be trace, debug, info, warn, error, fatal or panic")
	}
	cfg.LogFormat = "text"
	if m.str("LOG_FORMAT") == "json" {
		cfg.LogFormat = "json"
	}
}

// redis maps the peer's Redis variables onto one upstream address.
func (m *mapper) redis(cfg *settings.Config) {
	if b := m.str("BACKEND_TYPE"); !strings.EqualFold(b, "redis") {
		m.fail("BACKEND_TYPE", "Sluice keeps its counts in Redis only: set redis")
		return
	}
	if st := m.str("REDIS_SOCKET_TYPE"); st != "tcp" {
		m.fail("REDIS_SOCKET_TYPE", "Sluice reaches Redis over TCP only: set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port")
		return
	}
	// The peer opens no port until Redis answers (it exits when it
	// cannot reach it), and a platform that deploys it counts on that:
	// the pod is not ready while its limits would not be shared.
	cfg.UpstreamRequired = true
	if d, err := time.ParseDuration(m.str("REDIS_STARTUP_MAX_ELAPSED_TIME")); err != nil || d < 0 {
		m.fail("REDIS_STARTUP_MAX_ELAPSED_TIME", "must be a duration such as 5m, or 0 to wait without end")
	} else {
		cfg.UpstreamRequiredTimeout = d
	}
	scheme := "redis"
	if m.bool("REDIS_TLS") {
		scheme = "rediss"
		cfg.UpstreamTLSCA = m.env["REDIS_TLS_CACERT"]
		// Envoy Gateway sets both when a user gives it a client
		// certificate for Redis (mTLS); the peer reads them only with TLS.
		cfg.UpstreamTLSCert, cfg.UpstreamTLSKey = m.env["REDIS_TLS_CLIENT_CERT"], m.env["REDIS_TLS_CLIENT_KEY"]
		if (cfg.UpstreamTLSCert == "") != (cfg.UpstreamTLSKey == "") {
			name := "REDIS_TLS_CLIENT_KEY"
			if cfg.UpstreamTLSCert == "" {
				name = "REDIS_TLS_CLIENT_CERT"
			}
			m.fail(name, "a client certificate needs REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY both")
		}
		if m.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
			m.fail("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "Sluice always checks Redis's certificate and name: unset it, or set false")
		}
	}
	user := ""
	if auth := m.env["REDIS_AUTH"]; auth != "" {
		// The peer's form: "password" or "user:password".
		name, pass, ok := strings.Cut(auth, ":")
		if !ok {
			name, pass = "", auth
		}
		user = url.UserPassword(name, pass).String() + "@"
	}
	addr := m.str("REDIS_URL")
	hosts := func(list string) {
		for _, h := range strings.Split(list, ",") {
			if _, _, err := net.SplitHostPort(h); err != nil {
				m.fail("REDIS_URL", "with REDIS_SOCKET_TYPE=tcp, write host:port (%q is not)", h)
				return
			}
		}
	}
	switch strings.ToLower(m.str("REDIS_TYPE")) {
	case "single":
		hosts(addr)
		cfg.Upstream = scheme + "://" + user + addr
	case "sentinel":
		// The peer's form: "master,sentinel1:26379,sentinel2:26379".
		master, sentinels, ok := strings.Cut(addr, ",")
		if !ok || master == "" || sentinels == "" {
			m.fail("REDIS_URL", "with REDIS_TYPE=sentinel, write the master's name and the sentinels: mymaster,host1:26379,host2:26379")
			return
		}
		if m.set("REDIS_SENTINEL_AUTH") {
			m.fail("REDIS_SENTINEL_AUTH", "Sluice reaches sentinels without a password: unset it")
		}
		hosts(sentinels)
		cfg.Upstream = scheme + "+sentinel://" + user + sentinels + "/" + master
	case "cluster":
		hosts(addr)
		cfg.Upstream = scheme + "+cluster://" + user + addr
	default:
		m.fail("REDIS_TYPE", "must be single, sentinel or cluster")
	}
}

// rules maps where the rate limit configuration comes from, and the
// answers' options.
func (m *mapper) rules(cfg *settings.Config) {
	force := m.bool("FORCE_START_WITHOUT_INITIAL_CONFIG")
	switch ct := m.str("CONFIG_TYPE"); ct {
	case "FILE":
		cfg.RLSConfig = filepath.Join(m.str("RUNTIME_ROOT"), m.str("RUNTIME_SUBDIRECTORY"), m.str("RUNTIME_APPDIRECTORY"))
		// RUNTIME_WATCH_ROOT and RUNTIME_IGNOREDOTFILES: Sluice watches
		// the directory itself, ConfigMap swaps included, and never reads
		// a dot file, whatever they say; both are read for their syntax.
		m.bool("RUNTIME_WATCH_ROOT")
		m.bool("RUNTIME_IGNOREDOTFILES")
	case "GRPC_XDS_SOTW":
		m.xds(cfg, force)
	default:
		m.fail("CONFIG_TYPE", "must be FILE or GRPC_XDS_SOTW")
	}
	// The peer has no overlay: this one variable is Sluice's own, so that
	// a gateway's Deployment adds it beside the peer's variables to give
	// its rules Sluice's algorithms (docs/gateways.md).
	cfg.RLSOverlay = m.env[OverlayVar]
	cfg.RLSStopOverLimit = m.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	cfg.RLSShadow = m.bool("SHADOW_MODE")
	cfg.RLSReadyWithConfig = m.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	cfg.RLSDynamicMetadata = m.bool("RESPONSE_DYNAMIC_METADATA")
	// The peer's over-limit cache is a freecache of this many bytes;
	// Sluice's deny cache holds about denyCacheEntryBytes per refusal.
	if n, err := strconv.ParseInt(m.str("LOCAL_CACHE_SIZE_IN_BYTES"), 10, 64); err != nil || n < 0 {
		m.fail("LOCAL_CACHE_SIZE_IN_BYTES", "must be a whole number of bytes")
	} else if n > 0 {
		cfg.DenyCacheSize = int(max(1, min(n/denyCacheEntryBytes, 1<<30)))
	}
	if p := m.env["CACHE_KEY_PREFIX"]; p != "" {
		cfg.KeyPrefix = p
	}
	// A rolling update from the peer runs both on one Redis: the rules
	// without Sluice's own fields count in the peer's keys, as it counts.
	cfg.RLSPeerKeys = true
	cfg.RLSPeerKeyPrefix = m.env["CACHE_KEY_PREFIX"]
	if j, err := strconv.ParseInt(m.str("EXPIRATION_JITTER_MAX_SECONDS"), 10, 64); err != nil {
		m.fail("EXPIRATION_JITTER_MAX_SECONDS", "must be a whole number of seconds")
	} else if j > 0 {
		// The peer adds no jitter at 0 or below.
		cfg.RLSPeerKeyJitter = time.Duration(min(j, int64(engine.MaxPeriod/time.Second))) * time.Second
	}
	if m.bool("LIMIT_RESPONSE_HEADERS_ENABLED") {
		cfg.RLSHeaders = rlsopts.HeadersPeer
		for _, v := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
			if !strings.EqualFold(m.str(v), peerDefault(v)) {
				m.fail(v, "Sluice names this header %s, the peer's default: unset it", peerDefault(v))
			}
		}
	}
}

// xds maps CONFIG_TYPE=GRPC_XDS_SOTW's variables onto the xDS settings.
func (m *mapper) xds(cfg *settings.Config, force bool) {
	cfg.RLSXDSServer = m.str("CONFIG_GRPC_XDS_SERVER_URL")
	cfg.RLSXDSNodeID = m.str("CONFIG_GRPC_XDS_NODE_ID")
	cfg.RLSXDSRetry = m.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")
	cfg.RLSXDSStartWithoutConfig = force
	if v := m.env["CONFIG_GRPC_XDS_NODE_METADATA"]; v != "" {
		// The peer's form is Sluice's: key=value,key=value.
		if err := cfg.RLSXDSNodeMetadata.Set(v); err != nil {
			m.fail("CONFIG_GRPC_XDS_NODE_METADATA", "%v", err)
		}
	}
	if v := m.env["CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"]; v != "" {
		// envconfig's map form: key:value,key:value.
		cfg.RLSXDSHeaders = settings.KeyValues{}
		for _, pair := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(pair, ":")
			if !ok || k == "" {
				m.fail("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "%q is no key:value pair", pair)
				break
			}
			cfg.RLSXDSHeaders[k] = val
		}
	}
	if v := m.env["XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			m.fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "must be a positive number of bytes")
		}
		cfg.RLSXDSMaxMessage = settings.ByteSize(n)
	}
	if !m.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		return // the peer reads its TLS variables only with TLS
	}
	cfg.RLSXDSTLS = true
	cfg.RLSXDSTLSCA = m.env["CONFIG_GRPC_XDS_SERVER_TLS_CACERT"]
	cfg.RLSXDSTLSCert, cfg.RLSXDSTLSKey = m.env["CONFIG_GRPC_XDS_CLIENT_TLS_CERT"], m.env["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"]
	cfg.RLSXDSTLSServerName = m.env["CONFIG_GRPC_XDS_SERVER_TLS_SAN"]
}

// refusals are the variables whose every non-default value asks for a
// behaviour Sluice does not offer.
func (m *mapper) refusals() {
	for _, v := range Vars {
		if v.Group == Refused && m.set(v.Name) && m.str(v.Name) != v.Default {
			if b, err := strconv.ParseBool(m.env[v.Name]); err == nil && !b && v.Default == "false" {
				continue // "0", "False": the default, spelt otherwise
			}
			m.fail(v.Name, "%s", v.Use)
		}
	}
}

// switchedOff are the switches of Unused variables, each with the value
// that asks for nothing: USE_STATSD=false asks for no statsd, which Sluice
// sends none of, so it is not worth a note.
var switchedOff = map[string]bool{"USE_STATSD": false, "USE_DOG_STATSD": false,
	"DISABLE_STATS": true, "TRACING_ENABLED": false, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": false}

// notes names each variable set that Sluice accepts and does not use,
// but for a switch set to off.
func (m *mapper) notes() {
	for _, v := range Vars {
		if v.Group != Unused || !m.set(v.Name) {
			continue
		}
		if off, ok := switchedOff[v.Name]; ok {
			if b, err := strconv.ParseBool(m.env[v.Name]); err == nil && b == off {
				continue
			}
		}
		m.out = append(m.out, Note{Var: v.Name, Why: v.Use})
	}
}

// peerDefault is the peer's default of a variable of Vars.
func peerDefault(name string) string {
	i := slices.IndexFunc(Vars, func(v Var) bool { return v.Name == name })
	if i < 0 {
		panic("peerenv: " + name + " is not in Vars") // a programming error, caught by every test
	}
	return Vars[i].Default
}
