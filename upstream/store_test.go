package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// TestConformance runs the shared conformance tables against Redis through
// the batch script, standalone and on Cluster, checking after every operation that every key has a TTL.
func TestConformance(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		prefix := "conf:"
		open := func(t *testing.T, now func() time.Time) engine.Store {
			s := newStore(t, upstream.Config{Client: top.client, Prefix: prefix, Now: now})
			return &ttlChecked{Store: s, tb: t, client: top.client, pattern: prefix + "*"}
		}
		enginetest.Run(t, open)
		enginetest.RunCases(t, open, enginetest.GrantCases)
	})
}

// differential runs seed's random scenario against the memory store and
// against Redis, with the clock pinned.
func differential(tb testing.TB, client redis.UniversalClient, name string, seed []byte, checkTTL bool) {
	tb.Helper()
	clock := enginetest.NewClock(enginetest.Epoch)
	mem, err := memstore.New(memstore.Config{Now: clock.Now})
	if err != nil {
		tb.Fatal(err)
	}
	prefix := "diff:"
	s := newStore(tb, upstream.Config{Client: client, Prefix: prefix, Now: clock.Now})
	// As the sidecar does at its start: load the batch library, so that
	// the decisions compared are FCALL's.
	if err := s.Check(context.Background()); err != nil || s.Scripts() != "functions" {
		tb.Fatalf("Check: %v, %s; want the batch library in use", err, s.Scripts())
	}
	var red engine.Store = s
	if checkTTL {
		red = &ttlChecked{Store: red, tb: tb, client: client, pattern: prefix + "{" + name + ":*"}
	}
	enginetest.Differential(tb, mem, red, clock, name, seed)
}

// seeds is the fuzz target's seed corpus and the differential test's
// named regressions.
var seeds = []string{"", "a", "gcra", "window edge", "\x00\xff\x10", "sliding", "token", "leaky", "log"}

func TestDifferential(t *testing.T) {
	_, client := standalone(t)
	n := 400
	if testing.Short() {
		n = 50
	}
	for i := range n {
		seed := fmt.Appendf(nil, "random-%d", i)
		if i < len(seeds) {
			seed = []byte(seeds[i])
		}
		differential(t, client, fmt.Sprintf("t%d", i), seed, i%10 == 0)
		if t.Failed() {
			t.Fatalf("seed %q", seed)
		}
	}
}

func TestDifferentialCluster(t *testing.T) {
	client, _ := cluster(t)
	for i := range 60 {
		differential(t, client, fmt.Sprintf("c%d", i), fmt.Appendf(nil, "cluster-%d", i), i%10 == 0)
		if t.Failed() {
			t.Fatalf("seed cluster-%d", i)
		}
	}
}

// FuzzDifferentialRedis: random parameters and operation sequences decide
// the same on Redis as in memory.
func FuzzDifferentialRedis(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	_, client := standalone(f)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, seed []byte) {
		differential(t, client, fmt.Sprintf("f%d", n.Add(1)), seed, false)
	})
}

// TestDifferentialVaryingLimits: requests on one key with changing limits
// share its state, as in redis-cell; each state still ends when its writer
// said, in Redis as in memory.
func TestDifferentialVaryingLimits(t *testing.T) {
	_, client := standalone(t)
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second}
	for seed := range 150 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		clock := enginetest.NewClock(enginetest.Epoch)
		mem, _ := memstore.New(memstore.Config{Now: clock.Now})
		prefix := fmt.Sprintf("vary-%d:", seed)
		red := &ttlChecked{
			Store: newStore(t, upstream.Config{Client: client, Prefix: prefix, Now: clock.Now}),
			tb:    t, client: client, pattern: prefix + "*",
		}
		alg := engine.Algorithms[seed%len(engine.Algorithms)]
		for i := range 60 {
			l := limitOf(alg, 1+rng.Int64N(8), periods[rng.IntN(len(periods))])
			clock.Advance(time.Duration(rng.Int64N(300_000)) * time.Microsecond)
			req := engine.Request{Key: "k", Limit: l, Cost: rng.Int64N(l.Capacity() + 1), Peek: rng.IntN(5) == 0}
			got, want := decide(t, red, req)[0], decide(t, mem, req)[0]
			if got.Err != nil || want.Err != nil || got.Decision != want.Decision {
				t.Fatalf("seed %d, op %d: %+v\nredis  %s %v\nmemory %s %v", seed, i, req,
					enginetest.Format(got.Decision), got.Err, enginetest.Format(want.Decision), want.Err)
			}
		}
	}
}

