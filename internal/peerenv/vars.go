package peerenv

// Group is what Sluice does with a variable of the peer's.
type Group int

const (
	// Mapped variables become Sluice's settings (see Map).
	Mapped Group = iota
	// Unused variables are accepted and not used; one set is named in a
	// Note. They tune what Sluice does its own way (statistics, pools,
	// timeouts), and no answer changes with them.
	Unused
	// Refused variables stop start-up when set to anything but the peer's
	// default: they ask for answers or a store Sluice does not offer.
	Refused
	// Ignored variables are read by the peer only with a setting that is
	// refused (the memcache backend), so they never matter here.
	Ignored
)

// Var is one of envoyproxy/ratelimit's environment variables: its name and
// default as its src/settings/settings.go declares them, and what Sluice
// does with it (for Unused and Refused ones, the sentence logged or
// refused with). docs/gateways.md carries this table.
type Var struct {
	Name, Default string
	Group         Group
	Use           string
}

// Sluice's metrics are not the peer's statistics.
const statsUse = "not used: Sluice's metrics are served at /metrics (Prometheus) on DEBUG_HOST:DEBUG_PORT, or on PROMETHEUS_ADDR with USE_PROMETHEUS=true, and by OTLP with OTEL_EXPORTER_OTLP_*"

// Sluice's traces are OpenTelemetry's, set up by OpenTelemetry's variables.
const tracingUse = "not used: Sluice traces when the OTEL_EXPORTER_OTLP_* variables are set, as OpenTelemetry's SDKs do"

