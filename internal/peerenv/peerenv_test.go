package peerenv

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/rlsopts"
	"github.com/sluice-rl/sluice/internal/settings"
)

// istio is the environment of Istio's sample (samples/ratelimit/
// rate-limit-service.yaml), as it deploys the peer.
var istio = map[string]string{
	"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false",
	"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
	"RUNTIME_IGNOREDOTFILES": "true", "HOST": "::", "GRPC_HOST": "::",
}

// envoyGateway is the environment of Envoy Gateway's default deployment
// (internal/infrastructure/kubernetes/ratelimit/testdata/deployments/
// default.yaml); GRPC_SERVER_TLS_CA_CERT is not a variable of the peer's.
var envoyGateway = map[string]string{
	"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
	"RUNTIME_WATCH_ROOT": "false", "LOG_LEVEL": "info", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW",
	"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
	"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
	"GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis.svc:6379", "USE_PROMETHEUS": "true",
	"PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
}

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestMapPlatforms(t *testing.T) {
	cfg, notes, err := Map(istio)
	if err != nil {
		t.Fatal(err)
	}
	want := settings.Default()
	want.Listen, want.GRPCListen, want.RLSHTTPListen, want.AdminListen = respListen, "[::]:8081", "[::]:8080", "0.0.0.0:6070"
	want.GRPCInsecure, want.LogLevel, want.Upstream, want.RLSConfig = true, slog.LevelDebug, "redis://redis:6379", "/data/ratelimit/config"
	// The peer's keys, its default jitter of 300 seconds.
	want.RLSPeerKeys, want.RLSPeerKeyJitter = true, 300*time.Second
	// The peer opens no port until Redis answers, waiting without end.
	want.UpstreamRequired, want.UpstreamRequiredTimeout = true, 0
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Istio's sample:\n got %+v\nwant %+v", cfg, want)
	}
	if len(notes) != 0 {
		t.Errorf("Istio's sample: notes %v, want none: USE_STATSD=false asks for nothing Sluice lacks", notes)
	}

	cfg, notes, err = Map(envoyGateway)
	if err != nil {
		t.Fatal(err)
	}
	want = settings.Default()
	// USE_PROMETHEUS: the admin endpoints where Envoy Gateway scrapes.
	want.Listen, want.GRPCListen, want.RLSHTTPListen, want.AdminListen = respListen, "0.0.0.0:8081", "0.0.0.0:8080", "0.0.0.0:19001"
	want.GRPCInsecure, want.LogLevel, want.Upstream = true, slog.LevelInfo, "redis://redis.redis.svc:6379"
	want.GRPCTLSCert, want.GRPCTLSKey = "/certs/tls.crt", "/certs/tls.key" // no client CA: the peer reads none
	want.RLSXDSServer, want.RLSXDSNodeID, want.RLSXDSRetry, want.RLSXDSStartWithoutConfig = "envoy-gateway:18001", "envoy-ratelimit", 3*time.Second, true
	want.RLSXDSTLS, want.RLSXDSTLSCA, want.RLSXDSTLSCert, want.RLSXDSTLSKey = true, "/certs/ca.crt", "/certs/tls.crt", "/certs/tls.key"
	want.RLSPeerKeys, want.RLSPeerKeyJitter, want.UpstreamRequired, want.UpstreamRequiredTimeout = true, 300*time.Second, true, 0
	// USE_PROMETHEUS: the peer's metrics, renamed as its mapper file says.
	want.RLSPeerMetrics, want.RLSPeerMetricsMapper = true, "/etc/statsd-exporter/conf.yaml"
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Envoy Gateway:\n got %+v\nwant %+v", cfg, want)
	}
	var named []string
	for _, n := range notes {
		named = append(named, n.Var)
	}
	if got := strings.Join(named, " "); got != "" {
		t.Errorf("Envoy Gateway: notes %s", got)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Envoy Gateway's settings do not validate: %v", err)
	}
}