// TestBatchMatchesMemory sends many requests on a few keys, of every
// algorithm at once, as one batch, and compares with the memory store fed
// the same batch.
func TestBatchMatchesMemory(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		clock := enginetest.NewClock(enginetest.Epoch)
		red := newStore(t, upstream.Config{Client: top.client, Prefix: "batch:", Now: clock.Now})
		var reqs []engine.Request
		for i := range 300 {
			alg := engine.Algorithms[i%len(engine.Algorithms)]
			reqs = append(reqs, engine.Request{
				Key:   fmt.Sprintf("k%d", i%7),
				Limit: limitOf(alg, 5, time.Second),
				Cost:  int64(i % 3),
				Peek:  i%11 == 0,
			})
		}
		reqs[17].Cost = -1 // an invalid one fails alone
		sameAsMemory(t, red, clock, 4, func(int) []engine.Request { return reqs }, nil)
		noKeyWithoutTTL(t, top.client)
	})
}

// TestOneCallPerBatch: a batch costs Redis one script call, on Cluster one
// per master that serves its keys, however many slots they span.
func TestOneCallPerBatch(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		s := newStore(t, upstream.Config{Client: top.client, Prefix: "calls:"})
		var reqs []engine.Request
		slots, masters := map[uint16]bool{}, map[string]bool{}
		for i := range 50 {
			r := engine.Request{Key: fmt.Sprintf("user:%d", i%20), Limit: limitOf(engine.Algorithms[i%6], 100, time.Minute), Cost: 1}
			reqs = append(reqs, r)
			slots[upstream.Slot(s.Key(r.Key, r.Limit.Algorithm))] = true
			if cc, ok := top.client.(*redis.ClusterClient); ok {
				m, err := cc.MasterForKey(context.Background(), s.Key(r.Key, r.Limit.Algorithm))
				if err != nil {
					t.Fatal(err)
				}
				masters[m.Options().Addr] = true
			}
		}
		decide(t, s, reqs...) // loads the scripts
		for _, srv := range top.servers {
			mustDo(t, srv, "CONFIG", "RESETSTAT")
		}
		decide(t, s, reqs...)
		calls := 0
		for _, srv := range top.servers {
			info := mustDo(t, srv, "INFO", "commandstats")
			for line := range strings.SplitSeq(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
					n, _ := strconv.Atoi(v[:strings.IndexByte(v, ',')])
					calls += n
				}
			}
		}
		want := 1
		switch {
		case top.name == "cluster":
			if len(masters) < 2 || len(slots) <= len(masters) {
				t.Fatalf("the batch spans %d slots of %d masters: it cannot tell a call per master from one per slot", len(slots), len(masters))
			}
			want = len(masters)
		}
		if calls != want {
			t.Fatalf("%d EVALSHA calls for a batch of %d; want %d", calls, len(reqs), want)
		}
	})
}

