package settings

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisurl"
)

// Validate checks every setting before anything starts, naming the flag
// (or the SLUICE_* variable, after Finish) of the first that is wrong and
// how to write it, in one line.
func (c *Config) Validate() error {
	if err := c.validateListen(); err != nil {
		return err
	}
	if err := c.validateUpstream(); err != nil {
		return err
	}
	if err := c.validatePeer(); err != nil {
		return err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("invalid %s %q: must be text or json", c.name("log-format"), c.LogFormat)
	}
	if c.OnFailure == engine.FailDefault {
		return fmt.Errorf("invalid %s: must be allow, deny or local", c.name("on-upstream-failure"))
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
		{"grpc-idle-timeout", c.GRPCIdleTimeout, true},
		{"upstream-required-timeout", c.UpstreamRequiredTimeout, true},
		{"upstream-eviction-check", c.UpstreamEvictionCheck, true},
	}
	for _, d := range durations {
		if d.d < 0 || d.d == 0 && !d.zeroOK {
			return fmt.Errorf("invalid %s %q: must be a positive duration such as 100ms%s", c.name(d.name), d.d, orZero(d.zeroOK))
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
		{"max-reservations", c.MaxReservations, false},
		{"deny-cache-size", c.DenyCacheSize, false},
		{"max-clients", c.MaxClients, false},
		{"grpc-max-conns", c.GRPCMaxConns, false},
		{"http-max-conns", c.HTTPMaxConns, false},
		{"io-loops", c.IOLoops, true},
		{"rls-max-descriptors", c.RLSMaxDescriptors, false},
		{"rls-max-entries", c.RLSMaxEntries, false},
		{"durable-replicas", c.DurableReplicas, false},
	}
	for _, n := range ints {
		if n.n < 0 || n.n == 0 && !n.zeroOK {
			return fmt.Errorf("invalid %s %q: must be a positive integer%s", c.name(n.name), strconv.Itoa(n.n), orZero(n.zeroOK))
		}
	}
	if c.MaxInputMemory <= 0 {
		return fmt.Errorf("invalid %s %q: must be a positive size such as 256mb", c.name("max-input-memory"), c.MaxInputMemory.String())
	}
	if c.AdminListen != "" {
		if _, err := c.hostPort("admin-listen", c.AdminListen); err != nil {
			return err
		}
	}
	if err := c.validatePeerKeys(); err != nil {
		return err
	}
	if err := c.validateXDS(); err != nil {
		return err
	}
	if err := c.validateRecord(); err != nil {
		return err
	}
	if c.RLSOverlay != "" && c.RLSConfig == "" && c.RLSXDSServer == "" {
		return fmt.Errorf("invalid %s: it is laid on the rate limit service's configuration; give --rls-config or --rls-xds-server", c.name("rls-overlay"))
	}
	if err := c.validateGRPC(); err != nil {
		return err
	}
	if err := c.validateRLSHTTP(); err != nil {
		return err
	}
	return c.validateHTTP()
}

// hostPort splits the address of flag name and checks its port, so that
// a port out of range is refused before anything listens.
func (c *Config) hostPort(name, addr string) (host string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("invalid %s %q: want host:port, such as 127.0.0.1:%s", c.name(name), addr, examplePort(name))
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return "", fmt.Errorf("invalid %s %q: the port must be a number from 0 to 65535", c.name(name), addr)
	}
	return host, nil
}

// examplePort is each address's usual port, for the example in an error.
func examplePort(name string) string {
	switch name {
	case "admin-listen":
		return "9380"
	case "grpc-listen":
		return "8081"
	case "http-listen":
		return "8082"
	case "rls-http-listen":
		return "8080"
	case "rls-xds-server":
		return "18000"
	}
	return "6380"
}

