package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/internal/peerenv"
	"github.com/sluice-rl/sluice/internal/settings"
)

// peerName is the binary's name in envoyproxy/ratelimit's image
// (/bin/ratelimit): invoked by it, Sluice takes the peer's settings.
const peerName = "ratelimit"

// runPeer is Sluice configured as envoyproxy/ratelimit is, by its
// environment variables (package peerenv) and no flags: the platforms that
// run the peer start it so. Its result is run's: 2 for a setting refused,
// 1 for a failure.
func runPeer(ctx context.Context, args []string, env map[string]string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "--help" || args[0] == "-h" {
			fmt.Fprintln(stdout, peerUsage)
			return 0
		}
		fmt.Fprintf(stderr, "%s: unexpected argument %q: envoyproxy/ratelimit's environment variables configure this mode; "+
			"sluice help lists Sluice's flags\n", peerName, args[0])
		return 2
	}
	cfg, notes, err := peerenv.Map(env)
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil {
		err = peerFiles(env, cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", peerName, err)
		return 2
	}
	// The admin endpoints (/metrics, /healthz, /readyz) are on the peer's
	// debug port, or with USE_PROMETHEUS on PROMETHEUS_ADDR: the line
	// names the address by the variable the platform set.
	admin := "debug"
	if prom, _ := strconv.ParseBool(env["USE_PROMETHEUS"]); prom {
		admin = "prometheus"
	}
	return serve(ctx, cfg, getenv, stderr, func(log *slog.Logger) {
		log.Info("configured by envoyproxy/ratelimit's environment variables", "grpc", cfg.GRPCListen,
			"http", cfg.RLSHTTPListen, admin, cfg.AdminListen, "resp", cfg.Listen)
		// One line per reason: the statistics variables share one.
		var whys []string
		vars := map[string][]string{}
		for _, n := range notes {
			if vars[n.Why] == nil {
				whys = append(whys, n.Why)
			}
			vars[n.Why] = append(vars[n.Why], n.Var)
		}
		for _, why := range whys {
			// A warning: at the peer's default level (warn) it is still said.
			log.Warn("accepted, not used", "vars", strings.Join(vars[why], ","), "why", why)
		}
	})
}

const peerUsage = `Usage: ratelimit
       sluice envoy-ratelimit

Serves as envoyproxy/ratelimit does, configured by its environment
variables (REDIS_URL, RUNTIME_ROOT, CONFIG_TYPE, GRPC_PORT, ...), so that
an image's /bin/ratelimit can be Sluice. docs/gateways.md maps every
variable; one Sluice does not offer stops start-up, naming it.`

// peerFiles checks that the files and the directory the environment
// names are there, naming the variable of one that is not: a mistyped
// path is a setting's error (exit 2), as it is for Sluice's own flags.
func peerFiles(env map[string]string, cfg settings.Config) error {
	for _, f := range []struct{ vars, path string }{
		{"RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY", cfg.RLSConfig},
		{"GRPC_SERVER_TLS_CERT", cfg.GRPCTLSCert},
		{"GRPC_SERVER_TLS_KEY", cfg.GRPCTLSKey},
		{"GRPC_CLIENT_TLS_CACERT", cfg.GRPCTLSClientCA},
		{"REDIS_TLS_CACERT", cfg.UpstreamTLSCA},
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", cfg.RLSXDSTLSCA},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", cfg.RLSXDSTLSCert},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", cfg.RLSXDSTLSKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %s: %v", f.vars, f.path, errors.Unwrap(err))
		}
	}
	return nil
}

// environ is the process's environment as a map, for peerenv.Map.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