// sameAsMemory decides rounds batches on red and on a memory store with the
// same clock, which advances 90ms after each round and after, calls between.
func sameAsMemory(t *testing.T, red engine.Store, clock *enginetest.Clock, rounds int, batch func(round int) []engine.Request, between func()) {
	t.Helper()
	mem, err := memstore.New(memstore.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for round := range rounds {
		reqs := batch(round)
		got, want := decide(t, red, reqs...), decide(t, mem, reqs...)
		for i := range reqs {
			if (got[i].Err == nil) != (want[i].Err == nil) || got[i].Decision != want[i].Decision {
				t.Fatalf("round %d, request %d %+v:\nredis  %+v\nmemory %+v", round, i, reqs[i], got[i], want[i])
			}
		}
		if between != nil {
			between()
		}
		clock.Advance(90 * time.Millisecond)
	}
}

// TestAtomicity: three clients (three sidecars) with 50 goroutines each on
// one key admit exactly the limit, on Redis's own clock, when nothing
// refills within the test.
//
// The sliding window counter admits exactly the limit too unless the run
// straddles a window edge (windows are aligned to the epoch). Its bound: a
// run of duration d admits at least limit and at most
// limit + ceil(limit·d/period), because past an edge the previous window's
// count weighs ceil(prev·(p−e)/p), which falls by at most limit·d/p.
func TestAtomicity(t *testing.T) {
	srv, inspect := standalone(t)
	const limit, goroutines, perGoroutine = 100, 50, 3
	for _, alg := range engine.Algorithms {
		if alg == engine.LeakyBucket {
			continue // it shapes, admitting with a delay; covered below
		}
		t.Run(alg.String(), func(t *testing.T) {
			l := limitOf(alg, limit, time.Hour)
			key := "atomic"
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range 3 {
				client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: goroutines})
				defer client.Close()
				s := newStore(t, upstream.Config{Client: client})
				for g := range goroutines {
					wg.Go(func() {
						// Some goroutines send their requests as one batch.
						n := 1
						if g%2 == 0 {
							n = perGoroutine
						}
						for range perGoroutine / n {
							reqs := make([]engine.Request, n)
							for i := range reqs {
								reqs[i] = engine.Request{Key: key, Limit: l, Cost: 1}
							}
							res := make([]engine.Result, n)
							if err := engine.Wait(s, reqs, res, time.Time{}); err != nil {
								failed.Add(1)
								return
							}
							for _, r := range res {
								if r.Err != nil {
									failed.Add(1)
								} else if r.Decision.Allowed {
									admitted.Add(1)
								}
							}
						}
					})
				}
			}
			wg.Wait()
			d := time.Since(start)
			noKeyWithoutTTL(t, inspect)
			if failed.Load() > 0 {
				t.Fatalf("%d requests failed", failed.Load())
			}
			got := admitted.Load()
			if alg == engine.SlidingWindow {
				bound := limit + int64(math.Ceil(float64(limit)*float64(d)/float64(time.Hour)))
				if got < limit || got > bound {
					t.Fatalf("admitted %d of %d in %v; want between %d and %d", got, 3*goroutines*perGoroutine, d, limit, bound)
				}
				return
			}
			// What refilled within the run, by the time it took (measured,
			// whatever the machine's load): nothing in a run shorter than
			// one unit's share of the hour, the normal case, which is then
			// exact.
			bound := int64(limit)
			switch {
			case alg == engine.TokenBucket || alg == engine.GCRA:
				bound += int64(d / (time.Hour / limit))
			case alg == engine.FixedWindow && !start.Truncate(time.Hour).Equal(start.Add(d).Truncate(time.Hour)):
				bound += limit // the run straddled an hour's edge: a fresh window
			}
			if got < limit || got > bound {
				t.Fatalf("admitted %d of %d in %v; want %d (at most %d for what refilled)", got, 3*goroutines*perGoroutine, d, limit, bound)
			}
		})
	}
}