// TestMapSettings: one variable at a time over Istio's environment, each
// row the setting it must change.
func TestMapSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		got  func(settings.Config) any
		want any
	}{
		{"ports", with(istio, "HOST", "127.0.0.1", "PORT", "18080", "GRPC_PORT", "18081", "DEBUG_HOST", "::1", "DEBUG_PORT", "16070"),
			func(c settings.Config) any { return c.RLSHTTPListen + " " + c.GRPCListen + " " + c.AdminListen },
			"127.0.0.1:18080 [::]:18081 [::1]:16070"},
		{"prometheus address", with(istio, "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", "127.0.0.1:19001"),
			func(c settings.Config) any { return c.AdminListen }, "127.0.0.1:19001"},
		{"prometheus address without use", with(istio, "PROMETHEUS_ADDR", ":19001"),
			func(c settings.Config) any { return c.AdminListen }, "0.0.0.0:6070"},
		{"prometheus path and mapper", with(istio, "USE_PROMETHEUS", "true", "PROMETHEUS_PATH", "/stats", "PROMETHEUS_MAPPER_YAML", "/m.yaml"),
			func(c settings.Config) any {
				return fmt.Sprint(c.MetricsPath, c.RLSPeerMetrics, c.RLSPeerMetricsMapper)
			}, "/statstrue/m.yaml"},
		{"prometheus path without use", with(istio, "PROMETHEUS_PATH", "/stats", "PROMETHEUS_MAPPER_YAML", "/m.yaml"),
			func(c settings.Config) any {
				return fmt.Sprint(c.MetricsPath, c.RLSPeerMetrics, c.RLSPeerMetricsMapper)
			}, "/metricsfalse"},
		{"near limit ratio", with(istio, "NEAR_LIMIT_RATIO", "0.5"),
			func(c settings.Config) any { return c.RLSNearLimitRatio }, 0.5},
		{"dynamic metadata", with(istio, "RESPONSE_DYNAMIC_METADATA", "true"),
			func(c settings.Config) any { return c.RLSDynamicMetadata }, true},
		// A refusal per 350 bytes: the peer's 1 MiB freecache is 2,995.
		{"local cache", with(istio, "LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
			func(c settings.Config) any { return c.DenyCacheSize }, 2995},
		{"local cache off: Sluice's default", with(istio, "LOCAL_CACHE_SIZE_IN_BYTES", "0"),
			func(c settings.Config) any { return c.DenyCacheSize }, settings.Default().DenyCacheSize},
		{"client CA", with(istio, "GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "c", "GRPC_SERVER_TLS_KEY", "k", "GRPC_CLIENT_TLS_CACERT", "ca"),
			func(c settings.Config) any { return c.GRPCTLSCert + c.GRPCTLSKey + c.GRPCTLSClientCA }, "ckca"},
		{"certificates without TLS are not read", with(istio, "GRPC_SERVER_TLS_CERT", "c", "GRPC_SERVER_TLS_KEY", "k"),
			func(c settings.Config) any { return c.GRPCTLSCert }, ""},
		{"log level warning", with(istio, "LOG_LEVEL", "Warning"), func(c settings.Config) any { return c.LogLevel }, slog.LevelWarn},
		{"log level default", with(istio, "LOG_LEVEL", ""), func(c settings.Config) any { return c.LogLevel }, slog.LevelWarn},
		{"log level trace", with(istio, "LOG_LEVEL", "TRACE"), func(c settings.Config) any { return c.LogLevel }, slog.LevelDebug},
		{"log format json", with(istio, "LOG_FORMAT", "json"), func(c settings.Config) any { return c.LogFormat }, "json"},
		{"log format other", with(istio, "LOG_FORMAT", "logfmt"), func(c settings.Config) any { return c.LogFormat }, "text"},
		{"redis auth", with(istio, "REDIS_AUTH", "s3cr:et"), func(c settings.Config) any { return c.Upstream }, "redis://s3cr:et@redis:6379"},
		{"redis password", with(istio, "REDIS_AUTH", "p@ss"), func(c settings.Config) any { return c.Upstream }, "redis://:p%40ss@redis:6379"},
		{"redis startup max elapsed time", with(istio, "REDIS_STARTUP_MAX_ELAPSED_TIME", "45s"), func(c settings.Config) any { return c.UpstreamRequiredTimeout }, 45 * time.Second},
		{"redis tls", with(istio, "REDIS_TLS", "true", "REDIS_TLS_CACERT", "ca.pem"),
			func(c settings.Config) any { return c.Upstream + " " + c.UpstreamTLSCA }, "rediss://redis:6379 ca.pem"},
		{"redis CA without TLS", with(istio, "REDIS_TLS_CACERT", "ca.pem"), func(c settings.Config) any { return c.UpstreamTLSCA }, ""},
		{"redis client certificate", with(istio, "REDIS_TLS", "true", "REDIS_TLS_CLIENT_CERT", "tls.crt", "REDIS_TLS_CLIENT_KEY", "tls.key"),
			func(c settings.Config) any { return c.UpstreamTLSCert + " " + c.UpstreamTLSKey }, "tls.crt tls.key"},
		{"redis client certificate without TLS", with(istio, "REDIS_TLS_CLIENT_CERT", "tls.crt", "REDIS_TLS_CLIENT_KEY", "tls.key"),
			func(c settings.Config) any { return c.UpstreamTLSCert }, ""}, // the peer reads it only with TLS
		{"sentinel", with(istio, "REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster,s1:26379,s2:26379"),
			func(c settings.Config) any { return c.Upstream }, "redis+sentinel://s1:26379,s2:26379/mymaster"},
		{"cluster", with(istio, "REDIS_TYPE", "CLUSTER", "REDIS_URL", "c1:7000,c2:7001", "REDIS_TLS", "1"),
			func(c settings.Config) any { return c.Upstream }, "rediss+cluster://c1:7000,c2:7001"},
		{"runtime dirs", with(istio, "RUNTIME_ROOT", "/srv", "RUNTIME_SUBDIRECTORY", "", "RUNTIME_APPDIRECTORY", "rl"),
			func(c settings.Config) any { return c.RLSConfig }, "/srv/rl"},
		{"runtime default", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379"}, func(c settings.Config) any { return c.RLSConfig }, "/srv/runtime_data/current/config"},
		{"shadow", with(istio, "SHADOW_MODE", "true"), func(c settings.Config) any { return c.RLSShadow }, true},
		{"ready with config", with(istio, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"), func(c settings.Config) any { return c.RLSReadyWithConfig }, true},
		{"stop increment", with(istio, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"), func(c settings.Config) any { return c.RLSStopOverLimit }, true},
		{"headers", with(istio, "LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_RESET_HEADER", "ratelimit-reset"),
			func(c settings.Config) any { return c.RLSHeaders }, rlsopts.HeadersPeer},
		{"key prefix", with(istio, "CACHE_KEY_PREFIX", "rl_"), func(c settings.Config) any { return c.KeyPrefix }, "rl_"},
		{"key prefix unset", istio, func(c settings.Config) any { return c.KeyPrefix }, settings.Default().KeyPrefix},
		{"peer key prefix", with(istio, "CACHE_KEY_PREFIX", "rl_"), func(c settings.Config) any { return c.RLSPeerKeyPrefix }, "rl_"},
		{"peer key prefix unset: the peer's empty one", istio, func(c settings.Config) any { return c.RLSPeerKeyPrefix }, ""},
		{"jitter", with(istio, "EXPIRATION_JITTER_MAX_SECONDS", "7"), func(c settings.Config) any { return c.RLSPeerKeyJitter }, 7 * time.Second},
		{"no jitter at 0", with(istio, "EXPIRATION_JITTER_MAX_SECONDS", "0"), func(c settings.Config) any { return c.RLSPeerKeyJitter }, time.Duration(0)},
		{"none below 0, as the peer", with(istio, "EXPIRATION_JITTER_MAX_SECONDS", "-5"), func(c settings.Config) any { return c.RLSPeerKeyJitter }, time.Duration(0)},
		{"refused variable at its default", with(istio, "MERGE_DOMAIN_CONFIG", "False", "REDIS_PERSECOND", "0"),
			func(c settings.Config) any { return c.Upstream }, "redis://redis:6379"},
		{"xds headers and metadata", with(envoyGateway, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "authorization:Bearer x,x-team:rl",
			"CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,ver=1=2", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "250ms", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "eg"),
			func(c settings.Config) any {
				return c.RLSXDSHeaders.String() + " " + c.RLSXDSNodeMetadata.String() + " " + c.RLSXDSRetry.String() + " " + c.RLSXDSTLSServerName
			}, "authorization=Bearer x,x-team=rl ver=1=2,zone=a 250ms eg"},
		{"xds message size", with(envoyGateway, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "8388608"),
			func(c settings.Config) any { return c.RLSXDSMaxMessage }, settings.ByteSize(8 << 20)},
		{"xds without TLS reads no TLS files", with(envoyGateway, "CONFIG_GRPC_XDS_SERVER_USE_TLS", "false"),
			func(c settings.Config) any { return c.RLSXDSTLSCA + c.RLSXDSTLSCert }, ""},
		{"xds defaults", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW"},
			func(c settings.Config) any { return c.RLSXDSServer + " " + c.RLSXDSNodeID + " " + c.RLSConfig }, "localhost:18000 default "},
		{"Sluice's overlay beside the peer's variables", with(envoyGateway, "SLUICE_RLS_OVERLAY", "/overlay/rules.yaml"),
			func(c settings.Config) any { return c.RLSOverlay + " " + c.RLSXDSServer }, "/overlay/rules.yaml " + envoyGateway["CONFIG_GRPC_XDS_SERVER_URL"]},
		{"unknown variables ignored", with(istio, "GRPC_SERVER_TLS_CA_CERT", "x", "SLUICE_LISTEN", "0.0.0.0:1"),
			func(c settings.Config) any { return c.Listen }, respListen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := Map(tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.got(cfg); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMapNotes: a variable accepted and not used is named, a switch set
// to off is not.
func TestMapNotes(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{with(istio, "USE_STATSD", "true", "STATSD_HOST", "statsd"), "USE_STATSD STATSD_HOST"},
		{with(istio, "USE_STATSD", "0", "DISABLE_STATS", "true", "TRACING_ENABLED", "false"), ""},
		{with(istio, "REDIS_POOL_SIZE", "20", "GRPC_MAX_CONNECTION_AGE", "1h", "DISABLE_STATS", "false"), "GRPC_MAX_CONNECTION_AGE DISABLE_STATS REDIS_POOL_SIZE"},
	} {
		_, notes, err := Map(tc.env)
		if err != nil {
			t.Fatal(err)
		}
		var named []string
		for _, n := range notes {
			named = append(named, n.Var)
		}
		if got := strings.Join(named, " "); got != tc.want {
			t.Errorf("notes %q, want %q", got, tc.want)
		}
	}
}

// TestMapRefuses: each a one-line error naming the variable.
func TestMapRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"per second redis", with(istio, "REDIS_PERSECOND", "true"), "REDIS_PERSECOND=true: Sluice keeps every limit in one Redis: unset it, or set false"},
		{"merge domains", with(istio, "MERGE_DOMAIN_CONFIG", "true"), "MERGE_DOMAIN_CONFIG=true: Sluice takes one file per domain: unset it, or set false"},
		{"quota mode", with(istio, "QUOTA_MODE", "true"), "QUOTA_MODE=true: "},
		{"dynamic metadata", with(istio, "RESPONSE_DYNAMIC_METADATA", "yes"), "RESPONSE_DYNAMIC_METADATA=yes: must be true or false"},
		{"near limit ratio", with(istio, "NEAR_LIMIT_RATIO", "1.5"), "NEAR_LIMIT_RATIO=1.5: must be a number from 0 to 1"},
		{"local cache", with(istio, "LOCAL_CACHE_SIZE_IN_BYTES", "1mb"), "LOCAL_CACHE_SIZE_IN_BYTES=1mb: must be a whole number of bytes"},
		{"response time in milliseconds", with(istio, "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true"), "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true: Sluice reports"},
		{"grpc uds", with(istio, "GRPC_UDS", "/tmp/rl.sock"), "GRPC_UDS=/tmp/rl.sock: Sluice serves gRPC on TCP only"},
		{"unix redis by default", map[string]string{}, `REDIS_SOCKET_TYPE unset (the peer's default is "unix"): Sluice reaches Redis over TCP only: set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port`},
		{"memcache", with(istio, "BACKEND_TYPE", "memcache"), "BACKEND_TYPE=memcache: Sluice keeps its counts in Redis only"},
		{"jitter", with(istio, "EXPIRATION_JITTER_MAX_SECONDS", "1.5"), "EXPIRATION_JITTER_MAX_SECONDS=1.5: must be a whole number of seconds"},
		{"redis socket path over tcp", map[string]string{"REDIS_SOCKET_TYPE": "tcp"},
			`REDIS_URL unset (the peer's default is "/var/run/nutcracker/ratelimit.sock"): with REDIS_SOCKET_TYPE=tcp, write host:port`},
		{"cluster node without port", with(istio, "REDIS_TYPE", "cluster", "REDIS_URL", "c1:7000,c2"), `REDIS_URL=c1:7000,c2: with REDIS_SOCKET_TYPE=tcp, write host:port ("c2" is not)`},
		{"redis type", with(istio, "REDIS_TYPE", "twemproxy"), "REDIS_TYPE=twemproxy: must be single, sentinel or cluster"},
		{"prometheus path", with(istio, "USE_PROMETHEUS", "true", "PROMETHEUS_PATH", "stats"), "PROMETHEUS_PATH=stats: must be a path such as /metrics"},
		{"prometheus address", with(istio, "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", "19001"), "PROMETHEUS_ADDR=19001: must be host:port or :port"},
		{"sentinel url", with(istio, "REDIS_TYPE", "sentinel"), "REDIS_URL=redis:6379: with REDIS_TYPE=sentinel, write the master's name and the sentinels"},
		{"sentinel auth", with(istio, "REDIS_TYPE", "sentinel", "REDIS_URL", "m,s:1", "REDIS_SENTINEL_AUTH", "x"), "REDIS_SENTINEL_AUTH=x: "},
		{"redis client cert without its key", with(istio, "REDIS_TLS", "true", "REDIS_TLS_CLIENT_CERT", "c"), "REDIS_TLS_CLIENT_KEY unset (the peer's default is \"\"): a client certificate needs REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY both"},
		{"skip hostname", with(istio, "REDIS_TLS", "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"), "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true: "},
		{"tls without files", with(istio, "GRPC_SERVER_USE_TLS", "true"), "GRPC_SERVER_USE_TLS=true: TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{"client SAN", with(istio, "GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "c", "GRPC_SERVER_TLS_KEY", "k", "GRPC_CLIENT_TLS_SAN", "eg"), "GRPC_CLIENT_TLS_SAN=eg: "},
		{"bad bool", with(istio, "SHADOW_MODE", "on"), "SHADOW_MODE=on: must be true or false"},
		{"bad port", with(istio, "GRPC_PORT", "80801"), "GRPC_PORT=80801: must be a port number"},
		{"bad log level", with(istio, "LOG_LEVEL", "loud"), "LOG_LEVEL=loud: must be trace, debug"},
		{"config type", with(istio, "CONFIG_TYPE", "GRPC_XDS_DELTA"), "CONFIG_TYPE=GRPC_XDS_DELTA: must be FILE or GRPC_XDS_SOTW"},
		{"header name", with(istio, "LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_LIMIT_HEADER", "X-RL-Limit"), "LIMIT_LIMIT_HEADER=X-RL-Limit: Sluice names this header RateLimit-Limit"},
		{"xds retry", with(envoyGateway, "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3"), "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=3: must be a positive duration"},
		{"xds message size", with(envoyGateway, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "4mb"), "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=4mb: must be a positive number of bytes"},
		{"xds headers", with(envoyGateway, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "a=b"), `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=a=b: "a=b" is no key:value pair`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Map(tc.env)
			if err == nil {
				t.Fatalf("accepted, want %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line starting %q", err, tc.want)
			}
		})
	}
}

// TestVarsDocumented: docs/gateways.md's table names every variable of
// Vars with its default, so that the page cannot fall behind the code.
func TestVarsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/gateways.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, v := range Vars {
		if seen[v.Name] {
			t.Errorf("%s twice in Vars", v.Name)
		}
		seen[v.Name] = true
		row := "| `" + v.Name + "` | " + docDefault(v.Default) + " |"
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/gateways.md lacks the row %q", row)
		}
	}
}

func docDefault(d string) string {
	if d == "" {
		return "(empty)"
	}
	return "`" + d + "`"
}
