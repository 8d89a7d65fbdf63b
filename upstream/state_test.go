package upstream_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/upstream"
)

// TestReadStateMatchesMemory: the state read back from Redis, in each
// algorithm's layout (lua/*.lua), is the state the memory store keeps
// after the same requests at the same instants, on one Redis and on
// Cluster: for every algorithm, a sliding window of several sub-windows,
// a bucket whose interval leaves a remainder (z kept as "µs f/d"), each
// limit of a multi-limit request, and a key never decided (the zero
// State).
func TestReadStateMatchesMemory(t *testing.T) {
	eachTopology(t, func(t *testing.T, top topology) {
		clock := enginetest.NewClock(enginetest.Epoch)
		red := newStore(t, upstream.Config{Client: top.client, Prefix: "held:", Now: clock.Now})
		mem, err := memstore.New(memstore.Config{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		type reading struct {
			name string
			key  string
			l    engine.NamedLimit
		}
		var reqs []engine.Request
		var reads []reading
		for _, alg := range engine.Algorithms {
			l := limitOf(alg, 3, time.Second) // an interval of 333333⅓ µs
			if alg == engine.SlidingWindow {
				l.Precision = 4
			}
			key := "k:" + alg.Short()
			reqs = append(reqs, engine.Request{Key: key, Limit: l, Cost: 1}, engine.Request{Key: key, Limit: l, Cost: 1})
			reads = append(reads, reading{alg.String(), key, engine.NamedLimit{Limit: l}},
				reading{alg.String() + " never decided", "none:" + alg.Short(), engine.NamedLimit{Limit: l}})
		}
		limits := []engine.NamedLimit{{Name: "burst", Limit: limitOf(engine.TokenBucket, 5, time.Second)},
			{Name: "daily", Limit: limitOf(engine.FixedWindow, 3, 24*time.Hour)}}
		multi := engine.Request{Key: "multi", Limits: limits, Cost: 1}
		for _, l := range limits {
			reads = append(reads, reading{"multi " + l.Name, "multi", l})
		}
		for _, round := range [][]engine.Request{reqs, {multi}, reqs[:4], {multi}} {
			multiRound(t, red, mem, round)
			clock.Advance(120 * time.Millisecond)
		}
		ctx := context.Background()
		for _, r := range reads {
			got, at, err := red.ReadState(ctx, r.key, r.l)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			want, memAt, _ := mem.ReadState(ctx, r.key, r.l)
			if at != clock.Now().UnixMicro() || memAt != at {
				t.Errorf("%s: read at %d (memory %d); want the pinned clock's %d", r.name, at, memAt, clock.Now().UnixMicro())
			}
			if want.B == 0 {
				// No remainder: the memory store keeps the rate that
				// wrote z in C, the script keeps z alone; either reads
				// as the same instant.
				want.C = 0
			}
			if got.A != want.A || got.B != want.B || got.C != want.C || !slices.Equal(got.Log, want.Log) {
				t.Errorf("%s (%s): Redis holds %+v; the memory store %+v", r.name, red.StateKey(r.key, r.l), got, want)
			}
			if r.name == "gcra" && got.B == 0 {
				t.Errorf("%s: z %+v has no remainder: the test does not reach the \"µs f/d\" form", r.name, got)
			}
		}
	})
}

// multiRound decides reqs on both stores, which must agree.
func multiRound(t *testing.T, red, mem engine.Store, reqs []engine.Request) {
	t.Helper()
	got, want := decide(t, red, reqs...), decide(t, mem, reqs...)
	for i := range reqs {
		if got[i].Decision != want[i].Decision {
			t.Fatalf("request %d: redis %+v, memory %+v", i, got[i], want[i])
		}
	}
}

// A key that holds what no algorithm wrote is an error that names the key
// and what it holds; the key is left as it was.
func TestReadStateWrongType(t *testing.T) {
	srv, rc := standalone(t)
	red := newStore(t, upstream.Config{Client: rc, Prefix: "wt:"})
	ctx := context.Background()
	for _, tc := range []struct {
		alg  engine.Algorithm
		set  []string
		want string
	}{
		{engine.GCRA, []string{"HSET", "wt:{k}:gcra", "a", "1"}, `upstream: the state of "wt:{k}:gcra": a hash, not the string that keeps z`},
		{engine.GCRA, []string{"SET", "wt:{k}:gcra", "12 x/3"}, `upstream: the state of "wt:{k}:gcra": z = "12 x/3": not µs f/d`},
		{engine.FixedWindow, []string{"SET", "wt:{k}:fixed", "1"}, `upstream: the state of "wt:{k}:fixed": a string, not the hash that keeps the window`},
		{engine.SlidingLog, []string{"ZADD", "wt:{k}:log", "5", "x"}, `upstream: the state of "wt:{k}:log": the entry "x" at "5" is not before/cost`},
	} {
		mustDo(t, srv, tc.set...)
		_, _, err := red.ReadState(ctx, "k", engine.NamedLimit{Limit: limitOf(tc.alg, 3, time.Second)})
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s holding %q: %v; want %s…", tc.alg, tc.set, err, tc.want)
		}
	}
}