// TestAtomicityLeaky: the leaky bucket admits exactly its queue and gives
// each admitted request its own slot: the delays are the distinct
// multiples of the interval.
func TestAtomicityLeaky(t *testing.T) {
	srv, _ := standalone(t)
	const capacity = 100
	l := limitOf(engine.LeakyBucket, capacity, time.Hour)
	var mu sync.Mutex
	delays := map[time.Duration]bool{} // admitted requests' slots
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 50})
		defer client.Close()
		s := newStore(t, upstream.Config{Client: client})
		for range 50 {
			wg.Go(func() {
				for range 2 {
					res := make([]engine.Result, 1)
					err := engine.Wait(s, []engine.Request{{Key: "leaky", Limit: l, Cost: 1}}, res, time.Time{})
					if err != nil || res[0].Err != nil || !res[0].Decision.Allowed {
						continue
					}
					admitted.Add(1)
					mu.Lock()
					delays[res[0].Decision.Delay.Round(36*time.Second)] = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if admitted.Load() != capacity || len(delays) != capacity {
		t.Fatalf("admitted %d in %d distinct slots; want %d in as many", admitted.Load(), len(delays), capacity)
	}
}

// TestScriptFlush: Redis losing its scripts between decisions costs the
// caller nothing.
func TestScriptFlush(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		clock := enginetest.NewClock(enginetest.Epoch)
		red := newStore(t, upstream.Config{Client: top.client, Prefix: "flush:", Now: clock.Now})
		sameAsMemory(t, red, clock, 20, func(round int) []engine.Request {
			var reqs []engine.Request
			for j, alg := range engine.Algorithms {
				reqs = append(reqs, engine.Request{Key: fmt.Sprintf("k%d", (round+j)%4), Limit: limitOf(alg, 3, time.Second), Cost: 1})
			}
			return reqs
		}, func() {
			for _, srv := range top.servers {
				mustDo(t, srv, "SCRIPT", "FLUSH")
			}
		})
	})
}

// TestWrongType: a key someone overwrote with another type fails its own
// request with a clear error; the rest of the batch is decided.
func TestWrongType(t *testing.T) {
	srv, client := standalone(t)
	ctx := context.Background()
	prefix := "wrong:"
	s := newStore(t, upstream.Config{Client: client, Prefix: prefix})
	bad := s.Key("bad", engine.FixedWindow)
	garbage := s.Key("garbage", engine.GCRA)
	mustDo(t, srv, "SET", bad, "a string")
	mustDo(t, srv, "SET", garbage, "not a number")
	checked := &ttlChecked{Store: s, tb: t, client: client, pattern: prefix + "*",
		ignore: map[string]bool{bad: true, garbage: true}}
	fixed := limitOf(engine.FixedWindow, 3, time.Minute)
	gcra := limitOf(engine.GCRA, 3, time.Minute)
	res := decide(t, checked,
		engine.Request{Key: "good", Limit: fixed, Cost: 1},
		engine.Request{Key: "bad", Limit: fixed, Cost: 1},
		engine.Request{Key: "garbage", Limit: gcra, Cost: 1},
		engine.Request{Key: "good", Limit: fixed, Cost: 1},
		engine.Request{Key: "good", Limit: gcra, Cost: 1},
	)
	for _, i := range []int{0, 3, 4} {
		if res[i].Err != nil || !res[i].Decision.Allowed {
			t.Errorf("request %d: %+v; want allowed", i, res[i])
		}
	}
	if res[3].Decision.Remaining != 1 {
		t.Errorf("request 3: remaining %d; want 1", res[3].Decision.Remaining)
	}
	for _, w := range []struct {
		i    int
		key  string
		want string
	}{{1, bad, "WRONGTYPE Operation against a key holding the wrong kind of value"}, {2, garbage, `holds "not a number", not a number`}} {
		err := res[w.i].Err
		if err == nil || !strings.HasPrefix(err.Error(), "upstream: eval ") ||
			!strings.Contains(err.Error(), w.key) || !strings.Contains(err.Error(), w.want) {
			t.Errorf("request %d: error %v; want one naming %s and saying %s", w.i, err, w.key, w.want)
		}
		if errors.Is(err, engine.ErrInvalid) {
			t.Errorf("request %d: a store error reads as invalid input: %v", w.i, err)
		}
	}
	if got, _ := srv.Do("GET", bad); got != "a string" {
		t.Errorf("the foreign key now holds %q", got)
	}
	if err := s.Reset(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
}

// TestReset deletes a key's state under every algorithm, also on Cluster
// and for a key whose hash tag is empty.
func TestReset(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		s := newStore(t, upstream.Config{Client: top.client, Prefix: "reset:"})
		for _, key := range []string{"user:1", "}odd", "{x}"} {
			var reqs []engine.Request
			for _, alg := range engine.Algorithms {
				reqs = append(reqs, engine.Request{Key: key, Limit: limitOf(alg, 1, time.Hour), Cost: 1})
			}
			for _, step := range []struct {
				name  string
				reset bool
				allow bool
			}{{"first", false, true}, {"second", false, false}, {"after reset", true, true}} {
				if step.reset {
					if err := s.Reset(context.Background(), key); err != nil {
						t.Fatal(err)
					}
				}
				for i, r := range decide(t, s, reqs...) {
					if r.Err != nil || r.Decision.Allowed != step.allow {
						t.Fatalf("key %q, %s request %d: %+v; want allowed %v", key, step.name, i, r, step.allow)
					}
				}
			}
		}
	})
}

