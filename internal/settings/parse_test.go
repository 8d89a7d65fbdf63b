package settings

import (
	"flag"
	"io"
	"testing"
)

// load parses args and env as the binary does.
func load(args []string, env map[string]string) (Config, error) {
	c := Default()
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs)
	if err := Parse(fs, args); err != nil {
		return c, err
	}
	return c, c.Finish(fs, func(k string) string { return env[k] })
}

// TestFlagErrors: every refused value is one line that names where it
// came from (the flag, or the variable that set it) and how to write it.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"upstream without scheme", []string{"--upstream", "localhost:6379"}, nil,
			`invalid --upstream "localhost:6379": an address starts with its scheme: did you mean redis://localhost:6379?`},
		{"upstream without scheme keeps its password out", []string{"--upstream", "u:secret@r:6379"}, nil,
			`invalid --upstream "r:6379": an address starts with its scheme: did you mean redis://USER:PASSWORD@r:6379?`},
		{"upstream scheme", []string{"--upstream", "http://x"}, nil,
			`invalid --upstream "http://x": scheme must be redis, rediss, redis+sentinel, redis+cluster, rediss+sentinel or rediss+cluster`},
		{"upstream from env", nil, map[string]string{"SLUICE_UPSTREAM": "localhost:6379"},
			`invalid SLUICE_UPSTREAM "localhost:6379": an address starts with its scheme: did you mean redis://localhost:6379?`},
		{"duration without unit", []string{"--upstream-timeout", "100"}, nil,
			`invalid --upstream-timeout "100": durations need a unit: 100ms`},
		{"duration without unit from env", nil, map[string]string{"SLUICE_UPSTREAM_TIMEOUT": "100"},
			`invalid SLUICE_UPSTREAM_TIMEOUT "100": durations need a unit: 100ms`},
		{"duration nonsense", []string{"--shutdown-delay", "soon"}, nil,
			`invalid --shutdown-delay "soon": must be a duration such as 100ms, 2s or 1m`},
		{"zero timeout", []string{"--upstream-timeout", "0s"}, nil,
			`invalid --upstream-timeout "0s": must be a positive duration such as 100ms`},
		{"zero timeout from env", nil, map[string]string{"SLUICE_UPSTREAM_TIMEOUT": "0s"},
			`invalid SLUICE_UPSTREAM_TIMEOUT "0s": must be a positive duration such as 100ms`},
		{"flag wins over env", []string{"--upstream-timeout", "0s"}, map[string]string{"SLUICE_UPSTREAM_TIMEOUT": "1s"},
			`invalid --upstream-timeout "0s": must be a positive duration such as 100ms`},
		{"port out of range", []string{"--listen", "127.0.0.1:99999"}, nil,
			`invalid --listen "127.0.0.1:99999": the port must be a number from 0 to 65535`},
		{"admin port out of range", []string{"--admin-listen", "127.0.0.1:65536"}, nil,
			`invalid --admin-listen "127.0.0.1:65536": the port must be a number from 0 to 65535`},
		{"grpc port out of range", []string{"--grpc-listen", "127.0.0.1:70000", "--rls-config", "d"}, nil,
			`invalid --grpc-listen "127.0.0.1:70000": the port must be a number from 0 to 65535`},
		{"http address without port", []string{"--http-listen", "8082"}, nil,
			`invalid --http-listen "8082": want host:port, such as 127.0.0.1:8082`},
		{"whole number", []string{"--max-keys", "many"}, nil, `invalid --max-keys "many": must be a whole number`},
		{"whole number from env", nil, map[string]string{"SLUICE_MAX_KEYS": "many"}, `invalid SLUICE_MAX_KEYS "many": must be a whole number`},
		{"boolean", []string{"--grpc-insecure=maybe"}, nil, `invalid --grpc-insecure "maybe": must be true or false`},
		{"size", []string{"--max-input-memory", "lots"}, nil,
			`invalid --max-input-memory "lots": must be a size such as 256mb, 1gb or 500000 (bytes)`},
		{"no descriptors allowed", []string{"--rls-max-descriptors", "0"}, nil,
			`invalid --rls-max-descriptors "0": must be a positive integer`},
		{"no entries allowed from env", nil, map[string]string{"SLUICE_RLS_MAX_ENTRIES": "0"},
			`invalid SLUICE_RLS_MAX_ENTRIES "0": must be a positive integer`},
		{"negative loops from env", nil, map[string]string{"SLUICE_IO_LOOPS": "-1"},
			`invalid SLUICE_IO_LOOPS "-1": must be a positive integer, or 0`},
		{"open listen from env", nil, map[string]string{"SLUICE_LISTEN": "0.0.0.0:6380"},
			`refusing to listen on "0.0.0.0:6380" (from SLUICE_LISTEN) without a password: it is reachable from other machines. ` +
				`Set --requirepass (SLUICE_REQUIREPASS), or listen on 127.0.0.1`},
		{"missing policies file", []string{"--policies", "/nonexistent/p.yaml"}, nil,
			`invalid --policies "/nonexistent/p.yaml": no such file or directory`},
		{"missing policies file from env", nil, map[string]string{"SLUICE_POLICIES": "/nonexistent/p.yaml"},
			`invalid SLUICE_POLICIES "/nonexistent/p.yaml": no such file or directory`},
		{"rls config not a directory", []string{"--rls-config", "parse_test.go"}, nil,
			`invalid --rls-config "parse_test.go": not a directory: give the directory of the YAML files`},
		{"overlay without a configuration", []string{"--rls-overlay", "parse_test.go"}, nil,
			`invalid --rls-overlay: it is laid on the rate limit service's configuration; give --rls-config or --rls-xds-server`},
		{"overlay a directory", []string{"--rls-config", ".", "--rls-overlay", "."}, map[string]string{"SLUICE_RLS_OVERLAY": "x"},
			`invalid --rls-overlay ".": a directory: give the file`},
		{"missing overlay from env", []string{"--rls-config", "."}, map[string]string{"SLUICE_RLS_OVERLAY": "/nonexistent/o.yaml"},
			`invalid SLUICE_RLS_OVERLAY "/nonexistent/o.yaml": no such file or directory`},
		{"peer's HTTP port without the gRPC door", []string{"--rls-http-listen", "127.0.0.1:8080"}, nil,
			`--rls-http-listen needs --grpc-listen: /json answers as the gRPC door does`},
		{"readiness on a configuration without the gRPC door", []string{"--rls-ready-with-config"}, nil,
			`--rls-ready-with-config needs --grpc-listen: it waits for the rate limit service's configuration`},
		{"peer key jitter in parts of a second", []string{"--rls-peer-keys", "--rls-peer-key-jitter", "1500ms"}, nil,
			`invalid --rls-peer-key-jitter "1.5s": must be whole seconds such as 300s, or 0`},
		{"peer key prefix without the peer's keys", []string{"--rls-peer-key-prefix", "rl_"}, nil,
			`--rls-peer-key-prefix and --rls-peer-key-jitter need --rls-peer-keys: they shape envoyproxy/ratelimit's keys`},
		{"peer's HTTP port open", []string{"--rls-config", ".", "--grpc-listen", "127.0.0.1:8081"}, map[string]string{"SLUICE_RLS_HTTP_LISTEN": "0.0.0.0:8080"},
			`refusing to serve /json on "0.0.0.0:8080" (from SLUICE_RLS_HTTP_LISTEN): it is reachable from other machines without TLS. ` +
				`Listen on 127.0.0.1, or set --grpc-insecure if only this pod can reach the address`},
		{"policies a directory", []string{"--policies", "."}, nil, `invalid --policies ".": a directory: give the file`},
		{"missing TLS key", []string{"--http-tls-cert", "parse_test.go", "--http-tls-key", "nope.key"}, nil,
			`invalid --http-tls-key "nope.key": no such file or directory`},
		{"log level", []string{"--log-level", "loud"}, nil, `invalid --log-level "loud": must be debug, info, warn or error`},
		{"failure mode", []string{"--on-upstream-failure", "maybe"}, nil, `invalid --on-upstream-failure "maybe": must be allow, deny or local`},
		{"failure mode from env", nil, map[string]string{"SLUICE_ON_UPSTREAM_FAILURE": "maybe"},
			`invalid SLUICE_ON_UPSTREAM_FAILURE "maybe": must be allow, deny or local`},
		{"local share", []string{"--local-share", "half"}, nil, `invalid --local-share "half": must be fleet or whole`},
		{"local share from env", nil, map[string]string{"SLUICE_LOCAL_SHARE": "Fleet"}, `invalid SLUICE_LOCAL_SHARE "Fleet": must be fleet or whole`},
		{"headers", []string{"--rls-response-headers", "all"}, nil, `invalid --rls-response-headers "all": must be off, peer, draft or both`},
		{"CA without TLS", []string{"--upstream", "redis://r:6379", "--upstream-tls-ca", "ca.pem"}, nil,
			`invalid --upstream-tls-ca: the upstream address does not use TLS (rediss://)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.args, tc.env)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestOff: "off" switches an address off wherever it is written, and the
// older empty spelling still does; the admin address left at its default
// is optional, one asked for is not.
func TestOff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		env           map[string]string
		admin, grpc   string
		adminOptional bool
	}{
		{"defaults", nil, nil, "127.0.0.1:9380", "", true},
		{"flag off", []string{"--admin-listen", "off", "--grpc-listen", "off"}, nil, "", "", false},
		{"flag empty", []string{"--admin-listen", ""}, nil, "", "", false},
		{"env off", nil, map[string]string{"SLUICE_ADMIN_LISTEN": "off", "SLUICE_GRPC_LISTEN": "off"}, "", "", false},
		{"explicit address", []string{"--admin-listen", "127.0.0.1:9380"}, nil, "127.0.0.1:9380", "", false},
		{"explicit address from env", nil, map[string]string{"SLUICE_ADMIN_LISTEN": "127.0.0.1:9381"}, "127.0.0.1:9381", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if c.AdminListen != tc.admin || c.GRPCListen != tc.grpc || c.AdminOptional != tc.adminOptional {
				t.Errorf("admin %q grpc %q optional %v; want %q %q %v", c.AdminListen, c.GRPCListen, c.AdminOptional,
					tc.admin, tc.grpc, tc.adminOptional)
			}
		})
	}
	// The flag shows an empty address as off, so the injector writes off.
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c := Default()
	c.Register(fs)
	if d := fs.Lookup("grpc-listen").DefValue; d != "off" {
		t.Errorf("--grpc-listen's default reads %q; want off", d)
	}
}
