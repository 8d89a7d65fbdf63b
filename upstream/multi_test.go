package upstream_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// TestMultiProperty: on a real redis-server, the batch script decides
// multi-limit requests as the model does, and a refusal takes nothing
// from any limit; every key it writes has a TTL.
func TestMultiProperty(t *testing.T) {
	_, client := standalone(t)
	for seed := range uint64(40) {
		prefix := fmt.Sprintf("mprop%d:", seed)
		enginetest.MultiProperty(t, func(t *testing.T, now func() time.Time) engine.Store {
			s := newStore(t, upstream.Config{Client: client, Prefix: prefix, Now: now})
			return &ttlChecked{Store: s, tb: t, client: client, pattern: prefix + "*"}
		}, seed, 80)
	}
}

// TestMultiLimitCluster: on a three-master Cluster, one batch mixes
// single-limit requests with multi-limit ones on many client keys; each
// client key's limits share a slot, so each is decided whole, as in
// memory, and RL.RESET POLICY's reset clears every limit.
func TestMultiLimitCluster(t *testing.T) {
	client, _ := cluster(t)
	clock := enginetest.NewClock(enginetest.Epoch)
	red := newStore(t, upstream.Config{Client: client, Prefix: "mcl:", Now: clock.Now})
	limits := []engine.NamedLimit{
		{Name: "burst", Limit: limitOf(engine.TokenBucket, 5, time.Second)},
		{Name: "daily", Limit: limitOf(engine.FixedWindow, 20, time.Minute)},
	}
	for _, l := range limits {
		if k := red.LimitKey("api:u1", l); upstream.Slot(k) != upstream.Slot(red.LimitKey("api:u1", limits[0])) {
			t.Fatalf("%s is in another slot than its policy's first limit", k)
		}
	}
	sameAsMemory(t, red, clock, 8, func(round int) []engine.Request {
		var reqs []engine.Request
		for i := range 60 {
			key := fmt.Sprintf("api:u%d", i%13)
			if i%4 == 0 {
				reqs = append(reqs, engine.Request{Key: key, Limit: limitOf(engine.GCRA, 3, time.Second), Cost: 1})
				continue
			}
			reqs = append(reqs, engine.Request{Key: key, Limits: limits, Cost: int64(1 + i%2), Peek: i%9 == 0})
		}
		return reqs
	}, nil)
	noKeyWithoutTTL(t, client)
	if err := red.Reset(context.Background(), "api:u1", limits...); err != nil {
		t.Fatal(err)
	}
	for _, l := range limits {
		if n := client.Exists(context.Background(), red.LimitKey("api:u1", l)).Val(); n != 0 {
			t.Errorf("the reset left %s", red.LimitKey("api:u1", l))
		}
	}
}

// TestOlderSidecarState: state keys carry their format in their last
// part (Store.Key). The format of single-limit state is unchanged, so the
// state a sidecar of the previous version wrote (written here byte for
// byte as it wrote it, with its TTL) is read and continued by this one:
// during a rolling update old and new sidecars share one count. A key of
// an unknown format (a name this version does not write) is ignored.
func TestOlderSidecarState(t *testing.T) {
	srv, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client, Prefix: "old:"})
	// The fixed window's state is the current minute's: if the minute
	// turns between writing it and Redis's TIME read after the decision,
	// the decision may have met a fresh window, and the case is set up
	// again (a minute cannot turn twice so soon).
	for attempt := 1; !olderSidecarState(t, srv, s); attempt++ {
		if attempt == 3 {
			t.Fatal("the minute turned during each of three attempts")
		}
		mustDo(t, srv, "DEL", "old:{api:alice}:gcra", "old:{api:bob}:fixed", "old:{api:carol}:gcra2")
	}
}

// olderSidecarState is TestOlderSidecarState's case, on Redis's own clock;
// it reports false, asserting nothing, when the minute of the state it
// wrote had passed by the time the decision was made.
func olderSidecarState(t *testing.T, srv *redistest.Server, s *upstream.Store) bool {
	t.Helper()
	us := time.Now().UnixMicro()
	// GCRA of 1 a minute, burst 4: a theoretical time two minutes ahead
	// means two of five are used; written as the previous version's
	// script wrote it, a number of µs, with PX to its end.
	mustDo(t, srv, "SET", "old:{api:alice}:gcra", fmt.Sprint(us+120_000_000), "PX", "120000")
	// A fixed window of 10 a minute with 7 counted: a hash {w, n}.
	w := us - us%60_000_000
	mustDo(t, srv, "HSET", "old:{api:bob}:fixed", "w", fmt.Sprint(w), "n", "7")
	mustDo(t, srv, "PEXPIRE", "old:{api:bob}:fixed", "60000")
	// A later version's format for the same key: never read.
	mustDo(t, srv, "SET", "old:{api:carol}:gcra2", "garbage")
	mustDo(t, srv, "PEXPIRE", "old:{api:carol}:gcra2", "60000")

	gcra := engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Minute, Burst: 4}
	res := decide(t, s,
		engine.Request{Key: "api:alice", Limit: gcra, Cost: 1},
		engine.Request{Key: "api:bob", Limit: limitOf(engine.FixedWindow, 10, time.Minute), Cost: 1},
		engine.Request{Key: "api:carol", Limit: gcra, Cost: 1},
	)
	sec, _, _ := strings.Cut(mustDo(t, srv, "TIME"), "\n")
	if after, err := strconv.ParseInt(sec, 10, 64); err != nil {
		t.Fatalf("TIME: %q: %v", sec, err)
	} else if after-after%60 != w/1_000_000 {
		return false
	}
	if r := res[0]; r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != 2 {
		t.Errorf("the old GCRA state: %s %v; want allowed with 2 left, continuing its count", enginetest.Format(r.Decision), r.Err)
	}
	if r := res[1]; r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != 2 {
		t.Errorf("the old fixed window: %s %v; want allowed with 2 left", enginetest.Format(r.Decision), r.Err)
	}
	if r := res[2]; r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != 4 {
		t.Errorf("beside a key of another format: %s %v; want a fresh count", enginetest.Format(r.Decision), r.Err)
	}
	if got, _ := srv.Do("GET", "old:{api:carol}:gcra2"); got != "garbage" {
		t.Errorf("the other format's key now holds %q", got)
	}
	return true
}