// TestTTL: on Redis's own clock every written key's TTL is when its state
// stops mattering, rounded up to a millisecond.
func TestTTL(t *testing.T) {
	_, client := standalone(t)
	ctx := context.Background()
	s := newStore(t, upstream.Config{Client: client, Prefix: "ttl:"})
	for _, alg := range engine.Algorithms {
		l := limitOf(alg, 10, time.Minute)
		for _, peek := range []bool{true, false} {
			sent := time.Now()
			res := decide(t, s, engine.Request{Key: "k", Limit: l, Cost: 1, Peek: peek})[0]
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			ttl, err := client.PTTL(ctx, s.Key("k", alg)).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The TTL ran down for at most this long since the script set
			// it: however loaded the machine, it is the bound below.
			ranDown := time.Since(sent)
			if peek {
				if ttl != -2*time.Nanosecond {
					t.Errorf("%v: a peek wrote the key (PTTL %v)", alg, ttl)
				}
				continue
			}
			if ttl <= 0 || ttl > res.Decision.ResetAfter+time.Millisecond {
				t.Errorf("%v: PTTL %v; want in (0, %v]", alg, ttl, res.Decision.ResetAfter+time.Millisecond)
			}
			// The fixed and sliding windows live to their windows' ends,
			// aligned to the epoch; the others exactly as long as their reset.
			if alg != engine.FixedWindow && alg != engine.SlidingWindow && ttl < res.Decision.ResetAfter-ranDown-time.Millisecond {
				t.Errorf("%v: PTTL %v %v after the decision; want at least %v less that", alg, ttl, ranDown, res.Decision.ResetAfter)
			}
		}
	}
}

// TestLargeLogCost: a sliding-log request of any weight is one entry, so
// the largest cost takes Redis no longer than a cost of 1, and the log
// holds one member per admitted request, not per unit.
func TestLargeLogCost(t *testing.T) {
	_, client := standalone(t)
	clock := enginetest.NewClock(enginetest.Epoch)
	s := newStore(t, upstream.Config{Client: client, Now: clock.Now})
	l := limitOf(engine.SlidingLog, engine.MaxLogRate, time.Minute)
	r := decide(t, s, engine.Request{Key: "big", Limit: l, Cost: engine.MaxLogRate - 1})[0]
	if r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != 1 {
		t.Fatalf("%+v", r)
	}
	clock.Advance(time.Second)
	r = decide(t, s, engine.Request{Key: "big", Limit: l, Cost: 2})[0]
	if r.Err != nil || r.Decision.Allowed || r.Decision.RetryAfter != time.Minute-time.Second {
		t.Fatalf("%+v", r)
	}
	r = decide(t, s, engine.Request{Key: "big", Limit: l, Cost: 1})[0]
	if r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != 0 {
		t.Fatalf("%+v", r)
	}
	key := s.Key("big", engine.SlidingLog)
	if n, _ := client.ZCard(context.Background(), key).Result(); n != 2 {
		t.Fatalf("ZCARD %d; want 2, one member per admitted request", n)
	}
	if b, err := client.MemoryUsage(context.Background(), key).Result(); err != nil || b > 1024 {
		t.Fatalf("MEMORY USAGE %d, %v; want at most 1 KiB for two entries", b, err)
	}
	noKeyWithoutTTL(t, client)
}

// TestBatchError: an unreachable Redis fails the batch, with context.
func TestBatchError(t *testing.T) {
	srv, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client})
	reqs := []engine.Request{{Key: "k", Limit: limitOf(engine.GCRA, 1, time.Second), Cost: 1}}
	srv.Kill()
	err := engine.Wait(s, reqs, make([]engine.Result, 1), time.Time{})
	if err == nil || !strings.HasPrefix(err.Error(), "upstream: eval batch: ") {
		t.Fatalf("Decide on a dead Redis: %v; want an upstream: eval batch error", err)
	}
	if err := s.Reset(context.Background(), "k"); err == nil || !strings.HasPrefix(err.Error(), `upstream: reset "k": `) {
		t.Fatalf("Reset on a dead Redis: %v", err)
	}
}

func TestNewConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  upstream.Config
		want string
	}{
		{"no client", upstream.Config{}, "upstream: Config.Client is required"},
		{"ring", upstream.Config{Client: redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})},
			"upstream: a *redis.Ring shards keys on the client, which one script call cannot follow; use a Redis Cluster"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := upstream.New(c.cfg)
			if err == nil || err.Error() != c.want {
				t.Fatalf("New: %v; want %q", err, c.want)
			}
		})
	}
	s := newStore(t, upstream.Config{Client: redis.NewClient(&redis.Options{})})
	if got := s.Key("user:1", engine.TokenBucket); got != "sluice:{user:1}:token" {
		t.Fatalf("Key = %q", got)
	}
}