// validateUpstream checks the upstream address with the parser the
// store's client is built from (internal/redisurl), so that a mistake is a setting's error (exit 2) and not a
// failure to start; an address with no scheme gets the one it most likely
// lacks.
func (c *Config) validateUpstream() error {
	if c.Upstream == "" {
		// A CA with no address yet is the injector's: the address comes
		// from a Secret when the pod starts.
		return nil
	}
	if !strings.Contains(c.Upstream, "://") {
		shown, user := c.Upstream, ""
		if i := strings.LastIndex(shown, "@"); i >= 0 {
			shown, user = shown[i+1:], "USER:PASSWORD@" // never echo a password
		}
		return fmt.Errorf("invalid %s %q: an address starts with its scheme: did you mean redis://%s%s?", c.name("upstream"), shown, user, shown)
	}
	a, err := redisurl.Parse(c.Upstream)
	if err != nil {
		reason := err.Error()
		if bad := (*redisurl.Error)(nil); errors.As(err, &bad) {
			reason = bad.Reason // the setting's name replaces its head
		}
		return fmt.Errorf("invalid %s %q: %s", c.name("upstream"), redisurl.Quoted(c.Upstream), reason)
	}
	if c.UpstreamTLSCA != "" && !a.TLS {
		return fmt.Errorf("invalid %s: the upstream address does not use TLS (rediss://)", c.name("upstream-tls-ca"))
	}
	if (c.UpstreamTLSCert == "") != (c.UpstreamTLSKey == "") {
		return fmt.Errorf("invalid %s and %s: a client certificate needs both, or neither", c.name("upstream-tls-cert"), c.name("upstream-tls-key"))
	}
	if c.UpstreamTLSCert != "" && !strings.HasPrefix(c.Upstream, "rediss") {
		return fmt.Errorf("invalid %s: the upstream address does not use TLS (rediss://)", c.name("upstream-tls-cert"))
	}
	return nil
}

// validateGRPC is the gRPC door's protected mode. A password is not a gRPC
// thing: beyond loopback, clients prove themselves with certificates, or
// the operator says the address is reachable only from the pod.
func (c *Config) validateGRPC() error {
	if err := c.pairedFiles("grpc", c.GRPCTLSCert, c.GRPCTLSKey); err != nil {
		return err
	}
	if c.GRPCTLSClientCA != "" && c.GRPCTLSCert == "" {
		return fmt.Errorf("invalid %s: it needs --grpc-tls-cert and --grpc-tls-key, as client certificates are asked for over TLS", c.name("grpc-tls-client-ca"))
	}
	if c.GRPCListen == "" {
		if c.RLSReadyWithConfig {
			return fmt.Errorf("%s needs --grpc-listen: it waits for the rate limit service's configuration", c.name("rls-ready-with-config"))
		}
		return nil
	}
	host, err := c.hostPort("grpc-listen", c.GRPCListen)
	if err != nil {
		return err
	}
	if c.RLSConfig == "" && c.RLSXDSServer == "" {
		return fmt.Errorf("%s needs --rls-config DIR or --rls-xds-server ADDR: the rate limit service answers from envoyproxy/ratelimit's configuration, "+
			"YAML files or xDS resources", c.name("grpc-listen"))
	}
	if isLoopback(host) || c.GRPCTLSClientCA != "" || c.GRPCInsecure {
		return nil
	}
	return fmt.Errorf("refusing to serve gRPC on %q%s without client certificates: it is reachable from other machines. "+
		"Set --grpc-tls-cert, --grpc-tls-key and --grpc-tls-client-ca, listen on 127.0.0.1, "+
		"or set --grpc-insecure if only this pod can reach the address", c.GRPCListen, c.from("grpc-listen"))
}

// validateRLSHTTP checks the peer's HTTP port: it answers what the gRPC
// door answers, so it needs that door, and beyond loopback the same word
// that the address is reachable only by whom it should be.
func (c *Config) validateRLSHTTP() error {
	if c.RLSHTTPListen == "" {
		return nil
	}
	host, err := c.hostPort("rls-http-listen", c.RLSHTTPListen)
	if err != nil {
		return err
	}
	if c.GRPCListen == "" {
		return fmt.Errorf("%s needs --grpc-listen: /json answers as the gRPC door does", c.name("rls-http-listen"))
	}
	if isLoopback(host) || c.GRPCInsecure {
		return nil
	}
	return fmt.Errorf("refusing to serve /json on %q%s: it is reachable from other machines without TLS. "+
		"Listen on 127.0.0.1, or set --grpc-insecure if only this pod can reach the address", c.RLSHTTPListen, c.from("rls-http-listen"))
}

