package tests

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// swapRules is a domain in the peer's own format, which the peer and
// Sluice both serve during a rolling update.
const swapRules = `domain: swap
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: team
    value: red*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// swapOwn uses Sluice's own field: Sluice alone serves it, in its own keys.
const swapOwn = `domain: own
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, unit: hour, requests_per_unit: 5}
`

// peerJitter is EXPIRATION_JITTER_MAX_SECONDS on both sides.
const peerJitter = 5 * time.Second

// side is one pod of the mixed fleet, answering one descriptor of one call
// with hits_addend hits.
type side struct {
	name string
	hit  func(t *testing.T, domain string, d *rlv3.RateLimitDescriptor, hits uint64) *pb.RateLimitResponse_DescriptorStatus
}

// grpcSide asks a rate limit service over gRPC, as Envoy does.
func grpcSide(t *testing.T, name, addr string) side {
	c, _ := rlsClient(t, addr)
	return side{name, func(t *testing.T, domain string, d *rlv3.RateLimitDescriptor, hits uint64) *pb.RateLimitResponse_DescriptorStatus {
		t.Helper()
		d.HitsAddend = wrapperspb.UInt64(hits)
		resp := ask(t, c, domain, 0, d)
		if len(resp.Statuses) != 1 {
			t.Fatalf("%s: %d statuses", name, len(resp.Statuses))
		}
		return resp.Statuses[0]
	}}
}

// peerBinary is envoyproxy/ratelimit's service_cmd, built from its
// repository (go build ./src/service_cmd), named by SLUICE_TEST_PEER.
// The module proxy does not serve the peer's module, so the test cannot
// build it itself; scripts/test does not either.
func peerBinary() string { return os.Getenv("SLUICE_TEST_PEER") }

// TestPeerKeysSharedCount: during a rolling update the peer's pods and
// Sluice's serve together on one Redis. Calls for one descriptor
// alternate between the real envoyproxy/ratelimit and Sluice, and are held
// to one count: the sixth call of a limit of 5 is over whichever serves
// it, a charge Sluice counts refuses the peer's next check, and a
// share_threshold pattern is one count on both. Redis then holds the
// peer's key, exactly as its cache_key.go writes it, a plain integer of
// every hit, with the peer's TTL (the unit plus a jitter below
// EXPIRATION_JITTER_MAX_SECONDS); a rule with Sluice's own algorithm field
// keeps Sluice's keys. Sluice runs both as the peer (its environment,
// where the peer's keys are the default) and with --rls-peer-keys.
//
// Without the peer's binary (SLUICE_TEST_PEER) the peer's side is its
// exact Redis commands, INCRBY and EXPIRE in one pipeline on the key
// built as its cache_key.go builds it, answered as its base_limiter.go
// answers: the count is then shared with what the peer would do, not
// with the peer itself.
func TestPeerKeysSharedCount(t *testing.T) {
	bin := peerBinary()
	if bin == "" {
		t.Log("SLUICE_TEST_PEER unset: the peer's side replays its Redis commands; " +
			"set it to envoyproxy/ratelimit's service_cmd binary to run the peer itself")
	}
	for _, mode := range []string{"as the peer", "--rls-peer-keys"} {
		t.Run(mode, func(t *testing.T) {
			r := redistest.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: r.Addr, Protocol: 2})
			t.Cleanup(func() { rdb.Close() })

			var peer side
			if bin != "" {
				peer = startPeer(t, bin, r.Addr)
			} else {
				peer = replayPeer(rdb)
			}
			var sl side
			ownKeys := "rl_{own|*"
			if mode == "as the peer" {
				root := t.TempDir()
				writeConfig(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"swap.yaml": swapRules, "own.yaml": swapOwn})
				grpcPort := port(t)
				startRatelimit(t, peerEnv(t, r.Addr, root, grpcPort), "127.0.0.1:"+grpcPort)
				sl = grpcSide(t, "sluice", "127.0.0.1:"+grpcPort)
			} else {
				dir := writeRLS(t, map[string]string{"swap.yaml": swapRules, "own.yaml": swapOwn})
				d := startDoors(t, dir, "--upstream", "redis://"+r.Addr, "--upstream-timeout", decidingTimeout,
					"--rls-peer-keys", "--rls-peer-key-prefix", "rl_", "--rls-peer-key-jitter", peerJitter.String(),
					"--rls-response-headers", "draft")
				sl = grpcSide(t, "sluice", d.GRPC)
				ownKeys = "sluice:{own|*"
				defer retryAfterWindow(t, d.GRPC)
			}
			sharedCount(t, rdb, peer, sl, ownKeys)
		})
	}
}

// sharedCount runs the mixed fleet's calls against peer and sluice.
func sharedCount(t *testing.T, rdb *redis.Client, peer, sl side, ownKeys string) {
	ctx := context.Background()
	hour := awayFromHourEnd(t)
	sides := []side{peer, sl}

	// One count: 5 admitted, then over, whoever answers.
	for i := 1; i <= 9; i++ {
		s := sides[i%2]
		got := s.hit(t, "swap", desc("user", "alice"), 1)
		want, left := rlOver, uint32(0)
		if i <= 5 {
			want, left = rlOK, uint32(5-i)
		}
		if got.Code != want || got.LimitRemaining != left {
			t.Fatalf("call %d, by %s: %v with %d left; want %v with %d left", i, s.name, got.Code, got.LimitRemaining, want, left)
		}
		// The reset counts down to the end of the hour the key names.
		end := time.Now().Truncate(time.Hour).Add(time.Hour)
		if reset := time.Duration(got.GetDurationUntilReset().GetSeconds()) * time.Second; reset > time.Until(end)+5*time.Second || reset < time.Until(end)-2*time.Second {
			t.Fatalf("call %d, by %s: duration_until_reset %v; want the %v left of the hour", i, s.name, reset, time.Until(end))
		}
	}
	key := "rl_swap_user_alice_" + hour
	checkPeerKey(t, rdb, key, 9)

	// A charge at stream end that Sluice counts (hits_addend 4) holds the
	// peer's next check (hits_addend 0) over, and the other way round.
	if got := sl.hit(t, "swap", desc("user", "alice"), 4); got.Code != rlOver {
		t.Fatalf("sluice's charge: %v", got.Code)
	}
	if got := peer.hit(t, "swap", desc("user", "alice"), 0); got.Code != rlOver {
		t.Fatalf("the peer's check after sluice's charge: %v", got.Code)
	}
	checkPeerKey(t, rdb, key, 13)

	// share_threshold: every team matching red* is one count, in the key
	// the pattern names.
	for i, c := range []struct {
		s    side
		team string
		want pb.RateLimitResponse_Code
	}{{peer, "red1", rlOK}, {sl, "red2", rlOK}, {peer, "red3", rlOK}, {sl, "red4", rlOver}, {peer, "red5", rlOver}} {
		if got := c.s.hit(t, "swap", desc("team", c.team), 1); got.Code != c.want {
			t.Fatalf("team call %d, %s by %s: %v; want %v", i+1, c.team, c.s.name, got.Code, c.want)
		}
	}
	checkPeerKey(t, rdb, "rl_swap_team_red*_"+hour, 5)

	// Sluice's own algorithm field: Sluice's keys, none of the peer's.
	if got := sl.hit(t, "own", desc("user", "alice"), 1); got.Code != rlOK || got.LimitRemaining != 4 {
		t.Fatalf("the rule with Sluice's own field: %v, %d left", got.Code, got.LimitRemaining)
	}
	if keys, err := rdb.Keys(ctx, "rl_own_*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("the rule with Sluice's own field wrote the peer's keys %q (%v)", keys, err)
	}
	if keys, err := rdb.Keys(ctx, ownKeys).Result(); err != nil || len(keys) != 1 {
		t.Errorf("Sluice's keys %s: %q (%v); want one", ownKeys, keys, err)
	}
}

// retryAfterWindow: a refusal in the peer's keys tells Envoy to retry
// when the window the key names ends (the draft's Retry-After), though the
// store has no wait of its own for it.
func retryAfterWindow(t *testing.T, addr string) {
	if t.Failed() {
		return
	}
	c, _ := rlsClient(t, addr)
	resp := ask(t, c, "swap", 0, desc("user", "alice"))
	left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour))
	got, err := strconv.Atoi(headerMap(resp.ResponseHeadersToAdd)["Retry-After"])
	if resp.OverallCode != rlOver || err != nil || time.Duration(got)*time.Second < left-2*time.Second || time.Duration(got)*time.Second > left+5*time.Second {
		t.Errorf("over in the peer's keys: %v, Retry-After %d (%v); want the %v left of the hour", resp.OverallCode, got, err, left)
	}
}

// checkPeerKey reads the peer's key from Redis: a plain integer, the
// count of every hit, and the peer's TTL.
func checkPeerKey(t *testing.T, rdb *redis.Client, key string, count int64) {
	t.Helper()
	ctx := context.Background()
	n, err := rdb.Get(ctx, key).Int64()
	if err != nil || n != count {
		keys, _ := rdb.Keys(ctx, "*").Result()
		t.Fatalf("GET %s: %d, %v; want %d (keys: %q)", key, n, err, count, keys)
	}
	ttl, err := rdb.TTL(ctx, key).Result()
	if err != nil || ttl <= time.Hour-time.Minute || ttl > time.Hour+peerJitter {
		t.Fatalf("TTL %s: %v, %v; want an hour plus a jitter below %v", key, ttl, err, peerJitter)
	}
	t.Logf("GET %s → %d, TTL %v", key, n, ttl)
}

// awayFromHourEnd waits, if need be, until the calls that follow fall in
// one hour, and returns its start in Unix seconds: the peer's window.
func awayFromHourEnd(t *testing.T) string {
	now := time.Now()
	if left := now.Truncate(time.Hour).Add(time.Hour).Sub(now); left < 30*time.Second {
		t.Logf("waiting %v for the next hour", left)
		time.Sleep(left + 100*time.Millisecond)
	}
	return strconv.FormatInt(time.Now().Unix()/3600*3600, 10)
}

// peerEnv is the environment both the peer and Sluice as the peer run
// with: Redis at addr, the files under root, their own ports.
func peerEnv(t *testing.T, addr, root, grpcPort string) map[string]string {
	return map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": addr, "USE_STATSD": "false", "LOG_LEVEL": "debug",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"HOST": "127.0.0.1", "GRPC_HOST": "127.0.0.1", "DEBUG_HOST": "127.0.0.1",
		"GRPC_PORT": grpcPort, "PORT": port(t), "DEBUG_PORT": port(t),
		"CACHE_KEY_PREFIX": "rl_", "EXPIRATION_JITTER_MAX_SECONDS": strconv.Itoa(int(peerJitter / time.Second)),
	}
}

// startPeer runs envoyproxy/ratelimit on the peer's rules alone: it
// refuses a file with Sluice's own fields.
func startPeer(t *testing.T, bin, addr string) side {
	root := t.TempDir()
	writeConfig(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"swap.yaml": swapRules})
	grpcPort := port(t)
	startWithEnv(t, bin, peerEnv(t, addr, root, grpcPort), "127.0.0.1:"+grpcPort)
	return grpcSide(t, "envoyproxy/ratelimit", "127.0.0.1:"+grpcPort)
}

// replayPeer is the peer's side as its Redis commands: the key of
// cache_key.go (share_threshold's pattern for team values matching red*,
// as the rules say), INCRBY and EXPIRE of the unit plus a jitter in one
// pipeline, and base_limiter.go's answer.
func replayPeer(rdb *redis.Client) side {
	return side{"the peer's commands", func(t *testing.T, domain string, d *rlv3.RateLimitDescriptor, hits uint64) *pb.RateLimitResponse_DescriptorStatus {
		t.Helper()
		var b strings.Builder
		b.WriteString("rl_" + domain + "_")
		limit := uint64(5)
		for _, e := range d.Entries {
			v := e.Value
			if e.Key == "team" && strings.HasPrefix(v, "red") {
				v, limit = "red*", 3
			}
			b.WriteString(e.Key + "_" + v + "_")
		}
		b.WriteString(strconv.FormatInt(time.Now().Unix()/3600*3600, 10))
		ctx := context.Background()
		p := rdb.Pipeline()
		incr := p.IncrBy(ctx, b.String(), int64(hits))
		p.Expire(ctx, b.String(), time.Hour+time.Duration(rand.Int64N(int64(peerJitter/time.Second)))*time.Second)
		if _, err := p.Exec(ctx); err != nil {
			t.Fatalf("the peer's pipeline: %v", err)
		}
		after := uint64(incr.Val())
		now := time.Now().Unix()
		st := &pb.RateLimitResponse_DescriptorStatus{Code: rlOK, DurationUntilReset: durationpb.New(time.Duration(3600-now%3600) * time.Second)}
		if after > limit {
			st.Code = rlOver
		} else {
			st.LimitRemaining = uint32(limit - after)
		}
		return st
	}}
}

// writeConfig writes files (name → body) into dir, made as needed.
func writeConfig(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