// TestSlot agrees with CLUSTER KEYSLOT, hash tags included.
func TestSlot(t *testing.T) {
	_, nodes := cluster(t)
	keys := []string{"123456789", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
		"}odd", "{", "}", "{}", "sluice:{}}:gcra", "sluice:{user:1}:token", "ünïcødé"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k%d{t%d}", i, i*7))
	}
	for _, key := range keys {
		want := mustDo(t, nodes[0], "CLUSTER", "KEYSLOT", key)
		if got := fmt.Sprint(upstream.Slot(key)); got != want {
			t.Errorf("Slot(%q) = %s; CLUSTER KEYSLOT says %s", key, got, want)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	_, client := standalone(b)
	s := newStore(b, upstream.Config{Client: client})
	for _, n := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("batch-of-%d", n), func(b *testing.B) {
			reqs := make([]engine.Request, n)
			for i := range reqs {
				alg := engine.Algorithms[i%len(engine.Algorithms)]
				if alg == engine.SlidingLog {
					alg = engine.GCRA // the log grows with every admission
				}
				reqs[i] = engine.Request{Key: fmt.Sprintf("bench%d", i), Limit: limitOf(alg, 1_000_000, time.Second), Cost: 1}
			}
			res := make([]engine.Result, n)
			b.ReportAllocs()
			for b.Loop() {
				if err := engine.Wait(s, reqs, res, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/decision")
		})
	}
}

// TestRestart: a restarted Redis, which lost its scripts and its state,
// answers the next batch without an error reaching the caller.
func TestRestart(t *testing.T) {
	srv, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client, Prefix: "restart:"})
	l := limitOf(engine.GCRA, 1, time.Hour)
	req := engine.Request{Key: "k", Limit: l, Cost: 1}
	if r := decide(t, s, req, req); !r[0].Decision.Allowed || r[1].Decision.Allowed {
		t.Fatalf("before the restart: %+v", r)
	}
	srv.Restart()
	if r := decide(t, s, req, req); r[0].Err != nil || !r[0].Decision.Allowed || r[1].Decision.Allowed {
		t.Fatalf("after the restart: %+v; want the state gone and no error", r)
	}
	noKeyWithoutTTL(t, client)
}

// TestSentinelFailover: through a Sentinel-backed client the store decides
// on the master; after a failover it decides on the promoted replica, with
// the state that replication carried and the scripts loaded again.
func TestSentinelFailover(t *testing.T) {
	st := redistest.StartSentinel(t)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: st.Addrs(), Protocol: 2})
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, upstream.Config{Client: client})
	l := limitOf(engine.FixedWindow, 1000, time.Hour)
	req := engine.Request{Key: "k", Limit: l, Cost: 1}
	before := decide(t, s, req)[0].Decision
	if before.Remaining != 999 {
		t.Fatalf("before failover: %+v", before)
	}
	for i := 0; ; i++ { // until the replica has the state
		if n, err := st.Replica.Do("EXISTS", s.Key("k", engine.FixedWindow)); err == nil && n == "1" {
			break
		}
		if i == 300 {
			t.Fatal("the replica did not receive the state within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	old, _ := st.CurrentMaster()
	st.Master.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res := make([]engine.Result, 1)
		err := engine.Wait(s, []engine.Request{req}, res, time.Time{})
		if cur, _ := st.CurrentMaster(); err == nil && res[0].Err == nil && cur != old {
			// A decision made before the client noticed the failover may
			// have failed; the state from before it must have survived.
			if got := res[0].Decision.Remaining; got > 998 || got < 990 {
				t.Fatalf("after failover: %+v; want the count carried over", res[0].Decision)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision on a new master within 30s: %v %+v", err, res[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	noKeyWithoutTTL(t, client)
}

// TestServerCannotServe: a Redis that refuses every script (a read-only
// replica, memory full) fails the batch, so the caller falls back as its
// policy says, rather than failing each request alone.
func TestServerCannotServe(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, fmt.Sprintf("replicaof 127.0.0.1 %d", master.Port))
	full := redistest.Start(t, "maxmemory 1", "maxmemory-policy noeviction")
	for _, c := range []struct {
		name string
		srv  *redistest.Server
		want string
	}{
		{"read-only replica", replica, "READONLY"},
		{"out of memory", full, "OOM"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: c.srv.Addr, Protocol: 2, MaxRetries: -1})
			defer client.Close()
			s := newStore(t, upstream.Config{Client: client})
			req := engine.Request{Key: "k", Limit: limitOf(engine.GCRA, 1, time.Second), Cost: 1}
			err := engine.Wait(s, []engine.Request{req, req}, make([]engine.Result, 2), time.Time{})
			if err == nil || !strings.HasPrefix(err.Error(), "upstream: eval ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decide: %v; want a batch error saying %s", err, c.want)
			}
		})
	}
}

