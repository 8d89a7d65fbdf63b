package settings

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The xDS settings, from flags and from SLUICE_* variables: what they
// set, and each mistake refused in one line naming where it came from.
func TestXDSSettings(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := load([]string{"--grpc-listen", "127.0.0.1:8081", "--rls-xds-server", "envoy-gateway:18001",
		"--rls-xds-node-metadata", "cluster=eg, zone=a=b", "--rls-xds-tls-ca", ca, "--rls-xds-start-without-config"},
		map[string]string{"SLUICE_RLS_XDS_NODE_ID": "envoy-ratelimit", "SLUICE_RLS_XDS_HEADERS": "authorization=Bearer t",
			"SLUICE_RLS_XDS_RETRY": "500ms"})
	if err != nil {
		t.Fatal(err)
	}
	if c.RLSXDSServer != "envoy-gateway:18001" || c.RLSXDSNodeID != "envoy-ratelimit" || !c.RLSXDSStartWithoutConfig ||
		c.RLSXDSRetry != 500*time.Millisecond || !c.XDSTLS() {
		t.Errorf("settings %+v", c)
	}
	if want := (KeyValues{"cluster": "eg", "zone": "a=b"}); !reflect.DeepEqual(c.RLSXDSNodeMetadata, want) {
		t.Errorf("metadata %v; want %v", c.RLSXDSNodeMetadata, want)
	}
	if want := (KeyValues{"authorization": "Bearer t"}); !reflect.DeepEqual(c.RLSXDSHeaders, want) {
		t.Errorf("headers %v; want %v", c.RLSXDSHeaders, want)
	}
	if got := c.RLSXDSNodeMetadata.String(); got != "cluster=eg,zone=a=b" {
		t.Errorf("metadata written back as %q", got)
	}

	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"grpc without a source", []string{"--grpc-listen", "127.0.0.1:8081"}, nil,
			"--grpc-listen needs --rls-config DIR or --rls-xds-server ADDR: the rate limit service answers from envoyproxy/ratelimit's configuration, YAML files or xDS resources"},
		{"no gRPC door", []string{"--rls-xds-server", "x:1"}, nil,
			"invalid --rls-xds-server: its configuration is the gRPC door's; set --grpc-listen"},
		{"two sources", []string{"--rls-config", ".", "--rls-xds-server", "x:1"}, nil,
			"invalid --rls-config and --rls-xds-server: give one source of the rate limit service's configuration, files or xDS"},
		{"node id without a server", nil, map[string]string{"SLUICE_RLS_XDS_NODE_ID": "n"},
			"invalid SLUICE_RLS_XDS_NODE_ID: it needs --rls-xds-server, the xDS server to take the configuration from"},
		{"start without config without a server", []string{"--rls-xds-start-without-config"}, nil,
			"invalid --rls-xds-start-without-config: it needs --rls-xds-server, the xDS server to take the configuration from"},
		{"server without port", []string{"--grpc-listen", "127.0.0.1:8081", "--rls-xds-server", "envoy-gateway"}, nil,
			`invalid --rls-xds-server "envoy-gateway": want host:port, such as 127.0.0.1:18000`},
		{"a pair without =", []string{"--grpc-listen", "127.0.0.1:8081", "--rls-xds-server", "x:1", "--rls-xds-node-metadata", "cluster:eg"}, nil,
			`invalid --rls-xds-node-metadata "cluster:eg": "cluster:eg" is no key=value pair`},
		{"a pair without = from env", []string{"--grpc-listen", "127.0.0.1:8081", "--rls-xds-server", "x:1"}, map[string]string{"SLUICE_RLS_XDS_HEADERS": "=v"},
			`invalid SLUICE_RLS_XDS_HEADERS "=v": "=v" is no key=value pair`},
		{"zero retry", []string{"--grpc-listen", "127.0.0.1:8081", "--rls-xds-server", "x:1", "--rls-xds-retry", "0s"}, nil,
			`invalid --rls-xds-retry "0s": must be a positive duration such as 3s`},
		{"cert without key", []string{"--grpc-listen", "127.0.0.1:8081", "--rls-xds-server", "x:1", "--rls-xds-tls-cert", ca}, nil,
			"invalid --rls-xds-tls-cert and --rls-xds-tls-key: give both or neither"},
		{"missing CA", []string{"--grpc-listen", "127.0.0.1:8081", "--rls-xds-server", "x:1", "--rls-xds-tls-ca", "/nonexistent/ca.pem"}, nil,
			`invalid --rls-xds-tls-ca "/nonexistent/ca.pem": no such file or directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.args, tc.env)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}
