package tests

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestHTTPCheckGateways sends the requests that the Traefik forwardAuth
// and Envoy ext_authz recipes of docs/gateways.md send, spoofing attempts
// included, to the real binary on a real Redis; then, with Redis paused, a
// deny-on-failure policy answers 429 while Redis is still paused, before
// the gateway's own deadline (callerDeadline).
func TestHTTPCheckGateways(t *testing.T) {
	policies := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(policies, []byte(`policies:
  api:
    algorithm: fixed_window
    limit: 2
    period: 1h
  strict:
    algorithm: fixed_window
    limit: 100
    period: 1h
    on_failure: deny
`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := redistest.Start(t)
	s := startDoors(t, "", "--policies", policies, "--upstream", "redis://"+r.Addr, "--upstream-timeout", "100ms",
		"--http-key-header", "X-Forwarded-For")
	client := &http.Client{Timeout: callerDeadline}
	check := func(method, target string, h ...string) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+s.HTTP+target, nil)
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Add(h[i], h[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	codes := func(n int, f func() *http.Response) string {
		var out []string
		for range n {
			out = append(out, f().Status[:3])
		}
		return strings.Join(out, " ")
	}

	// Traefik: a fixed address with the policy; the key is the address
	// Traefik wrote last into X-Forwarded-For; the client's X-Sluice-*
	// headers change nothing.
	traefik := func(client string) func() *http.Response {
		return func() *http.Response {
			return check(http.MethodGet, "/v1/check?policy=api", "X-Forwarded-For", client,
				"X-Sluice-Key", "other", "X-Sluice-Cost", "0", "X-Sluice-Policy", "strict")
		}
	}
	if got := codes(3, traefik("198.51.100.1, 203.0.113.1")); got != "200 200 429" {
		t.Errorf("traefik, one client: %s", got)
	}
	if got := codes(1, traefik("198.51.100.1, 203.0.113.2")); got != "200" {
		t.Errorf("traefik, another client behind the same spoofed first entry: %s", got)
	}

	// Envoy ext_authz: the original method and path after the prefix, the
	// client's query ignored, the policy from headers_to_add.
	envoy := func() *http.Response {
		return check(http.MethodPost, "/v1/check/orders/7?policy=strict&key=mine&cost=0",
			"X-Sluice-Policy", "api", "X-Forwarded-For", "192.0.2.9")
	}
	resp := envoy()
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "1" || resp.Header.Get("RateLimit-Policy") != `"api";q=2;w=3600` {
		t.Errorf("ext_authz: %d %v", resp.StatusCode, resp.Header)
	}
	envoy()
	if resp := envoy(); resp.StatusCode != 429 || !between(resp.Header.Get("Retry-After"), 1, 3600) ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("ext_authz, over: %d %v", resp.StatusCode, resp.Header)
	}

	// An outage: the policy's failure mode answers while Redis cannot (a
	// check waiting for Redis would fail at the deadline instead).
	pauseRedis(t, r)
	for i := range 3 {
		if resp := check(http.MethodGet, "/v1/check?policy=strict&key=k"); resp.StatusCode != 429 {
			t.Errorf("outage %d: %d, want 429 by the policy's failure mode", i, resp.StatusCode)
		}
	}
}