// A reset is announced to every sidecar subscribed, on standalone and on
// Cluster (where PUBLISH reaches every node's subscribers).
func TestResetIsAnnounced(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		prefix := "announce:"
		a := newStore(t, upstream.Config{Client: top.client, Prefix: prefix})
		b := newStore(t, upstream.Config{Client: top.client, Prefix: prefix})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		got := make(chan string, 4)
		go b.Subscribe(ctx, func(key string) { got <- key })
		// The subscription is ready once a reset gets through; retry until.
		deadline := time.After(10 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := a.Reset(ctx, "user:7"); err != nil {
				t.Fatal(err)
			}
			select {
			case k := <-got:
				if k != "user:7" {
					t.Fatalf("announced %q; want user:7", k)
				}
				return
			case <-deadline:
				t.Fatal("no reset announced within 10s")
			case <-tick.C:
			}
		}
	})
}

// TestRateSweep runs the rate sweep on Redis: the scripts
// admit rate × time within one unit at every rate, as memory does.
func TestRateSweep(t *testing.T) {
	_, client := standalone(t)
	enginetest.Sweep(t, func(t *testing.T, now func() time.Time) engine.Store {
		return newStore(t, upstream.Config{Client: client, Prefix: "sweep:", Now: now})
	})
}

// TestSlidingWorstCase: on Redis too, the sliding window counter's worst
// case puts 2×limit-1 in a true sliding period, at every precision.
func TestSlidingWorstCase(t *testing.T) {
	_, client := standalone(t)
	open := func(t *testing.T, now func() time.Time) engine.Store {
		return newStore(t, upstream.Config{Client: client, Prefix: "worst:", Now: now})
	}
	for _, n := range []int64{1, 4, 10} {
		if got := enginetest.SlidingWorstCase(t, open, 50, time.Second, n); got != 99 {
			t.Errorf("precision %d: worst case admits %d in a true sliding second; want 99", n, got)
		}
	}
}

// TestLegacyState: keys that the previous version wrote keep working. A
// token bucket it kept as a hash {used, last} and a sliding log it kept
// with one member per unit are read as what they meant, and rewritten in
// today's form.
func TestLegacyState(t *testing.T) {
	_, client := standalone(t)
	ctx := context.Background()
	clock := enginetest.NewClock(enginetest.Epoch)
	now := enginetest.Epoch.UnixMicro()
	s := newStore(t, upstream.Config{Client: client, Prefix: "legacy:", Now: clock.Now})
	// On a pinned clock an expire time carries the state's end plus
	// 2^52 (see prelude.lua).
	pinnedEnd := func(us int64) time.Time { return time.UnixMilli(us + 1<<52) }

	// 2 of 3 tokens used at 1 a second, the last refill at now.
	token := s.Key("t", engine.TokenBucket)
	client.HSet(ctx, token, "used", 2, "last", now)
	client.ExpireAt(ctx, token, pinnedEnd(now+2_000_000))
	tl := engine.Limit{Algorithm: engine.TokenBucket, Rate: 1, Period: time.Second, Burst: 3}
	r := decide(t, s, engine.Request{Key: "t", Limit: tl, Cost: 1})[0]
	if r.Err != nil || r.Decision != (engine.Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 3 * time.Second}) {
		t.Fatalf("legacy token bucket: %s %v", enginetest.Format(r.Decision), r.Err)
	}
	if typ := client.Type(ctx, token).Val(); typ != "string" {
		t.Errorf("legacy token bucket still a %s", typ)
	}

	// Three units at now, one 100 ms later: a limit of 5 a minute.
	log := s.Key("l", engine.SlidingLog)
	for i, at := range []int64{now, now, now, now + 100_000} {
		client.ZAdd(ctx, log, redis.Z{Score: float64(at), Member: fmt.Sprintf("%d:%d", at, i+1)})
	}
	client.ExpireAt(ctx, log, pinnedEnd(now+100_000+60_000_000))
	ll := engine.Limit{Algorithm: engine.SlidingLog, Rate: 5, Period: time.Minute}
	clock.Advance(200 * time.Millisecond)
	r = decide(t, s, engine.Request{Key: "l", Limit: ll, Cost: 2})[0]
	if r.Err != nil || r.Decision != (engine.Decision{Limit: 5, Remaining: 1, RetryAfter: time.Minute - 200*time.Millisecond, ResetAfter: time.Minute - 100*time.Millisecond}) {
		t.Fatalf("legacy log: %s %v", enginetest.Format(r.Decision), r.Err)
	}
	if n := client.ZCard(ctx, log).Val(); n != 2 {
		t.Errorf("the legacy log holds %d entries; want 2, one per time", n)
	}
	r = decide(t, s, engine.Request{Key: "l", Limit: ll, Cost: 1})[0]
	if r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != 0 {
		t.Fatalf("after the legacy log: %s %v", enginetest.Format(r.Decision), r.Err)
	}
	noKeyWithoutTTL(t, client)
	clock.Advance(-200 * time.Millisecond)
}

