package rls

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/internal/rlsopts"
	"github.com/sluice-rl/sluice/rlsconfig"
	"github.com/sluice-rl/sluice/service"
)

// answersYAML has one rule per behaviour the table below answers.
const answersYAML = `domain: shop
descriptors:
  - key: client_ip
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: health
    rate_limit: {unlimited: true}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: partner
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 5, name: tenant}
  - key: vip
    rate_limit:
      unit: hour
      requests_per_unit: 100
      replaces: [{name: tenant}]
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: paced
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra, burst: 20, name: paced}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 50, name: bucket}
`

// answersNow is ten minutes into an hour: every hourly window has 50
// minutes left, by the store's clock.
var answersNow = time.Date(2026, 1, 1, 9, 10, 0, 0, time.UTC)

// newAnswering serves yaml through the service on an in-memory store whose
// clock is pinned at answersNow, and returns the store too.
func newAnswering(t *testing.T, cfg Config) (*Server, *memstore.Store) {
	t.Helper()
	mem, err := memstore.New(memstore.Config{Now: func() time.Time { return answersNow }})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rlsconfig.Parse(rlsconfig.File{Name: "answers.yaml", Data: []byte(answersYAML)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Service, cfg.Rules = svc, func() *rlsconfig.Config { return rules }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, mem
}

func entry(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// want is one descriptor's expected status: its code, the limit it names
// (rpu 0: no current_limit) and what is left.
type want struct {
	over      bool
	rpu       uint32
	name      string
	remaining uint32
}

var noLimit = want{}

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

func check(t *testing.T, s *Server, overall pb.RateLimitResponse_Code, ws []want, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != overall {
		t.Errorf("overall %v; want %v", resp.OverallCode, overall)
	}
	if len(resp.Statuses) != len(ws) {
		t.Fatalf("%d statuses; want %d", len(resp.Statuses), len(ws))
	}
	for i, w := range ws {
		st := resp.Statuses[i]
		code := ok
		if w.over {
			code = over
		}
		if st.Code != code || st.LimitRemaining != w.remaining {
			t.Errorf("status %d: %v, %d left; want %v, %d left", i, st.Code, st.LimitRemaining, code, w.remaining)
		}
		switch l := st.CurrentLimit; {
		case w.rpu == 0 && l != nil:
			t.Errorf("status %d: current_limit %v; want none", i, l)
		case w.rpu != 0 && (l == nil || l.RequestsPerUnit != w.rpu || l.Name != w.name || l.Unit != pb.RateLimitResponse_RateLimit_HOUR):
			t.Errorf("status %d: current_limit %v; want %d an hour named %q", i, l, w.rpu, w.name)
		}
	}
	return resp
}

// The answers that tests/rls_test.go checks end to end through the binary,
// here in the package, on the in-memory store through the service: one
// subtest per behaviour, each on a server of its own.
func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *Server, mem *memstore.Store)
	}{
		{"counts down, then over", func(t *testing.T, s *Server, _ *memstore.Store) {
			check(t, s, ok, []want{{rpu: 2, remaining: 1}}, entry("client_ip", "a"))
			check(t, s, ok, []want{{rpu: 2, remaining: 0}}, entry("client_ip", "a"))
			check(t, s, over, []want{{over: true, rpu: 2}}, entry("client_ip", "a"))
			check(t, s, ok, []want{{rpu: 2, remaining: 1}}, entry("client_ip", "b"))
		}},
		{"unlimited: OK, 4294967295, never in the store", func(t *testing.T, s *Server, mem *memstore.Store) {
			for range 3 {
				check(t, s, ok, []want{{remaining: math.MaxUint32}}, entry("health", "probe"))
			}
			if n := mem.Len(); n != 0 {
				t.Errorf("the store holds %d states after unlimited calls; want none", n)
			}
		}},
		{"unknown descriptor: OK without a limit", func(t *testing.T, s *Server, _ *memstore.Store) {
			check(t, s, ok, []want{noLimit}, entry("nothing", "here"))
		}},
		{"shadow mode: OK, with what an over-limit status carries", func(t *testing.T, s *Server, _ *memstore.Store) {
			check(t, s, ok, []want{{rpu: 1, remaining: 0}}, entry("beta", "u1"))
			check(t, s, ok, []want{{rpu: 1, remaining: 0}}, entry("beta", "u1"))
		}},
		{"quota mode: over only when every quota rule is", func(t *testing.T, s *Server, _ *memstore.Store) {
			check(t, s, ok, []want{{rpu: 1}}, entry("partner", "acme"))
			check(t, s, ok, []want{{over: true, rpu: 1}, {rpu: 1}}, entry("partner", "acme"), entry("partner", "other"))
			check(t, s, over, []want{{over: true, rpu: 1}}, entry("partner", "acme"))
		}},
		{"quota mode beside a rate rule over: over", func(t *testing.T, s *Server, _ *memstore.Store) {
			check(t, s, ok, []want{{rpu: 2, remaining: 1}}, entry("client_ip", "q"))
			check(t, s, ok, []want{{rpu: 2}}, entry("client_ip", "q"))
			check(t, s, over, []want{{over: true, rpu: 2}, {rpu: 1}}, entry("client_ip", "q"), entry("partner", "p"))
		}},
		{"replaces: the named rule is dropped for the call", func(t *testing.T, s *Server, _ *memstore.Store) {
			check(t, s, ok, []want{noLimit, {rpu: 100, remaining: 99}}, entry("tenant", "t1"), entry("vip", "v1"))
			check(t, s, ok, []want{{rpu: 5, name: "tenant", remaining: 4}}, entry("tenant", "t1"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, mem := newAnswering(t, Config{})
			tc.run(t, s, mem)
		})
	}
}

// The headers: the peer's three from the descriptor closest to its limit,
// the draft's fields, and Retry-After when over, from the refused
// descriptor whatever is closer; reset times by the store's clock.
func TestAnswerHeaders(t *testing.T) {
	for _, tc := range []struct {
		set     rlsopts.Headers
		allowed string // the headers of user (10/h) and tenant (5/h), first call
		refused string // tenant used up, with client_ip (2/h, closer to nothing) beside it
	}{
		{rlsopts.HeadersOff, "", ""},
		{rlsopts.HeadersPeer, "RateLimit-Limit: 5|RateLimit-Remaining: 4|RateLimit-Reset: 3000",
			"RateLimit-Limit: 5|RateLimit-Remaining: 0|RateLimit-Reset: 3000"},
		{rlsopts.HeadersDraft, `RateLimit-Policy: "tenant";q=5;w=3600|RateLimit: "tenant";r=4;t=3000`,
			`RateLimit-Policy: "tenant";q=5;w=3600|RateLimit: "tenant";r=0;t=3000|Retry-After: 3000`},
		{rlsopts.HeadersBoth, `RateLimit-Limit: 5|RateLimit-Remaining: 4|RateLimit-Reset: 3000|RateLimit-Policy: "tenant";q=5;w=3600|RateLimit: "tenant";r=4;t=3000`,
			`RateLimit-Limit: 5|RateLimit-Remaining: 0|RateLimit-Reset: 3000|RateLimit-Policy: "tenant";q=5;w=3600|RateLimit: "tenant";r=0;t=3000|Retry-After: 3000`},
	} {
		t.Run(tc.set.String(), func(t *testing.T) {
			s, _ := newAnswering(t, Config{Headers: tc.set})
			r := check(t, s, ok, []want{{rpu: 10, remaining: 9}, {rpu: 5, name: "tenant", remaining: 4}},
				entry("user", "x"), entry("tenant", "x"))
			if got := headerLine(r); got != tc.allowed {
				t.Errorf("allowed: %s; want %s", got, tc.allowed)
			}
			for i := range 5 {
				check(t, s, ok, []want{{rpu: 5, name: "tenant", remaining: uint32(4 - i)}}, entry("tenant", "y"))
			}
			r = check(t, s, over, []want{{over: true, rpu: 5, name: "tenant"}, {rpu: 2, remaining: 1}},
				entry("tenant", "y"), entry("client_ip", "z"))
			if got := headerLine(r); got != tc.refused {
				t.Errorf("refused: %s; want %s", got, tc.refused)
			}
		})
	}
}

// Sluice's own rules: RateLimit-Policy's q over w is the sustained rate,
// and a bucket's or GCRA's burst the vendor parameter sluice-burst, as the
// HTTP check says them (before, the burst was not said at all). The peer's
// set is unchanged.
func TestAnswerHeadersSluiceRules(t *testing.T) {
	for _, tc := range []struct {
		set        rlsopts.Headers
		paced, bkt string
	}{
		{rlsopts.HeadersDraft, `RateLimit-Policy: "paced";q=100;w=60;sluice-burst=21|RateLimit: "paced";r=20;t=1`,
			`RateLimit-Policy: "bucket";q=10;w=1;sluice-burst=50|RateLimit: "bucket";r=49;t=1`},
		{rlsopts.HeadersPeer, "RateLimit-Limit: 100|RateLimit-Remaining: 20|RateLimit-Reset: 1",
			"RateLimit-Limit: 10|RateLimit-Remaining: 49|RateLimit-Reset: 1"},
	} {
		t.Run(tc.set.String(), func(t *testing.T) {
			s, _ := newAnswering(t, Config{Headers: tc.set})
			r, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop",
				Descriptors: []*rlv3.RateLimitDescriptor{entry("paced", "x")}})
			if err != nil {
				t.Fatal(err)
			}
			if got := headerLine(r); got != tc.paced {
				t.Errorf("gcra: %s; want %s", got, tc.paced)
			}
			r, err = s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop",
				Descriptors: []*rlv3.RateLimitDescriptor{entry("bucket", "x")}})
			if err != nil {
				t.Fatal(err)
			}
			if got := headerLine(r); got != tc.bkt {
				t.Errorf("token bucket: %s; want %s", got, tc.bkt)
			}
		})
	}
}

func headerLine(r *pb.RateLimitResponse) string {
	var b []string
	for _, h := range r.ResponseHeadersToAdd {
		b = append(b, h.Key+": "+h.Value)
	}
	return strings.Join(b, "|")
}
