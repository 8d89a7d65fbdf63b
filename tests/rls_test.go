package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/redisurl"
)

// rlsShop is envoyproxy/ratelimit configuration written for these tests,
// one rule per behaviour of its documentation. Units are hours and days,
// so that no window ends during a test.
const rlsShop = `domain: shop
descriptors:
  - key: client_ip
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: client_ip
    value: 203.0.113.9
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: client_ip
    value: 198.51.100.1
  - key: health
    rate_limit: {unlimited: true}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: plan
    value: free
    descriptors:
      - key: customer
        rate_limit: {unit: day, requests_per_unit: 2, name: free_daily}
  - key: partner
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /img/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: bucket
    value: exports/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 5, name: tenant}
  - key: vip
    rate_limit:
      unit: hour
      requests_per_unit: 100
      replaces: [{name: tenant}]
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// rlsSluice uses Sluice's own fields: a file the peer would refuse.
const rlsSluice = `domain: sluice
descriptors:
  - key: api_key
    rate_limit: {algorithm: gcra, period: 30s, requests_per_unit: 60, burst: 2}
  - key: strict
    rate_limit: {unit: hour, requests_per_unit: 10, refusal_takes_nothing: true}
`

// writeRLS writes files (name → body) into a fresh directory.
func writeRLS(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// doors is a sluice with its gRPC and HTTP doors on free loopback ports.
type doors struct {
	*sluice
	GRPC string
	HTTP string
}

// startDoors starts sluice with the gRPC door on --rls-config dir (when
// dir is set) and the HTTP check, waits until both accept, and returns it.
func startDoors(t *testing.T, dir string, args ...string) *doors {
	t.Helper()
	d := &doors{HTTP: fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))}
	args = append(args, "--http-listen", d.HTTP)
	if dir != "" {
		d.GRPC = fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
		args = append(args, "--grpc-listen", d.GRPC, "--rls-config", dir)
	}
	d.sluice = startSluice(t, args...)
	for _, addr := range []string{d.GRPC, d.HTTP} {
		if addr == "" {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sluice does not accept on %s:\n%s", addr, d.logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return d
}

// rlsClient is Envoy's rate limit filter, played with go-control-plane's
// generated client.
func rlsClient(t testing.TB, addr string) (pb.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn), conn
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func ask(t *testing.T, c pb.RateLimitServiceClient, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

// st is the expected part of a descriptor status: code, current_limit
// (rpu < 0 for none) and limit_remaining.
type st struct {
	code      pb.RateLimitResponse_Code
	rpu       int64
	unit      pb.RateLimitResponse_RateLimit_Unit
	name      string
	remaining uint32
}

const (
	rlOK   = pb.RateLimitResponse_OK
	rlOver = pb.RateLimitResponse_OVER_LIMIT
)

func checkStatuses(t *testing.T, resp *pb.RateLimitResponse, overall pb.RateLimitResponse_Code, want ...st) {
	t.Helper()
	if resp.OverallCode != overall {
		t.Errorf("overall_code %v, want %v (%v)", resp.OverallCode, overall, resp)
	}
	if len(resp.Statuses) != len(want) {
		t.Fatalf("%d statuses, want %d: %v", len(resp.Statuses), len(want), resp)
	}
	for i, w := range want {
		g := resp.Statuses[i]
		if g.Code != w.code || g.LimitRemaining != w.remaining {
			t.Errorf("status %d: code %v remaining %d, want %v %d", i, g.Code, g.LimitRemaining, w.code, w.remaining)
		}
		if w.rpu < 0 {
			if g.CurrentLimit != nil || g.DurationUntilReset != nil {
				t.Errorf("status %d: current_limit %v, duration %v; want none", i, g.CurrentLimit, g.DurationUntilReset)
			}
			continue
		}
		cl := g.CurrentLimit
		if cl == nil || int64(cl.RequestsPerUnit) != w.rpu || cl.Unit != w.unit || cl.Name != w.name {
			t.Errorf("status %d: current_limit %v, want %d per %v named %q", i, cl, w.rpu, w.unit, w.name)
			continue
		}
		period := map[pb.RateLimitResponse_RateLimit_Unit]int64{pb.RateLimitResponse_RateLimit_SECOND: 1, pb.RateLimitResponse_RateLimit_HOUR: 3600,
			pb.RateLimitResponse_RateLimit_DAY: 86400, pb.RateLimitResponse_RateLimit_MINUTE: 60}[w.unit]
		if s := g.DurationUntilReset.GetSeconds(); s < 1 || s > period {
			t.Errorf("status %d: duration_until_reset %v, want 1..%ds", i, g.DurationUntilReset, period)
		}
	}
}

const (
	rlHour   = pb.RateLimitResponse_RateLimit_HOUR
	rlDay    = pb.RateLimitResponse_RateLimit_DAY
	rlMinute = pb.RateLimitResponse_RateLimit_MINUTE
)

// TestRLSAnswers: every answer field and rule of the peer, through a
// real gRPC client, on the in-memory store and on a real Redis.
func TestRLSAnswers(t *testing.T) {
	dir := writeRLS(t, map[string]string{"shop.yaml": rlsShop, "sluice.yaml": rlsSluice})
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			var redis *redistest.Server
			var args []string
			if be.name == "upstream" {
				redis = redistest.Start(t)
				args = []string{"--upstream", "redis://" + redis.Addr, "--upstream-timeout", decidingTimeout}
			}
			s := startDoors(t, dir, args...)
			c, _ := rlsClient(t, s.GRPC)
			noLimit := st{code: rlOK, rpu: -1}

			t.Run("key alone counts each value; statuses and overall code", func(t *testing.T) {
				for _, rem := range []uint32{2, 1, 0} {
					checkStatuses(t, ask(t, c, "shop", 0, desc("client_ip", "192.0.2.1")), rlOK, st{rlOK, 3, rlHour, "", rem})
				}
				checkStatuses(t, ask(t, c, "shop", 0, desc("client_ip", "192.0.2.1")), rlOver, st{rlOver, 3, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "shop", 0, desc("client_ip", "192.0.2.2")), rlOK, st{rlOK, 3, rlHour, "", 2})
			})
			t.Run("statuses in descriptor order; unknown descriptor and whitelisted value OK without a limit", func(t *testing.T) {
				r := ask(t, c, "shop", 0, desc("client_ip", "192.0.2.3"), desc("nothing", "here"), desc("client_ip", "198.51.100.1"),
					desc("client_ip", "203.0.113.9"))
				checkStatuses(t, r, rlOver, st{rlOK, 3, rlHour, "", 2}, noLimit, noLimit, st{rlOver, 0, rlHour, "", 0})
			})
			t.Run("unknown domain: OK without a limit", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "nope", 0, desc("client_ip", "192.0.2.1")), rlOK, noLimit)
			})
			t.Run("unlimited: OK, 4294967295, never in the store", func(t *testing.T) {
				before := dbsize(t, redis)
				for range 3 {
					checkStatuses(t, ask(t, c, "shop", 0, desc("health", "probe")), rlOK, st{code: rlOK, rpu: -1, remaining: math.MaxUint32})
				}
				if after := dbsize(t, redis); after != before {
					t.Errorf("unlimited calls wrote to Redis: %s keys, then %s", before, after)
				}
			})
			t.Run("nested: a limit only where the descriptor ends, with its name", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "shop", 0, desc("plan", "free", "customer", "c1")), rlOK, st{rlOK, 2, rlDay, "free_daily", 1})
				checkStatuses(t, ask(t, c, "shop", 0, desc("plan", "free")), rlOK, noLimit)
				checkStatuses(t, ask(t, c, "shop", 0, desc("customer", "c1")), rlOK, noLimit)
			})
			t.Run("wildcard: each value its own count; share_threshold: one count", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "shop", 0, desc("path", "/img/a")), rlOK, st{rlOK, 2, rlHour, "", 1})
				checkStatuses(t, ask(t, c, "shop", 0, desc("path", "/img/b")), rlOK, st{rlOK, 2, rlHour, "", 1})
				checkStatuses(t, ask(t, c, "shop", 0, desc("bucket", "exports/a")), rlOK, st{rlOK, 2, rlHour, "", 1})
				checkStatuses(t, ask(t, c, "shop", 0, desc("bucket", "exports/b")), rlOK, st{rlOK, 2, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "shop", 0, desc("bucket", "exports/c")), rlOver, st{rlOver, 2, rlHour, "", 0})
			})
			t.Run("shadow mode: OK, with what an over-limit status carries", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "shop", 0, desc("beta", "u1")), rlOK, st{rlOK, 1, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "shop", 0, desc("beta", "u1")), rlOK, st{rlOK, 1, rlHour, "", 0})
			})
			t.Run("quota mode: over only when every quota rule is", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "shop", 0, desc("partner", "acme")), rlOK, st{rlOK, 1, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "shop", 0, desc("partner", "acme"), desc("partner", "other")), rlOK,
					st{rlOver, 1, rlHour, "", 0}, st{rlOK, 1, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "shop", 0, desc("partner", "acme")), rlOver, st{rlOver, 1, rlHour, "", 0})
			})
			t.Run("replaces: the named rule is dropped for the call", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "shop", 0, desc("tenant", "t1"), desc("vip", "v1")), rlOK, noLimit, st{rlOK, 100, rlHour, "", 99})
				checkStatuses(t, ask(t, c, "shop", 0, desc("tenant", "t1")), rlOK, st{rlOK, 5, rlHour, "tenant", 4})
			})
			t.Run("hits_addend: 0 means 1, the request's value, the descriptor's wrapper, 0 looks", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "shop", 3, desc("user", "h1")), rlOK, st{rlOK, 10, rlHour, "", 7})
				look := desc("user", "h1")
				look.HitsAddend = wrapperspb.UInt64(0)
				checkStatuses(t, ask(t, c, "shop", 3, look), rlOK, st{rlOK, 10, rlHour, "", 7})
				five := desc("user", "h1")
				five.HitsAddend = wrapperspb.UInt64(5)
				checkStatuses(t, ask(t, c, "shop", 3, five), rlOK, st{rlOK, 10, rlHour, "", 2})
				checkStatuses(t, ask(t, c, "shop", 3, desc("user", "h1")), rlOver, st{rlOver, 10, rlHour, "", 0})
				// As the peer's INCRBY, the refused hits were counted (11 of
				// 10): the next call of 1 is over too.
				checkStatuses(t, ask(t, c, "shop", 0, desc("user", "h1")), rlOver, st{rlOver, 10, rlHour, "", 0})
				big := desc("user", "h2")
				big.HitsAddend = wrapperspb.UInt64(11)
				checkStatuses(t, ask(t, c, "shop", 0, big), rlOver, st{rlOver, 10, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "shop", 0, look), rlOver, st{rlOver, 10, rlHour, "", 0})
			})
			t.Run("refusal_takes_nothing: a refused hit is not counted", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "sluice", 8, desc("strict", "s1")), rlOK, st{rlOK, 10, rlHour, "", 2})
				checkStatuses(t, ask(t, c, "sluice", 3, desc("strict", "s1")), rlOver, st{rlOver, 10, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "sluice", 1, desc("strict", "s1")), rlOK, st{rlOK, 10, rlHour, "", 1})
				big := desc("strict", "s2")
				big.HitsAddend = wrapperspb.UInt64(11)
				checkStatuses(t, ask(t, c, "sluice", 0, big), rlOver, st{rlOver, 10, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "sluice", 1, desc("strict", "s2")), rlOK, st{rlOK, 10, rlHour, "", 9})
			})
			t.Run("a descriptor's limit from Envoy wins, only in a configured domain", func(t *testing.T) {
				d := desc("client_ip", "192.0.2.50")
				d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
				checkStatuses(t, ask(t, c, "shop", 0, d), rlOK, st{rlOK, 1, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "shop", 0, d), rlOver, st{rlOver, 1, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "nope", 0, d), rlOK, noLimit)
			})
			t.Run("Sluice's own fields: 30s GCRA reported per minute", func(t *testing.T) {
				r := ask(t, c, "sluice", 0, desc("api_key", "k1"))
				checkStatuses(t, r, rlOK, st{rlOK, 60, rlMinute, "", 2})
			})
			t.Run("INVALID_ARGUMENT", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				noUnit := desc("client_ip", "192.0.2.60")
				noUnit.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
				for _, tc := range []struct {
					req  *pb.RateLimitRequest
					text string
				}{
					{&pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "b")}}, "rate limit domain must not be empty"},
					{&pb.RateLimitRequest{Domain: "shop"}, "rate limit descriptor list must not be empty"},
					{&pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{noUnit}}, "no valid unit"},
				} {
					_, err := c.ShouldRateLimit(ctx, tc.req)
					if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.text) {
						t.Errorf("%v: %v, want InvalidArgument %q", tc.req, err, tc.text)
					}
				}
			})
		})
	}
}

// dbsize is the number of keys in r but the sidecars' fleet membership
// (docs/operating.md, "When Redis is away"), or "" without a Redis.
func dbsize(t *testing.T, r *redistest.Server) string {
	t.Helper()
	if r == nil {
		return ""
	}
	n, err := r.Do("DBSIZE")
	fleet, err2 := r.Do("EXISTS", redisurl.DefaultPrefix+"fleet")
	if err != nil || err2 != nil {
		t.Fatal(errors.Join(err, err2))
	}
	return strconv.Itoa(atoi(n) - atoi(fleet))
}

// TestRLSHeaders: the peer's RateLimit-* headers from the descriptor
// closest to its limit, the IETF draft's fields, and Retry-After when over.
func TestRLSHeaders(t *testing.T) {
	dir := writeRLS(t, map[string]string{"shop.yaml": rlsShop})
	for _, tc := range []struct {
		set  string
		want []string // header names, in order
	}{
		{"off", nil},
		{"peer", []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}},
		{"both", []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit"}},
	} {
		t.Run(tc.set, func(t *testing.T) {
			s := startDoors(t, dir, "--rls-response-headers", tc.set)
			c, _ := rlsClient(t, s.GRPC)
			// user (10/h, 9 left) and tenant (5/h, 4 left): tenant is closer.
			r := ask(t, c, "shop", 0, desc("user", "x"), desc("tenant", "x"))
			got := headerMap(r.ResponseHeadersToAdd)
			if names := headerNames(r.ResponseHeadersToAdd); strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("headers %v, want %v", names, tc.want)
			}
			if tc.set == "off" {
				return
			}
			if got["RateLimit-Limit"] != "5" || got["RateLimit-Remaining"] != "4" || !between(got["RateLimit-Reset"], 1, 3600) {
				t.Errorf("allowed: %v", got)
			}
			if tc.set == "both" {
				if got["RateLimit-Policy"] != `"tenant";q=5;w=3600` || !strings.HasPrefix(got["RateLimit"], `"tenant";r=4;t=`) {
					t.Errorf("draft fields: %v", got)
				}
			}
			// Over: the refused descriptor's numbers, whatever is closer.
			for range 5 {
				ask(t, c, "shop", 0, desc("tenant", "y"))
			}
			r = ask(t, c, "shop", 0, desc("tenant", "y"), desc("client_ip", "192.0.2.77"))
			got = headerMap(r.ResponseHeadersToAdd)
			if r.OverallCode != rlOver || got["RateLimit-Limit"] != "5" || got["RateLimit-Remaining"] != "0" {
				t.Errorf("over: %v %v", r.OverallCode, got)
			}
			if tc.set == "both" && (!between(got["Retry-After"], 1, 3600) || got["RateLimit-Policy"] != `"tenant";q=5;w=3600`) {
				t.Errorf("over, draft: %v", got)
			}
		})
	}
}

func headerMap(hs []*core.HeaderValue) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Key] = h.Value
	}
	return m
}

func headerNames(hs []*core.HeaderValue) []string {
	var out []string
	for _, h := range hs {
		if h.Key != "Retry-After" {
			out = append(out, h.Key)
		}
	}
	return out
}

func between(s string, lo, hi int64) bool {
	var n int64
	_, err := fmt.Sscan(s, &n)
	return err == nil && n >= lo && n <= hi
}

// TestRLSStopWhenOverLimit: by default every descriptor is charged, as the
// peer does; with the option none is when any is over.
func TestRLSStopWhenOverLimit(t *testing.T) {
	dir := writeRLS(t, map[string]string{"shop.yaml": rlsShop})
	for _, tc := range []struct {
		args []string
		left uint32 // what the user descriptor has left after a refused call
	}{
		{nil, 8},
		// As the peer's: the descriptor that was not charged reports what
		// it had left.
		{[]string{"--rls-stop-charging-when-over-limit"}, 9},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			s := startDoors(t, dir, tc.args...)
			c, _ := rlsClient(t, s.GRPC)
			checkStatuses(t, ask(t, c, "shop", 0, desc("user", "u")), rlOK, st{rlOK, 10, rlHour, "", 9})
			r := ask(t, c, "shop", 0, desc("user", "u"), desc("client_ip", "203.0.113.9"))
			checkStatuses(t, r, rlOver, st{rlOK, 10, rlHour, "", tc.left}, st{rlOver, 0, rlHour, "", 0})
			look := desc("user", "u")
			look.HitsAddend = wrapperspb.UInt64(0)
			checkStatuses(t, ask(t, c, "shop", 0, look), rlOK, st{rlOK, 10, rlHour, "", tc.left})
		})
	}
}

// TestRLSUpstreamFailure: with Redis paused (SIGSTOP: connections open,
// nothing answered, where the peer waits for each caller's deadline), each
// rule's failure mode answers every call while Redis is still paused. The
// order is asserted, not milliseconds: a call that waited for Redis could
// only be answered after it resumes, and fails at the caller's deadline.
func TestRLSUpstreamFailure(t *testing.T) {
	dir := writeRLS(t, map[string]string{"f.yaml": `domain: f
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 5, on_failure: allow}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 5, on_failure: deny}
  - key: local
    rate_limit: {unit: hour, requests_per_unit: 5}