// TestHotRuns: a batch's requests on one key, read once and written once
// by the batch script, reply exactly as the same requests one by one, and
// leave the key exactly as they would: the same type, value and expire
// time, compared after every batch. Standalone and on Cluster.
func TestHotRuns(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		enginetest.HotRuns(t, func(t *testing.T, now func() time.Time) engine.Store {
			return newStore(t, upstream.Config{Client: top.client, Prefix: "hotruns:", Now: now})
		}, func(t *testing.T, a, b engine.Store, alg engine.Algorithm, keyA, keyB string, _ time.Time) {
			t.Helper()
			da := dumpKey(t, top.client, a.(*upstream.Store).Key(keyA, alg))
			db := dumpKey(t, top.client, b.(*upstream.Store).Key(keyB, alg))
			if da != db {
				t.Fatalf("%s: one by one Redis holds\n%s\nin batches\n%s", keyA, da, db)
			}
		})
	})
}

// TestHotMultiRuns: a hot key's requests under a policy of several
// limits, which the batch script decides as a run reading and writing
// each limit once, reply exactly as the same requests one by one, limit by
// limit, and leave each limit's key exactly as they would. Standalone and
// on Cluster.
func TestHotMultiRuns(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		enginetest.HotMultiRuns(t, func(t *testing.T, now func() time.Time) engine.Store {
			return newStore(t, upstream.Config{Client: top.client, Prefix: "hotmulti:", Now: now})
		}, func(t *testing.T, a, b engine.Store, l engine.NamedLimit, keyA, keyB string, _ time.Time) {
			t.Helper()
			da := dumpKey(t, top.client, a.(*upstream.Store).LimitKey(keyA, l))
			db := dumpKey(t, top.client, b.(*upstream.Store).LimitKey(keyB, l))
			if da != db {
				t.Fatalf("%s, limit %s: one by one Redis holds\n%s\nin batches\n%s", keyA, l.Name, da, db)
			}
		})
	})
}

// dumpKey prints a key's type, value and expire time.
func dumpKey(tb testing.TB, c redis.UniversalClient, key string) string {
	tb.Helper()
	ctx := context.Background()
	typ, err := c.Type(ctx, key).Result()
	if err != nil {
		tb.Fatalf("TYPE %s: %v", key, err)
	}
	var v any
	switch typ {
	case "none":
		return "none"
	case "string":
		v, err = c.Get(ctx, key).Result()
	case "hash":
		var m map[string]string
		m, err = c.HGetAll(ctx, key).Result()
		v = fmt.Sprint(m) // fmt prints a map sorted by key
	case "zset":
		v, err = c.ZRangeWithScores(ctx, key, 0, -1).Result()
	default:
		tb.Fatalf("%s is a %s", key, typ)
	}
	if err != nil {
		tb.Fatalf("read %s: %v", key, err)
	}
	at, err := c.Do(ctx, "PEXPIRETIME", key).Int64()
	if err != nil {
		tb.Fatalf("PEXPIRETIME %s: %v", key, err)
	}
	return fmt.Sprintf("%s %v expires %d", typ, v, at)
}
