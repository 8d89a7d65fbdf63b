package settings

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// registerXDS makes flags of the rate limit service's configuration over
// xDS: envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW and its
// CONFIG_GRPC_XDS_* variables, as Sluice's own settings.
func (c *Config) registerXDS(fs *flag.FlagSet) {
	fs.StringVar(&c.RLSXDSServer, "rls-xds-server", c.RLSXDSServer,
		"xDS management server `address` (host:port) to take the rate limit service's configuration from, instead of --rls-config: "+
			"RateLimitConfig resources, one per domain, state of the world over ADS (envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_URL)")
	fs.StringVar(&c.RLSXDSNodeID, "rls-xds-node-id", c.RLSXDSNodeID,
		"node `id` sent to the xDS server, which picks this node's resources by it; empty: default, as envoyproxy/ratelimit")
	fs.Var(&c.RLSXDSNodeMetadata, "rls-xds-node-metadata", "node metadata sent to the xDS server, as `key=value,...` pairs")
	fs.Var(&c.RLSXDSHeaders, "rls-xds-headers", "gRPC metadata sent on the xDS stream, as `key=value,...` pairs, such as an authorization token")
	fs.BoolVar(&c.RLSXDSTLS, "rls-xds-tls", c.RLSXDSTLS,
		"connect to the xDS server over TLS, checking its certificate against the system's roots unless --rls-xds-tls-ca")
	fs.StringVar(&c.RLSXDSTLSCA, "rls-xds-tls-ca", c.RLSXDSTLSCA, "PEM `file` of the CA the xDS server's certificate must chain to; implies --rls-xds-tls")
	fs.StringVar(&c.RLSXDSTLSCert, "rls-xds-tls-cert", c.RLSXDSTLSCert,
		"PEM `file` of this node's client certificate chain for the xDS server (mTLS); with --rls-xds-tls-key, implies --rls-xds-tls")
	fs.StringVar(&c.RLSXDSTLSKey, "rls-xds-tls-key", c.RLSXDSTLSKey, "PEM `file` of this node's client private key for the xDS server")
	fs.StringVar(&c.RLSXDSTLSServerName, "rls-xds-tls-server-name", c.RLSXDSTLSServerName,
		"`name` the xDS server's certificate must carry; empty: the address's host")
	fs.DurationVar(&c.RLSXDSRetry, "rls-xds-retry", c.RLSXDSRetry,
		"first wait before reconnecting to the xDS server (`duration`), and before refusing again a refused version it sends again; "+
			"it doubles with each in a row up to a minute, jittered by half")
	fs.BoolVar(&c.RLSXDSStartWithoutConfig, "rls-xds-start-without-config", c.RLSXDSStartWithoutConfig,
		"serve before the xDS server has sent a configuration, answering every domain as unknown (OK) until then "+
			"(envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG); without it, start-up waits for one")
	fs.Var(&c.RLSXDSMaxMessage, "rls-xds-max-message-size",
		"largest xDS response accepted (`size`): the whole configuration comes in one, about 46 bytes a descriptor "+
			"(envoyproxy/ratelimit's XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES, whose default is gRPC's 4mb)")
}

// XDSTLS reports whether the connection to the xDS server is over TLS.
func (c *Config) XDSTLS() bool { return c.RLSXDSTLS || c.RLSXDSTLSCA != "" || c.RLSXDSTLSCert != "" }

// validateXDS checks the xDS settings: one source of the rate limit
// service's configuration, and the xDS settings only with a server.
func (c *Config) validateXDS() error {
	if c.RLSXDSServer == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"rls-xds-node-id", c.RLSXDSNodeID != ""},
			{"rls-xds-node-metadata", len(c.RLSXDSNodeMetadata) > 0},
			{"rls-xds-headers", len(c.RLSXDSHeaders) > 0},
			{"rls-xds-tls", c.RLSXDSTLS},
			{"rls-xds-tls-ca", c.RLSXDSTLSCA != ""},
			{"rls-xds-tls-cert", c.RLSXDSTLSCert != ""},
			{"rls-xds-tls-key", c.RLSXDSTLSKey != ""},
			{"rls-xds-tls-server-name", c.RLSXDSTLSServerName != ""},
			{"rls-xds-start-without-config", c.RLSXDSStartWithoutConfig},
		} {
			if f.set {
				return fmt.Errorf("invalid %s: it needs --rls-xds-server, the xDS server to take the configuration from", c.name(f.name))
			}
		}
		return nil
	}
	if c.RLSConfig != "" {
		return fmt.Errorf("invalid %s and %s: give one source of the rate limit service's configuration, files or xDS",
			c.name("rls-config"), c.name("rls-xds-server"))
	}
	if c.GRPCListen == "" {
		return fmt.Errorf("invalid %s: its configuration is the gRPC door's; set --grpc-listen", c.name("rls-xds-server"))
	}
	if !strings.Contains(c.RLSXDSServer, "/") { // a gRPC target such as dns:///host:port is left to gRPC
		if _, err := c.hostPort("rls-xds-server", c.RLSXDSServer); err != nil {
			return err
		}
	}
	if c.RLSXDSMaxMessage <= 0 || c.RLSXDSMaxMessage > 1<<31-1 {
		return fmt.Errorf("invalid %s %q: must be a size from 1 to 2gb", c.name("rls-xds-max-message-size"), c.RLSXDSMaxMessage.String())
	}
	if c.RLSXDSRetry <= 0 {
		return fmt.Errorf("invalid %s %q: must be a positive duration such as 3s", c.name("rls-xds-retry"), c.RLSXDSRetry)
	}
	return c.pairedFiles("rls-xds", c.RLSXDSTLSCert, c.RLSXDSTLSKey)
}

// KeyValues is a flag of key=value pairs separated by commas. A value may
// hold '=' (everything after the first is the value); a pair without '='
// or with an empty key is refused, not dropped.
type KeyValues map[string]string

// Set replaces the pairs with those of s.
func (kv *KeyValues) Set(s string) error {
	m := KeyValues{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return fmt.Errorf("%q is no key=value pair", pair)
		}
		m[k] = strings.TrimSpace(v)
	}
	*kv = m
	return nil
}

// String gives the pairs sorted by key, as Set reads them.
func (kv *KeyValues) String() string {
	if kv == nil {
		return ""
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(*kv)) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + (*kv)[k])
	}
	return b.String()
}

// Get makes KeyValues a flag.Getter, as the flag package's own values are.
func (kv *KeyValues) Get() any { return map[string]string(*kv) }
