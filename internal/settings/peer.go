package settings

import (
	"flag"
	"fmt"
	"strings"
)

// registerPeer adds the settings that make the rate limit service look
// like envoyproxy/ratelimit beyond its answers: what its responses carry
// besides the statuses, and the metrics its operators' dashboards read.
func (c *Config) registerPeer(fs *flag.FlagSet) {
	fs.BoolVar(&c.RLSDynamicMetadata, "rls-dynamic-metadata", c.RLSDynamicMetadata,
		"return, in each rate limit response's dynamic metadata, the request's domain and descriptors and the metadata of the rules "+
			"whose descriptors passed (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA)")
	fs.BoolVar(&c.RLSPeerMetrics, "rls-peer-metrics", c.RLSPeerMetrics,
		"also serve envoyproxy/ratelimit's Prometheus metrics on the admin port, named and labelled as its default statsd mapper "+
			"names them (ratelimit_service_rate_limit_total_hits{domain,key1,key2} …), for its dashboards and alerts (on when started as ratelimit with USE_PROMETHEUS)")
	fs.StringVar(&c.RLSPeerMetricsMapper, "rls-peer-metrics-mapper", c.RLSPeerMetricsMapper,
		"with --rls-peer-metrics, a statsd exporter mapping `file` (the peer's PROMETHEUS_MAPPER_YAML) that renames its default mapper's metrics; "+
			"one that changes anything else is refused")
	fs.Float64Var(&c.RLSNearLimitRatio, "rls-near-limit-ratio", c.RLSNearLimitRatio,
		"with --rls-peer-metrics, the share of a limit past which hits count as near the limit (`ratio`, the peer's NEAR_LIMIT_RATIO)")
	fs.StringVar(&c.MetricsPath, "admin-metrics-path", c.MetricsPath,
		"the admin port's `path` of the Prometheus metrics (the peer's PROMETHEUS_PATH when started as ratelimit)")
}

// validatePeer checks registerPeer's settings.
func (c *Config) validatePeer() error {
	if c.RLSNearLimitRatio < 0 || c.RLSNearLimitRatio > 1 {
		return fmt.Errorf("invalid %s %v: must be from 0 to 1", c.name("rls-near-limit-ratio"), c.RLSNearLimitRatio)
	}
	if !strings.HasPrefix(c.MetricsPath, "/") || strings.ContainsAny(c.MetricsPath, " {}") || c.MetricsPath == "/healthz" || c.MetricsPath == "/readyz" {
		return fmt.Errorf("invalid %s %q: must be a path such as /metrics, other than /healthz and /readyz", c.name("admin-metrics-path"), c.MetricsPath)
	}
	if c.RLSPeerMetricsMapper != "" && !c.RLSPeerMetrics {
		return fmt.Errorf("%s needs %s", c.name("rls-peer-metrics-mapper"), c.name("rls-peer-metrics"))
	}
	return nil
}
