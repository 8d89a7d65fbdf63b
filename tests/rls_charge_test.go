package tests

import (
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsTokens is an LLM token budget as Envoy Gateway's rate limiting with
// cost configures it: the peer's own format, one budget per user.
const rlsTokens = `domain: ai
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: hourly_user
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// rlsTokensSluice is the same budget under Sluice's fields: a token bucket
// that refills continuously, and a rule that keeps "a refusal takes
// nothing".
const rlsTokensSluice = `domain: ai_sluice
descriptors:
  - key: user
    rate_limit: {algorithm: token_bucket, period: 1s, requests_per_unit: 100, burst: 100}
  - key: strict_user
    rate_limit: {unit: hour, requests_per_unit: 100, refusal_takes_nothing: true}
`

// tokens is a descriptor of domain's key for user with hits_addend hits:
// 0 is the check on the request path, N the charge at stream end.
func tokens(key, user string, hits uint64) *rlv3.RateLimitDescriptor {
	d := desc(key, user)
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// TestRLSCostAtStreamEnd: the pattern of Envoy Gateway's rate limiting
// with cost and of Envoy AI Gateway's token budgets. Each request is
// checked with hits_addend 0; at stream end its cost is charged with
// hits_addend N, a call whose answer nobody can enforce. A charge greater
// than what is left is counted all the same, as the peer's INCRBY counts
// it, so every check after it is OVER_LIMIT until the window (or the
// bucket) has refilled. The order of events is asserted, not durations:
// no check answered before the refill is OK, and one after it is.
func TestRLSCostAtStreamEnd(t *testing.T) {
	dir := writeRLS(t, map[string]string{"ai.yaml": rlsTokens, "ai_sluice.yaml": rlsTokensSluice})
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			s := startDoors(t, dir, be.args(t)...)
			c, _ := rlsClient(t, s.GRPC)

			t.Run("fixed window: over until the window ends", func(t *testing.T) {
				// Start just after a window begins, so that the check, the
				// charge and the checks after it fall in one window.
				end := time.Now().Truncate(time.Second).Add(time.Second)
				time.Sleep(time.Until(end) + 20*time.Millisecond)
				end = end.Add(time.Second)
				checkStatuses(t, ask(t, c, "ai", 0, tokens("user", "alice", 0)), rlOK, st{rlOK, 100, pb.RateLimitResponse_RateLimit_SECOND, "", 100})
				checkStatuses(t, ask(t, c, "ai", 0, tokens("user", "alice", 60)), rlOK, st{rlOK, 100, pb.RateLimitResponse_RateLimit_SECOND, "", 40})
				// 150 of the 40 left: counted, and over, as the peer answers.
				checkStatuses(t, ask(t, c, "ai", 0, tokens("user", "alice", 150)), rlOver, st{rlOver, 100, pb.RateLimitResponse_RateLimit_SECOND, "", 0})
				untilRefilled(t, end, func() pb.RateLimitResponse_Code {
					return ask(t, c, "ai", 0, tokens("user", "alice", 0)).OverallCode
				})
				checkStatuses(t, ask(t, c, "ai", 0, tokens("user", "alice", 0)), rlOK, st{rlOK, 100, pb.RateLimitResponse_RateLimit_SECOND, "", 100})
			})
			t.Run("token bucket: over until the debt has refilled", func(t *testing.T) {
				// A bucket's duration_until_reset is when it is full again,
				// not a window's end: codes and what is left are checked.
				codeLeft(t, ask(t, c, "ai_sluice", 0, tokens("user", "bob", 0)), rlOK, 100)
				// 100 a second, capacity 100: a charge of 150 owes 50,
				// half a second of refill before a check fits.
				charged := time.Now()
				codeLeft(t, ask(t, c, "ai_sluice", 0, tokens("user", "bob", 150)), rlOver, 0)
				untilRefilled(t, charged.Add(500*time.Millisecond), func() pb.RateLimitResponse_Code {
					return ask(t, c, "ai_sluice", 0, tokens("user", "bob", 0)).OverallCode
				})
			})
			t.Run("refusal_takes_nothing: the charge over the budget is refused and takes nothing", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "ai_sluice", 0, tokens("strict_user", "carol", 60)), rlOK, st{rlOK, 100, rlHour, "", 40})
				checkStatuses(t, ask(t, c, "ai_sluice", 0, tokens("strict_user", "carol", 150)), rlOver, st{rlOver, 100, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "ai_sluice", 0, tokens("strict_user", "carol", 0)), rlOK, st{rlOK, 100, rlHour, "", 40})
			})
			t.Run("a charge past the whole budget is counted too", func(t *testing.T) {
				checkStatuses(t, ask(t, c, "ai", 0, tokens("hourly_user", "dave", 250)), rlOver, st{rlOver, 100, rlHour, "", 0})
				checkStatuses(t, ask(t, c, "ai", 0, tokens("hourly_user", "dave", 0)), rlOver, st{rlOver, 100, rlHour, "", 0})
			})
		})
	}
}

// TestRLSCostStopWhenOverLimit: with the peer's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (--rls-stop-charging-when-over-limit)
// a call over its limit is not counted, as the peer does not increment it:
// the charge past the budget takes nothing.
func TestRLSCostStopWhenOverLimit(t *testing.T) {
	dir := writeRLS(t, map[string]string{"ai.yaml": rlsTokens})
	s := startDoors(t, dir, append(backends[1].args(t), "--rls-stop-charging-when-over-limit")...)
	c, _ := rlsClient(t, s.GRPC)
	checkStatuses(t, ask(t, c, "ai", 0, tokens("hourly_user", "erin", 60)), rlOK, st{rlOK, 100, rlHour, "", 40})
	checkStatuses(t, ask(t, c, "ai", 0, tokens("hourly_user", "erin", 150)), rlOver, st{rlOver, 100, rlHour, "", 0})
	checkStatuses(t, ask(t, c, "ai", 0, tokens("hourly_user", "erin", 0)), rlOK, st{rlOK, 100, rlHour, "", 40})
}

// codeLeft checks the one status of resp: its code and limit_remaining.
func codeLeft(t *testing.T, resp *pb.RateLimitResponse, code pb.RateLimitResponse_Code, left uint32) {
	t.Helper()
	if len(resp.Statuses) != 1 || resp.Statuses[0].Code != code || resp.Statuses[0].LimitRemaining != left {
		t.Errorf("%v, want one status %v with %d left", resp, code, left)
	}
}

// untilRefilled checks until a check is OK: every check answered before
// refill must be OVER_LIMIT, and one must be OK within a few seconds after.
func untilRefilled(t *testing.T, refill time.Time, check func() pb.RateLimitResponse_Code) {
	t.Helper()
	overs := 0
	for deadline := refill.Add(5 * time.Second); ; {
		code := check()
		answered := time.Now()
		if code == rlOK {
			if answered.Before(refill) {
				t.Fatalf("a check was OK before the budget could refill (%v early)", refill.Sub(answered))
			}
			if overs == 0 {
				t.Fatal("no check was over the limit after the charge")
			}
			return
		}
		if answered.After(deadline) {
			t.Fatalf("still OVER_LIMIT %v after the budget should have refilled", answered.Sub(refill))
		}
		overs++
		time.Sleep(20 * time.Millisecond)
	}
}
