package httpcheck

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/service"
)

type policies map[string]engine.Policy

func (p policies) Lookup(name string) (engine.Policy, bool) {
	v, ok := p[name]
	return v, ok
}

func newServer(t testing.TB, token string) *Server {
	return newServerAt(t, time.Unix(1_800_000_030, 0), Config{Token: token}, service.Config{Policies: policies{
		"api": {Name: "api", Prefix: "api:", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Minute}},
		"two": {Name: "two", Prefix: "two:", Limits: []engine.NamedLimit{
			{Name: "burst", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 5}},
			{Name: "hourly", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Hour}},
		}},
	}})
}

// newServerAt is a Server by cfg over a service by svc (its store and
// clock set here): an in-memory store whose clock stands still at now.
func newServerAt(t testing.TB, now time.Time, cfg Config, svc service.Config) *Server {
	t.Helper()
	clock := func() time.Time { return now }
	mem, err := memstore.New(memstore.Config{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	svc.Store, svc.Now = mem, clock
	if cfg.Service, err = service.New(svc); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(s *Server, target string, h ...string) *httptest.ResponseRecorder {
	return do(s, http.MethodGet, target, h...)
}

func post(s *Server, target string, h ...string) *httptest.ResponseRecorder {
	return do(s, http.MethodPost, target, h...)
}

// do serves a request by method to target, with h's header names and
// values in pairs.
func do(s *Server, method, target string, h ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(h); i += 2 {
		r.Header.Set(h[i], h[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

func TestCheck(t *testing.T) {
	s := newServer(t, "")
	// The clock stands 30s into a minute window.
	for i, want := range []string{"1", "0"} {
		w := get(s, "/v1/check?policy=api&key=k")
		h := w.Header()
		if w.Code != 200 || h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != want ||
			h.Get("X-RateLimit-Reset") != "30" || h.Get("RateLimit-Policy") != `"api";q=2;w=60` ||
			h.Get("RateLimit") != `"api";r=`+want+`;t=30` || h.Get("Retry-After") != "" {
			t.Fatalf("allowed %d: %d %v", i, w.Code, h)
		}
	}
	w := get(s, "/v1/check?policy=api&key=k")
	h := w.Header()
	if w.Code != 429 || h.Get("Retry-After") != "30" || h.Get("X-RateLimit-Remaining") != "0" ||
		h.Get("Content-Type") != "application/problem+json" || !strings.Contains(w.Body.String(), `"status":429`) {
		t.Fatalf("refused: %d %v %s", w.Code, h, w.Body)
	}
	if w := get(s, "/v1/check?policy=api&key=k&deny_status=403"); w.Code != 403 || w.Header().Get("Retry-After") != "30" {
		t.Fatalf("deny_status=403: %d %v", w.Code, w.Header())
	}
	if w := get(s, "/v1/check/any/path", HeaderPolicy, "api", HeaderKey, "other"); w.Code != 200 {
		t.Fatalf("header form: %d", w.Code)
	}
	for _, tc := range []struct {
		target string
		code   int
		reason string
	}{
		{"/v1/check?policy=nope&key=k", 400, "invalid policy nope: no such policy"},
		{"/v1/check?policy=api&key=k&cost=3", 400, "invalid cost 3: exceeds the capacity 2"},
		{"/v1/check?policy=api", 400, "missing key"},
		{"/elsewhere", 404, "no check at"},
	} {
		w := get(s, tc.target)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.reason) || strings.Count(w.Body.String(), "\n") != 1 {
			t.Errorf("%s: %d %q, want %d %q", tc.target, w.Code, w.Body, tc.code, tc.reason)
		}
	}
}

func TestCheckToken(t *testing.T) {
	s := newServer(t, "s3cret")
	for _, tc := range []struct {
		h    []string
		code int
	}{
		{nil, 401},
		{[]string{"Authorization", "Bearer wrong"}, 401},
		{[]string{"Authorization", "Bearer s3cret"}, 200},
		{[]string{"Authorization", "bearer s3cret"}, 200},
		{[]string{HeaderToken, "s3cret"}, 200},
	} {
		if w := get(s, "/v1/check?policy=api&key=t&cost=0", tc.h...); w.Code != tc.code {
			t.Errorf("%v: %d, want %d", tc.h, w.Code, tc.code)
		}
	}
}

// BenchmarkCheck: one allowed check through the handler, on the in-memory
// store.
func BenchmarkCheck(b *testing.B) {
	s := newServer(b, "")
	r := httptest.NewRequest(http.MethodGet, "/v1/check?policy=api&key=k&cost=0", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		s.ServeHTTP(w, r)
	}
}

// A multi-limit policy checks as RL.ALLOW decides it: all limits must
// admit; the X-RateLimit-* headers speak of the limit that bound the
// answer, and the draft's fields give an item per limit.
func TestCheckMultiLimit(t *testing.T) {
	s := newServer(t, "")
	const policy = `"two.burst";q=1;w=1;sluice-burst=5, "two.hourly";q=2;w=3600`
	for i, want := range []string{"1", "0"} {
		w := get(s, "/v1/check?policy=two&key=k")
		h := w.Header()
		if w.Code != 200 || h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != want ||
			h.Get("RateLimit-Policy") != policy ||
			h.Get("RateLimit") != fmt.Sprintf(`"two.burst";r=%d;t=%d, "two.hourly";r=%s;t=3570`, 4-i, i+1, want) {
			t.Fatalf("allowed %d: %d %v", i, w.Code, h)
		}
	}
	// The hourly limit refuses while the burst limit has room; the clock
	// stands 30s into its hour.
	w := get(s, "/v1/check?policy=two&key=k")
	if h := w.Header(); w.Code != 429 || h.Get("Retry-After") != "3570" || h.Get("RateLimit-Policy") != policy ||
		h.Get("RateLimit") != `"two.burst";r=3;t=2, "two.hourly";r=0;t=3570` {
		t.Fatalf("refused: %d %v", w.Code, h)
	}
}
