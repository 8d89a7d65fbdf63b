package rls

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHTTPPort runs the peer's HTTP port over HTTP: its probe follows
// readiness, and /json decides as ShouldRateLimit does, in the peer's
// codes.
func TestHTTPPort(t *testing.T) {
	var down atomic.Bool
	s, _ := newAnswering(t, Config{Ready: func() error {
		if down.Load() {
			return errors.New("the upstream Redis cannot decide")
		}
		return nil
	}})
	srv := httptest.NewServer(s.HTTPHandler())
	defer srv.Close()

	ip := `{"domain":"shop","descriptors":[{"entries":[{"key":"client_ip","value":"10.0.0.1"}]}]}`
	many := `{"domain":"shop","descriptors":[` + strings.Repeat(`{"entries":[{"key":"user","value":"u"}]},`, 64) +
		`{"entries":[{"key":"user","value":"u"}]}]}`
	for _, tc := range []struct {
		name, method, path, body string
		down                     bool
		code                     int
		says                     string
	}{
		{"probe while ready", "GET", "/healthcheck", "", false, 200, "OK"},
		{"probe while not ready", "GET", "/healthcheck", "", true, 500, "the upstream Redis cannot decide"},
		{"first of two", "POST", "/json", ip, false, 200, `"limitRemaining":1`},
		{"second of two", "POST", "/json", ip, false, 200, `"overallCode":"OK"`},
		{"third of two", "POST", "/json", ip, false, 429, `"overallCode":"OVER_LIMIT"`},
		{"not JSON", "POST", "/json", `{"domain":`, false, 400, "not a RateLimitRequest in JSON"},
		{"over the cap", "POST", "/json", many, false, 400, "more than the cap of 64 (--rls-max-descriptors)"},
		{"too big", "POST", "/json", `{"domain":"` + strings.Repeat("x", maxJSONRequest) + `"}`, false, 400, "reading the request"},
		{"GET", "GET", "/json", "", false, 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			down.Store(tc.down)
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.code || !strings.Contains(string(b), tc.says) {
				t.Errorf("%d %s\nwant %d and %q", res.StatusCode, b, tc.code, tc.says)
			}
			if tc.code == 200 && tc.path == "/json" && res.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q", res.Header.Get("Content-Type"))
			}
		})
	}
}