// validateHTTP is the HTTP check's protected mode: TLS, a bearer token, or
// the operator's word that the address is pod-local.
func (c *Config) validateHTTP() error {
	if err := c.pairedFiles("http", c.HTTPTLSCert, c.HTTPTLSKey); err != nil {
		return err
	}
	if c.HTTPListen == "" {
		return nil
	}
	host, err := c.hostPort("http-listen", c.HTTPListen)
	if err != nil {
		return err
	}
	if isLoopback(host) || c.HTTPToken != "" || c.HTTPTLSCert != "" || c.HTTPInsecure {
		return nil
	}
	return fmt.Errorf("refusing to serve the HTTP check on %q%s unprotected: it is reachable from other machines. "+
		"Set --http-token (SLUICE_HTTP_TOKEN) or --http-tls-cert and --http-tls-key, listen on 127.0.0.1, "+
		"or set --http-insecure if only this pod can reach the address", c.HTTPListen, c.from("http-listen"))
}

func (c *Config) pairedFiles(door, cert, key string) error {
	if (cert == "") != (key == "") {
		return fmt.Errorf("invalid %s and %s: give both or neither", c.name(door+"-tls-cert"), c.name(door+"-tls-key"))
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
		if _, err := ParsePerm(c.ListenPerm); err != nil {
			return fmt.Errorf("invalid %s %q: want octal permission bits such as 660", c.name("listen-perm"), c.ListenPerm)
		}
		return nil
	}
	if addr == unixPrefix {
		return fmt.Errorf("invalid %s %q: want unix:PATH, the socket's path", c.name("listen"), addr)
	}
	if c.ListenPerm != "" {
		return fmt.Errorf("invalid %s %q: it applies to a Unix socket (--listen unix:PATH), not to %q", c.name("listen-perm"), c.ListenPerm, addr)
	}
	host, err := c.hostPort("listen", addr)
	if err != nil {
		return err
	}
	if c.RequirePass != "" || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %q%s without a password: it is reachable from other machines. "+
		"Set --requirepass (SLUICE_REQUIREPASS), or listen on 127.0.0.1", addr, c.from("listen"))
}

// checkFiles checks that the files and directories the settings name are
// there, so that a mistyped path is a setting's error (exit 2), named with
// where it came from, and not a failure to start. It is the binary's
// check, not Validate's: the injector validates paths of a pod it renders,
// which need not exist where it runs.
func (c *Config) checkFiles() error {
	for _, f := range []struct {
		name, path string
		dir        bool
	}{
		{"policies", c.Policies, false},
		{"rls-config", c.RLSConfig, true},
		{"rls-overlay", c.RLSOverlay, false},
		{"upstream-tls-ca", c.UpstreamTLSCA, false},
		{"upstream-tls-cert", c.UpstreamTLSCert, false},
		{"upstream-tls-key", c.UpstreamTLSKey, false},
		{"grpc-tls-cert", c.GRPCTLSCert, false},
		{"grpc-tls-key", c.GRPCTLSKey, false},
		{"grpc-tls-client-ca", c.GRPCTLSClientCA, false},
		{"http-tls-cert", c.HTTPTLSCert, false},
		{"http-tls-key", c.HTTPTLSKey, false},
		{"rls-xds-tls-ca", c.RLSXDSTLSCA, false},
		{"rls-xds-tls-cert", c.RLSXDSTLSCert, false},
		{"rls-xds-tls-key", c.RLSXDSTLSKey, false},
	} {
		if f.path == "" {
			continue
		}
		fi, err := os.Stat(f.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("invalid %s %q: no such file or directory", c.name(f.name), f.path)
		case err != nil:
			return fmt.Errorf("invalid %s %q: %v", c.name(f.name), f.path, errors.Unwrap(err))
		case f.dir && !fi.IsDir():
			return fmt.Errorf("invalid %s %q: not a directory: give the directory of the YAML files", c.name(f.name), f.path)
		case !f.dir && fi.IsDir():
			return fmt.Errorf("invalid %s %q: a directory: give the file", c.name(f.name), f.path)
		}
	}
	return nil
}

// validatePeerKeys checks the peer's keys' settings: a jitter the peer
// can express (whole seconds), and neither setting without the keys.
func (c *Config) validatePeerKeys() error {
	if j := c.RLSPeerKeyJitter; j < 0 || j%time.Second != 0 {
		return fmt.Errorf("invalid %s %q: must be whole seconds such as 300s, or 0", c.name("rls-peer-key-jitter"), j)
	}
	if !c.RLSPeerKeys && (c.RLSPeerKeyPrefix != "" || c.RLSPeerKeyJitter != 0) {
		return fmt.Errorf("%s and %s need %s: they shape envoyproxy/ratelimit's keys", c.name("rls-peer-key-prefix"),
			c.name("rls-peer-key-jitter"), c.name("rls-peer-keys"))
	}
	return nil
}