// TestHotPolicyReadsEachLimitOnce: a batch's requests on one key under a
// policy of several limits, interleaved with another key's, are decided
// as a run: each limit's key is read once and written once for the
// batch, not once per request.
func TestHotPolicyReadsEachLimitOnce(t *testing.T) {
	srv, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client, Prefix: "hotpolicy:"})
	policy := []engine.NamedLimit{
		{Name: "burst", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}},
		{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 100_000, Period: 24 * time.Hour}},
	}
	var reqs []engine.Request
	for i := range 200 {
		key := "tenant:hot"
		if i%10 == 0 {
			key = "tenant:other"
		}
		reqs = append(reqs, engine.Request{Key: key, Limits: policy, Cost: 1, Detail: make([]engine.Decision, len(policy))})
	}
	decide(t, s, reqs[:1]...) // loads the script
	mustDo(t, srv, "CONFIG", "RESETSTAT")
	for _, r := range decide(t, s, reqs...) {
		if r.Err != nil || !r.Decision.Allowed {
			t.Fatalf("%+v; want admitted", r)
		}
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(mustDo(t, srv, "INFO", "commandstats"), "\r\n") {
		if name, v, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls="); ok {
			calls[name], _ = strconv.Atoi(v[:strings.IndexByte(v, ',')])
		}
	}
	// Per client key, the token bucket's GET and SET, and the fixed
	// window's HMGET, HSET and PEXPIRE: once each for each of the two.
	for _, c := range []string{"get", "set", "hmget", "hset", "pexpire"} {
		if calls[c] != 2 {
			t.Errorf("%d %s for %d requests on two keys; want 2 (commands: %v)", calls[c], strings.ToUpper(c), len(reqs), calls)
		}
	}
}

// TestPolicyClaimsEmptyKeys: a request alone on its keys under a policy
// whose other limits admit it costs its bucket limit one command on an
// empty key, a claim (SET NX GET), not a read and a write; and where
// another limit refuses, the bucket's key is only read, never written.
func TestPolicyClaimsEmptyKeys(t *testing.T) {
	srv, client := standalone(t)
	now := enginetest.Epoch
	s := newStore(t, upstream.Config{Client: client, Prefix: "claims:", Now: func() time.Time { return now }})
	policy := []engine.NamedLimit{
		{Name: "burst", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 9}},
		{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 100_000, Period: 24 * time.Hour}},
	}
	tooSmall := []engine.NamedLimit{policy[0], {Name: "tiny", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}}}
	var reqs []engine.Request
	for i := range 50 {
		reqs = append(reqs, engine.Request{Key: "tenant:" + strconv.Itoa(i), Limits: policy, Cost: 1})
	}
	// The tiny limit's window is used up.
	hour := time.Hour.Microseconds()
	for i := range 10 {
		key := "refused:" + strconv.Itoa(i)
		client.HSet(context.Background(), s.LimitKey(key, tooSmall[1]), "w", now.UnixMicro()-now.UnixMicro()%hour, "n", 1)
		reqs = append(reqs, engine.Request{Key: key, Limits: tooSmall, Cost: 1})
	}
	decide(t, s, engine.Request{Key: "load", Limits: policy, Cost: 1}) // loads the script
	mustDo(t, srv, "CONFIG", "RESETSTAT")
	for k, r := range decide(t, s, reqs...) {
		if r.Err != nil || r.Decision.Allowed != (k < 50) {
			t.Fatalf("request %d: %+v", k, r)
		}
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(mustDo(t, srv, "INFO", "commandstats"), "\r\n") {
		if name, v, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls="); ok {
			calls[name], _ = strconv.Atoi(v[:strings.IndexByte(v, ',')])
		}
	}
	if calls["set"] != 50 || calls["get"] != 10 {
		t.Errorf("%d SET and %d GET for 50 admitted and 10 refused; want 50 claims and 10 reads (commands: %v)", calls["set"], calls["get"], calls)
	}
	if n, err := client.Exists(context.Background(), s.LimitKey("refused:0", policy[0])).Result(); err != nil || n != 0 {
		t.Errorf("a refused request's bucket key exists (%d, %v)", n, err)
	}
}
