package app

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-rl/sluice/rls/peerstats"
	"github.com/sluice-rl/sluice/rlsconfig"
)

// newPeerStats builds envoyproxy/ratelimit's metrics when asked
// (--rls-peer-metrics), with the process and Go runtime metrics the
// peer's registry also serves and its dashboards read
// (process_resident_memory_bytes …). The mapper file is read here, once:
// a file that changes more than names stops start-up.
func (s *Sidecar) newPeerStats() ([]prometheus.Collector, error) {
	cfg := s.cfg
	if !cfg.RLSPeerMetrics {
		return nil, nil
	}
	var mapper *peerstats.Mapper
	if cfg.RLSPeerMetricsMapper != "" {
		data, err := os.ReadFile(cfg.RLSPeerMetricsMapper)
		if err != nil {
			return nil, fmt.Errorf("invalid --rls-peer-metrics-mapper: %w", err)
		}
		if mapper, err = peerstats.ParseMapper(data); err != nil {
			return nil, fmt.Errorf("invalid --rls-peer-metrics-mapper %s: %w", cfg.RLSPeerMetricsMapper, err)
		}
	}
	st, err := peerstats.New(peerstats.Config{NearLimitRatio: cfg.RLSNearLimitRatio, Mapper: mapper})
	if err != nil {
		return nil, err
	}
	s.peerStats = st
	return []prometheus.Collector{st, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector()}, nil
}

// configLoaded counts a load of the rate limit service's configuration,
// or a refused one, in the peer's metrics.
func (s *Sidecar) configLoaded(_ *rlsconfig.Config, err error) {
	if s.peerStats != nil {
		s.peerStats.ConfigLoad(err)
	}
	if ov := s.overlay.Load(); ov != nil {
		// Lay the overlay on the new configuration now, off the requests'
		// path, so that what it leaves unmatched is logged at once.
		ov.Current()
	}
}