`})
	r := redistest.Start(t)
	s := startDoors(t, dir, "--upstream", "redis://"+r.Addr, "--upstream-timeout", "100ms", "--on-upstream-failure", "local")
	c, _ := rlsClient(t, s.GRPC)
	checkStatuses(t, ask(t, c, "f", 0, desc("local", "a")), rlOK, st{rlOK, 5, rlHour, "", 4})
	pauseRedis(t, r)
	// The calls with Redis paused use a value of their own, "b": the one
	// above, on a loaded machine, can overrun the deadline and be counted
	// by the local store too, which would then refuse one call early.
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
		resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "f",
			Descriptors: []*rlv3.RateLimitDescriptor{desc("open", "b"), desc("closed", "b"), desc("local", "b")}})
		cancel()
		if err != nil {
			t.Fatalf("call %d with Redis paused: %v (the caller's deadline is %v)\n%s", i, err, callerDeadline, s.logs)
		}
		codes := []pb.RateLimitResponse_Code{resp.Statuses[0].Code, resp.Statuses[1].Code, resp.Statuses[2].Code}
		if codes[0] != rlOK || codes[1] != rlOver || codes[2] != rlOK {
			t.Errorf("call %d: allow/deny/local answered %v", i, codes)
		}
	}
	// The local store counts on its own: 5 an hour, so the sixth is over.
	checkStatuses(t, ask(t, c, "f", 0, desc("local", "b")), rlOver, st{rlOver, 5, rlHour, "", 0})
}

// callerDeadline is a gateway's own deadline for a call, long beside the
// sidecars' --upstream-timeout of 100ms: a call answered within it while
// Redis is paused was answered by the failure mode, not by Redis, and one
// that waits for Redis fails the test when it ends, not later.
const callerDeadline = 10 * time.Second

// pauseRedis stops r (SIGSTOP) until the test ends.
func pauseRedis(t *testing.T, r *redistest.Server) {
	t.Helper()
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Signal(syscall.SIGCONT) })
}

// TestRLSReload: a changed file applies to the next call; a broken one is
// logged with its file and line, and the configuration in use stays.
func TestRLSReload(t *testing.T) {
	dir := writeRLS(t, map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"})
	s := startDoors(t, dir)
	c, _ := rlsClient(t, s.GRPC)
	checkStatuses(t, ask(t, c, "r", 0, desc("k", "a")), rlOK, st{rlOK, 5, rlHour, "", 4})
	write := func(body string) {
		t.Helper()
		// As a ConfigMap or an editor does: a new file renamed over.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "r.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n")
	waitFor(t, 10*time.Second, func() bool {
		return ask(t, c, "r", 0, desc("k", "b")).Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 7
	}, s.logs)
	write("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	waitFor(t, 10*time.Second, func() bool {
		return strings.Contains(s.logs.String(), "r.yaml:4: invalid rate limit unit 'fortnight'")
	}, s.logs)
	checkStatuses(t, ask(t, c, "r", 0, desc("k", "c")), rlOK, st{rlOK, 7, rlHour, "", 6})
	// SIGHUP reloads too.
	if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool {
		return ask(t, c, "r", 0, desc("k", "d")).Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 9
	}, s.logs)
}

func waitFor(t *testing.T, within time.Duration, cond func() bool, logs *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v; log:\n%s", within, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRLSHealthAndReflection: grpc.health.v1 follows readiness (NOT_SERVING
// while Redis is down under --on-upstream-failure deny), and reflection
// lists the rate limit service for grpcurl.
func TestRLSHealthAndReflection(t *testing.T) {
	dir := writeRLS(t, map[string]string{"shop.yaml": rlsShop})
	r := redistest.Start(t)
	s := startDoors(t, dir, "--upstream", "redis://"+r.Addr, "--on-upstream-failure", "deny", "--upstream-timeout", "100ms")
	c, conn := rlsClient(t, s.GRPC)
	h := healthpb.NewHealthClient(conn)
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health %q: %v", service, err)
		}
		return resp.Status
	}
	for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"} {
		if got := check(name); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v", name, got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown service: %v", err)
	}

	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection lists %v", names)
	}

	r.Kill()
	for range 5 { // failing calls open the breaker
		ask(t, c, "shop", 0, desc("user", "z"))
	}
	waitFor(t, 10*time.Second, func() bool { return check("") == healthpb.HealthCheckResponse_NOT_SERVING }, s.logs)
	r.Restart()
	waitFor(t, 10*time.Second, func() bool { return check("") == healthpb.HealthCheckResponse_SERVING }, s.logs)
}

// TestRLSExactAcrossSidecars: three sidecars on one Redis, many concurrent
// callers on one descriptor limited to 100 a minute: exactly 100 are OK in
// each minute (the minute an answer counted in is told by its
// duration_until_reset, so a run that a loaded machine stretches across a
// minute's end still has one exact count a window).
func TestRLSExactAcrossSidecars(t *testing.T) {
	dir := writeRLS(t, map[string]string{"x.yaml": "domain: x\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"})
	r := redistest.Start(t)
	var clients []pb.RateLimitServiceClient
	for range 3 {
		// Every answer from Redis: with the default 100 ms deadline a
		// loaded machine lets a round trip time out, and the default
		// failure mode (local) then admits from this sidecar's memory.
		s := startDoors(t, dir, "--upstream", "redis://"+r.Addr, "--upstream-timeout", "2s", "--on-upstream-failure", "deny")
		c, _ := rlsClient(t, s.GRPC)
		clients = append(clients, c)
	}
	const callers, calls = 48, 10
	var mu sync.Mutex
	okN, allN := map[int64]int{}, map[int64]int{} // by the window's end, in Unix minutes
	var wg sync.WaitGroup
	errc := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			c := clients[i%len(clients)]
			for range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "x", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "t")}})
				cancel()
				if err != nil {
					errc <- err
					return
				}
				// The window ends duration_until_reset (whole seconds,
				// rounded) after the decision, on a minute: the nearest
				// minute to that from the reply is the window's end.
				end := time.Now().Add(resp.Statuses[0].DurationUntilReset.AsDuration())
				w := int64(math.Round(float64(end.Unix()) / 60))
				mu.Lock()
				allN[w]++
				if resp.OverallCode == rlOK {
					okN[w]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for w, n := range allN {
		if okN[w] != min(100, n) {
			t.Errorf("the minute ending at %s: %d OK of %d calls, want exactly %d", time.Unix(w*60, 0).UTC(), okN[w], n, min(100, n))
		}
	}
}

// TestRLSMutualTLS: off loopback the gRPC door is protected by client
// certificates (--grpc-tls-client-ca). A caller with a certificate of that
// CA is answered; one without a certificate, with a certificate of another
// CA, or in plaintext is not.
func TestRLSMutualTLS(t *testing.T) {
	serverCA, serverCert, serverKey := makeCerts(t)
	clientCA, clientCert, clientKey := makeCerts(t)
	dir := t.TempDir()
	files := map[string][]byte{"server.crt": serverCert, "server.key": serverKey, "client-ca.crt": clientCA}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := startDoors(t, writeRLS(t, map[string]string{"shop.yaml": rlsShop}),
		"--grpc-tls-cert", filepath.Join(dir, "server.crt"), "--grpc-tls-key", filepath.Join(dir, "server.key"),
		"--grpc-tls-client-ca", filepath.Join(dir, "client-ca.crt"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serverCA)
	pair := func(cert, key []byte) []tls.Certificate {
		c, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"client certificate of the CA", credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: pair(clientCert, clientKey)}), true},
		{"no client certificate", credentials.NewTLS(&tls.Config{RootCAs: roots}), false},
		{"client certificate of another CA", credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: pair(serverCert, serverKey)}), false},
		{"plaintext", insecure.NewCredentials(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(tc.creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx,
				&pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("client_ip", "192.0.2.77")}})
			switch {
			case tc.ok && err != nil:
				t.Fatalf("ShouldRateLimit: %v", err)
			case tc.ok:
				checkStatuses(t, resp, rlOK, st{rlOK, 3, rlHour, "", 2})
			case err == nil:
				t.Fatalf("answered %v; want the connection refused", resp)
			case status.Code(err) != codes.Unavailable:
				t.Errorf("error %v; want Unavailable (no TLS session)", err)
			}
		})
	}
}

// TestRLSSharesRoundTrips: the descriptors of a call, and concurrent
// calls, reach Redis through the batcher, as RESP commands do: far fewer
// script calls than calls, let alone than descriptors.
func TestRLSSharesRoundTrips(t *testing.T) {
	dir := writeRLS(t, map[string]string{"x.yaml": "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n" +
		"  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n  - key: c\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"})
	r := redistest.Start(t)
	s := startDoors(t, dir, "--upstream", "redis://"+r.Addr, "--upstream-timeout", "2s", "--on-upstream-failure", "deny")
	c, _ := rlsClient(t, s.GRPC)
	ask(t, c, "x", 0, desc("a", "warm")) // loads the script
	if _, err := r.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	const callers, calls = 50, 4
	var wg sync.WaitGroup
	var over atomic.Int64
	errc := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			for j := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				v := fmt.Sprint(i*calls + j)
				resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "x",
					Descriptors: []*rlv3.RateLimitDescriptor{desc("a", v), desc("b", v), desc("c", v)}})
				cancel()
				if err != nil {
					errc <- err
					return
				}
				if resp.OverallCode != rlOK {
					over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if over.Load() != 0 {
		t.Fatalf("%d calls over a limit they cannot reach: a fallback answered", over.Load())
	}
	info, err := r.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	scripts := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || !strings.HasPrefix(name, "cmdstat_eval") && name != "cmdstat_fcall" {
			continue
		}
		n := 0
		fmt.Sscanf(rest, "%d", &n)
		scripts += n
	}
	t.Logf("%d calls of 3 descriptors: %d script calls in Redis", callers*calls, scripts)
	if scripts == 0 || scripts >= callers*calls {
		t.Errorf("%d script calls for %d calls of 3 descriptors; want fewer than one a call", scripts, callers*calls)
	}
}

// TestRLSBoundedCalls: a call over a cap is refused INVALID_ARGUMENT
// naming the cap (issue 28: one call of 10,000 descriptors overran the
// round trip it shared and pushed its decisions and a RESP client's into
// the failure mode). With the cap raised, such a call is decided in parts:
// neither its decisions nor a concurrent RESP client's are made by the
// failure mode (deny, so that any would be refused), under a deadline that
// one round trip of the whole call overruns.
func TestRLSBoundedCalls(t *testing.T) {
	dir := writeRLS(t, map[string]string{"x.yaml": "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"})
	many := func(n, entries int) []*rlv3.RateLimitDescriptor {
		ds := make([]*rlv3.RateLimitDescriptor, n)
		for i := range ds {
			kv := []string{"a", fmt.Sprint(i)}
			for j := 1; j < entries; j++ {
				kv = append(kv, fmt.Sprint("e", j), "v")
			}
			ds[i] = desc(kv...)
		}
		return ds
	}
	t.Run("caps", func(t *testing.T) {
		s := startDoors(t, dir)
		c, _ := rlsClient(t, s.GRPC)
		for _, tc := range []struct {
			n, entries int
			want       string
		}{
			{65, 1, "rate limit request has 65 descriptors, more than the cap of 64 (--rls-max-descriptors)"},
			{1, 65, "rate limit descriptor 0 has 65 entries, more than the cap of 64 (--rls-max-entries)"},
			{64, 64, ""},
		} {
			resp, err := c.ShouldRateLimit(ctxT(t), &pb.RateLimitRequest{Domain: "x", Descriptors: many(tc.n, tc.entries)})
			if tc.want == "" {
				if err != nil || len(resp.Statuses) != tc.n {
					t.Errorf("%d descriptors of %d entries: %v; want answered", tc.n, tc.entries, err)
				}
				continue
			}
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
				t.Errorf("%d descriptors of %d entries: %v; want InvalidArgument %q", tc.n, tc.entries, err, tc.want)
			}
		}
	})
	t.Run("large call in parts", func(t *testing.T) {
		r := redistest.Start(t)
		// Redis has the time a loaded machine needs (no round trip here
		// may fall back), and the parts are checked where they show: the
		// batches Redis is sent. Undivided, the call's 10,000 decisions go
		// as batches of --batch-max (1,024); in parts of 64, a batch holds
		// at most a part and the one RESP request beside it.
		s := startDoors(t, dir, "--upstream", "redis://"+r.Addr, "--upstream-timeout", decidingTimeout,
			"--on-upstream-failure", "deny", "--rls-max-descriptors", "10000")
		c, _ := rlsClient(t, s.GRPC)
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
		t.Cleanup(func() { rdb.Close() })
		ask(t, c, "x", 0, desc("a", "warm")) // loads the script
		stop := make(chan struct{})
		var refused, resp atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v, err := rdb.Do(ctxT(t), "RL.GCRA", fmt.Sprint("resp:", i), 1000000, 1000000, "1h").Slice()
				resp.Add(1)
				if err != nil || len(v) == 0 || v[0] != int64(1) {
					refused.Add(1)
				}
			}
		})
		for range 3 {
			answer, err := c.ShouldRateLimit(ctxT(t), &pb.RateLimitRequest{Domain: "x", Descriptors: many(10_000, 1)})
			if err != nil {
				t.Fatal(err)
			}
			over := 0
			for _, st := range answer.Statuses {
				if st.Code != rlOK {
					over++
				}
			}
			if over > 0 {
				t.Errorf("%d of 10,000 descriptors over a limit they cannot reach: the failure mode decided", over)
			}
		}
		close(stop)
		wg.Wait()
		if n := refused.Load(); n > 0 || resp.Load() == 0 {
			t.Errorf("the RESP client beside the call: %d of %d decisions refused (the failure mode decided)", n, resp.Load())
		}
		if strings.Contains(s.logs.String(), "failure mode") {
			t.Errorf("the failure mode decided:\n%s", s.logs)
		}
		fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
		var batches, upTo128 uint64
		for _, m := range fams["sluice_batch_size"].GetMetric() {
			h := m.GetHistogram()
			batches += h.GetSampleCount()
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == 128 {
					upTo128 += b.GetCumulativeCount()
				}
			}
		}
		if batches == 0 || upTo128 != batches {
			t.Errorf("%d of %d batches held more than 128 decisions: the large call went to Redis whole, not in parts", batches-upTo128, batches)
		}
	})
}
