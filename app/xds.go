package app

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/sluice-rl/sluice/rlsconfig/xds"
)

// rlsFromXDS takes the rate limit service's configuration from the xDS
// server of --rls-xds-server, and waits for a first one unless told to
// start without it: until then every domain would be unknown, and every
// call answered OK.
func (s *Sidecar) rlsFromXDS(ctx context.Context) (err error) {
	cfg := s.cfg
	var tlsCfg *tls.Config
	if cfg.XDSTLS() {
		if tlsCfg, err = xds.TLSFiles(cfg.RLSXDSTLSCA, cfg.RLSXDSTLSCert, cfg.RLSXDSTLSKey, cfg.RLSXDSTLSServerName); err != nil {
			return fmt.Errorf("invalid --rls-xds-tls-*: %w", err)
		}
	}
	if s.xds, err = xds.New(xds.Config{Server: cfg.RLSXDSServer, NodeID: cfg.RLSXDSNodeID, NodeMetadata: cfg.RLSXDSNodeMetadata,
		Headers: cfg.RLSXDSHeaders, TLS: tlsCfg, RetryInterval: cfg.RLSXDSRetry, MaxMessageSize: int(cfg.RLSXDSMaxMessage), Logger: s.log,
		OnApply: func(err error) { s.configLoaded(nil, err) }}); err != nil {
		return err
	}
	s.closers = append(s.closers, s.runWatcher(s.xds.Run))
	if cfg.RLSXDSStartWithoutConfig {
		return nil
	}
	s.log.Info("waiting for the rate limit service's configuration from xDS", "server", cfg.RLSXDSServer, "node_id", cfg.RLSXDSNodeID)
	select {
	case <-s.xds.Applied():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no rate limit service configuration came from the xDS server %s before start-up ended (--rls-xds-start-without-config serves without one)", cfg.RLSXDSServer)
	}
}
