package settings

import (
	"strings"
	"testing"
)

// The doors' protected mode and their settings' pairs: each wrong setting
// is refused with a message that names the way out.
func TestValidateDoors(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *Config)
		err  string // substring; empty: valid
	}{
		{"grpc on loopback", func(c *Config) { c.GRPCListen, c.RLSConfig = "127.0.0.1:8081", "d" }, ""},
		{"grpc without --rls-config", func(c *Config) { c.GRPCListen = "127.0.0.1:8081" }, "--grpc-listen needs --rls-config"},
		{"grpc beyond loopback", func(c *Config) { c.GRPCListen, c.RLSConfig = "0.0.0.0:8081", "d" }, "--grpc-tls-client-ca"},
		{"grpc beyond loopback, insecure", func(c *Config) { c.GRPCListen, c.RLSConfig, c.GRPCInsecure = "0.0.0.0:8081", "d", true }, ""},
		{"grpc beyond loopback, mTLS", func(c *Config) {
			c.GRPCListen, c.RLSConfig, c.GRPCTLSCert, c.GRPCTLSKey, c.GRPCTLSClientCA = "0.0.0.0:8081", "d", "c", "k", "ca"
		}, ""},
		{"grpc cert without key", func(c *Config) { c.GRPCTLSCert = "c" }, "give both or neither"},
		{"grpc client CA without TLS", func(c *Config) { c.GRPCTLSClientCA = "ca" }, "needs --grpc-tls-cert"},
		{"http on loopback", func(c *Config) { c.HTTPListen = "[::1]:8082" }, ""},
		{"http beyond loopback", func(c *Config) { c.HTTPListen = ":8082" }, "--http-token"},
		{"http beyond loopback, token", func(c *Config) { c.HTTPListen, c.HTTPToken = ":8082", "t" }, ""},
		{"http beyond loopback, TLS", func(c *Config) { c.HTTPListen, c.HTTPTLSCert, c.HTTPTLSKey = ":8082", "c", "k" }, ""},
		{"http beyond loopback, insecure", func(c *Config) { c.HTTPListen, c.HTTPInsecure = ":8082", true }, ""},
		{"http bad address", func(c *Config) { c.HTTPListen = "8082" }, "invalid --http-listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.set(&c)
			err := c.Validate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate: %v, want %q", err, tc.err)
			}
		})
	}
}