// Vars is every variable the peer reads, in the order of its settings.
var Vars = []Var{
	{"HOST", "0.0.0.0", Mapped, "HTTP port's host: /healthcheck and /json (--rls-http-listen)"},
	{"PORT", "8080", Mapped, "HTTP port's port"},
	{"DEBUG_HOST", "0.0.0.0", Mapped, "admin port's host: /metrics, /healthz, /readyz (--admin-listen); no pprof"},
	{"DEBUG_PORT", "6070", Mapped, "admin port's port"},
	{"GRPC_UDS", "", Refused, "Sluice serves gRPC on TCP only: unset it to serve on GRPC_HOST:GRPC_PORT"},
	{"GRPC_HOST", "0.0.0.0", Mapped, "gRPC host (--grpc-listen), served without Sluice's protected mode (--grpc-insecure)"},
	{"GRPC_PORT", "8081", Mapped, "gRPC port"},
	{"GRPC_MAX_CONNECTION_AGE", "24h", Unused, "not used: Sluice does not close gRPC connections by age"},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", Unused, "not used: Sluice does not close gRPC connections by age"},
	{"GRPC_SERVER_USE_TLS", "false", Mapped, "serve gRPC over TLS with the two files below"},
	{"GRPC_SERVER_TLS_CERT", "", Mapped, "--grpc-tls-cert, with TLS"},
	{"GRPC_SERVER_TLS_KEY", "", Mapped, "--grpc-tls-key, with TLS"},
	{"GRPC_CLIENT_TLS_CACERT", "", Mapped, "--grpc-tls-client-ca, with TLS: every client must then present a certificate"},
	{"GRPC_CLIENT_TLS_SAN", "", Mapped, "refused when set with TLS: Sluice checks the client's chain, not its SAN"},
	{"LOG_LEVEL", "WARN", Mapped, "--log-level: trace and debug are debug, fatal and panic are error"},
	{"LOG_FORMAT", "text", Mapped, "--log-format: json, or text for anything else"},
	{"CONFIG_TYPE", "FILE", Mapped, "FILE: --rls-config from RUNTIME_*; GRPC_XDS_SOTW: --rls-xds-server from CONFIG_GRPC_XDS_*"},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", Mapped, "with xDS, --rls-xds-start-without-config; with files, the directory must exist"},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", Mapped, "--rls-xds-node-id"},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", Mapped, "--rls-xds-node-metadata (key=value,...)"},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", Mapped, "--rls-xds-server"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", Mapped, "--rls-xds-retry: the first wait, doubling to a minute"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", Mapped, "--rls-xds-headers (key:value,... as the peer writes them)"},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", Mapped, "--rls-xds-tls, with the three files below"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", Mapped, "--rls-xds-tls-cert, with TLS"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", Mapped, "--rls-xds-tls-key, with TLS"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", Mapped, "--rls-xds-tls-ca, with TLS"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", Mapped, "--rls-xds-tls-server-name, with TLS"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", Unused, "not used: CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL paces every reconnection"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", Unused, "not used: reconnection waits double up to a minute"},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", Unused, "not used: reconnection waits are jittered by half"},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", Unused, "not used: reconnection waits are always jittered"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", Mapped, "--rls-xds-max-message-size when set; unset, Sluice's 64mb (the peer's is gRPC's 4 MB)"},
	{"USE_DOG_STATSD", "false", Unused, statsUse},
	{"USE_DOG_STATSD_MOGRIFIERS", "", Unused, statsUse},
	{"USE_STATSD", "true", Unused, statsUse},
	{"STATSD_HOST", "localhost", Unused, statsUse},
	{"STATSD_PORT", "8125", Unused, statsUse},
	{"EXTRA_TAGS", "", Unused, statsUse},
	{"STATS_FLUSH_INTERVAL", "10s", Unused, statsUse},
	{"DISABLE_STATS", "false", Unused, statsUse},
	{"USE_PROMETHEUS", "false", Mapped, "true: the peer's Prometheus metrics, as its default mapper names them, beside Sluice's (--rls-peer-metrics), and the admin endpoints (/metrics, /healthz, /readyz) move from the debug port to PROMETHEUS_ADDR, where the platform scrapes"},
	{"PROMETHEUS_ADDR", ":9090", Mapped, "--admin-listen with USE_PROMETHEUS=true (\":19001\": every interface)"},
	{"PROMETHEUS_PATH", "/metrics", Mapped, "--admin-metrics-path with USE_PROMETHEUS=true"},
	{"PROMETHEUS_MAPPER_YAML", "", Mapped, "--rls-peer-metrics-mapper with USE_PROMETHEUS=true: a mapper that renames the default's metrics (Envoy Gateway's, which also reports response times in milliseconds) is honoured; one that changes anything else is refused at start"},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", Refused, "Sluice reports the peer's response time in seconds, as its default mapper does: unset it, or give a PROMETHEUS_MAPPER_YAML without the scale"},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", Mapped, "--rls-config is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"},
	{"RUNTIME_SUBDIRECTORY", "", Mapped, "see RUNTIME_ROOT"},
	{"RUNTIME_APPDIRECTORY", "config", Mapped, "see RUNTIME_ROOT"},
	{"RUNTIME_IGNOREDOTFILES", "false", Mapped, "read; Sluice never reads a dot file, and reads *.yaml and *.yml only"},
	{"RUNTIME_WATCH_ROOT", "true", Mapped, "read; Sluice watches the directory itself, ConfigMap swaps included"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", Mapped, "--rls-peer-key-jitter: the peer's keys (below) live their unit plus up to this; Sluice's own keys expire when their window ends"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", Mapped, "above 0, --deny-cache-size of one refusal per 350 bytes; Sluice's refusal cache is always on for its own keys (0 keeps its default), and in the peer's keys every hit reaches Redis"},
	{"NEAR_LIMIT_RATIO", "0.8", Mapped, "--rls-near-limit-ratio: where the peer's near_limit metric starts"},
	{"CACHE_KEY_PREFIX", "", Mapped, "--rls-peer-key-prefix: starts the peer's keys, which the rules without Sluice's own fields count in (--rls-peer-keys, always on here); when set, also --key-prefix, Sluice's own keys' prefix"},
	{"BACKEND_TYPE", "redis", Mapped, "redis only; memcache is refused"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", Mapped, "--rls-stop-charging-when-over-limit"},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", Mapped, "--rls-response-headers peer"},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", Mapped, "the default only: another name is refused"},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", Mapped, "the default only: another name is refused"},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", Mapped, "the default only: another name is refused"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", Mapped, "--rls-ready-with-config: /healthcheck, /readyz and gRPC health say not ready while no domain is configured"},
	{"REDIS_SOCKET_TYPE", "unix", Mapped, "tcp only: unix is refused"},
	{"REDIS_TYPE", "SINGLE", Mapped, "single: redis://; sentinel: redis+sentinel://; cluster: redis+cluster:// (--upstream)"},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", Mapped, "the address in --upstream; sentinel: master,host:port,..."},
	{"REDIS_POOL_SIZE", "10", Unused, "not used: Sluice pipelines on one connection per Redis master (--batch-inflight)"},
	{"REDIS_AUTH", "", Mapped, "password, or user:password, in --upstream"},
	{"REDIS_TLS", "false", Mapped, "rediss:// in --upstream"},
	{"REDIS_TLS_CLIENT_CERT", "", Mapped, "--upstream-tls-cert, with TLS: the client certificate presented to Redis, read again when it changes"},
	{"REDIS_TLS_CLIENT_KEY", "", Mapped, "--upstream-tls-key, with TLS and REDIS_TLS_CLIENT_CERT"},
	{"REDIS_TLS_CACERT", "", Mapped, "--upstream-tls-ca, with TLS"},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", Mapped, "refused when true with TLS: Sluice always checks Redis's name"},
	{"REDIS_PIPELINE_WINDOW", "0", Unused, "not used: Sluice batches what arrives while a round trip is out (--batch-max)"},
	{"REDIS_PIPELINE_LIMIT", "0", Unused, "not used: Sluice batches what arrives while a round trip is out (--batch-max)"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", Unused, "not used: Sluice sends one batch per Cluster master at once"},
	{"REDIS_PERSECOND", "false", Refused, "Sluice keeps every limit in one Redis: unset it, or set false"},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TYPE", "SINGLE", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_POOL_SIZE", "10", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_AUTH", "", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_TLS", "false", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_SENTINEL_AUTH", "", Mapped, "refused when set with sentinel: Sluice reaches sentinels without a password"},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", Unused, "not used: Sluice's health follows its failure mode (--on-upstream-failure)"},
	{"REDIS_TIMEOUT", "10s", Unused, "not used: each round trip has Sluice's deadline (--upstream-timeout, 100ms), past which the failure mode decides"},
	{"REDIS_PERSECOND_TIMEOUT", "10s", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", Unused, "not used: Sluice has no pool to wait on"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", Ignored, "read by the peer only with REDIS_PERSECOND"},
	{"REDIS_STARTUP_INITIAL_INTERVAL", "1s", Unused, "not used: Sluice waits for Redis at start (--upstream-required) trying again after 100ms, doubling to 2s"},
	{"REDIS_STARTUP_MAX_INTERVAL", "30s", Unused, "not used: Sluice waits for Redis at start trying again at most every 2s"},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", "0", Mapped, "--upstream-required-timeout: how long start-up waits for Redis before it fails (0: without end, as the peer)"},
	{"MEMCACHE_HOST_PORT", "", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_SRV", "", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_SRV_REFRESH", "0", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS", "false", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CLIENT_CERT", "", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CLIENT_KEY", "", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_CACERT", "", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", Ignored, "read by the peer only with BACKEND_TYPE=memcache"},
	{"SHADOW_MODE", "false", Mapped, "--rls-shadow: every descriptor answered OK, counted and reported"},
	{"QUOTA_MODE", "false", Refused, "Sluice honours quota_mode per rule, not for every rule: unset it, or set false"},
	{"RESPONSE_DYNAMIC_METADATA", "false", Mapped, "--rls-dynamic-metadata: the peer's response dynamic metadata"},
	{"MERGE_DOMAIN_CONFIG", "false", Refused, "Sluice takes one file per domain: unset it, or set false"},
	{"TRACING_ENABLED", "false", Unused, tracingUse},
	{"TRACING_SERVICE_NAME", "RateLimit", Unused, tracingUse},
	{"TRACING_SERVICE_NAMESPACE", "", Unused, tracingUse},
	{"TRACING_SERVICE_INSTANCE_ID", "", Unused, tracingUse},
	{"TRACING_EXPORTER_PROTOCOL", "http", Unused, tracingUse},
	{"TRACING_SAMPLING_RATE", "1", Unused, tracingUse},
}
