package upstream_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// TestDecideWhileSlotMigrates moves a hash slot from one master to another
// by hand, and holds it half-moved, deciding a batch at each step of the
// migration: keys of the slot on both masters (the source's call decides
// those it holds; the others, not there, go again alone and meet ASK), a
// key new to the slot, and keys of another slot the source keeps, in the
// same call. Every request is decided, once, and the slot's keys end on
// the target. The calls have no deadline: one a loaded machine overran
// failed the test with the ASK go-redis had no time left to follow, which
// is not what the test is about.
func TestDecideWhileSlotMigrates(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 2})
	t.Cleanup(func() { _ = cc.Close() })
	at := time.Unix(1_800_000_000, 0) // one fixed window throughout
	s := newStore(t, upstream.Config{Client: cc, Prefix: "mig:", Now: func() time.Time { return at }})
	lim := limitOf(engine.FixedWindow, 100, time.Hour)
	redisKey := func(k string) string { return s.Key(k, engine.FixedWindow) }

	// Six keys in one slot, one more for later, two in another slot of
	// the same master.
	moving := upstream.Slot(redisKey("m:0"))
	src := cl.MasterOf(redisKey("m:0"))
	var keys, stay []string
	for i := 1; len(keys) < 7 || len(stay) < 2; i++ {
		k := "m:" + strconv.Itoa(i)
		switch slot := upstream.Slot(redisKey(k)); {
		case slot == moving && len(keys) < 7:
			keys = append(keys, k)
		case slot != moving && len(stay) < 2 && cl.MasterOf(redisKey(k)) == src:
			stay = append(stay, k)
		}
	}
	fresh, keys := keys[6], keys[:6]
	dst, srcID, dstID := otherMaster(t, cl, src)
	slot := strconv.Itoa(int(moving))

	// batch decides every key once (keys first, so that their call leads
	// the source's pipeline) and checks what each key has left.
	batch := func(step string, ks []string, remaining map[string]int64) {
		t.Helper()
		var reqs []engine.Request
		for _, k := range ks {
			reqs = append(reqs, engine.Request{Key: k, Limit: lim, Cost: 1})
		}
		res := make([]engine.Result, len(reqs))
		if err := engine.Wait(s, reqs, res, time.Time{}); err != nil {
			t.Fatalf("%s: Decide: %v", step, err)
		}
		for i, r := range res {
			remaining[ks[i]]--
			if r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != remaining[ks[i]] {
				t.Fatalf("%s: key %s: %+v; want allowed with %d remaining", step, ks[i], r, remaining[ks[i]])
			}
		}
	}
	remaining := map[string]int64{}
	for _, k := range append(append([]string{fresh}, keys...), stay...) {
		remaining[k] = lim.Rate
	}
	all := append(append([]string{}, keys...), stay...)
	batch("before", all, remaining)
	ask0 := errorCount(t, src, "ASK")

	mustDo(t, dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	mustDo(t, src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	batch("importing and migrating", all, remaining)
	migrateKeys(t, src, dst, redisKey, keys[0], keys[2], keys[4])
	batch("half the keys moved", append([]string{fresh}, all...), remaining)
	batch("half the keys moved, again", all, remaining)
	if errorCount(t, src, "ASK") == ask0 {
		t.Fatal("the source never answered ASK: the test did not test it")
	}
	migrateKeys(t, src, dst, redisKey, keys[1], keys[3], keys[5])
	batch("every key moved", all, remaining)
	for _, n := range cl.Nodes {
		mustDo(t, n, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
	batch("the slot the target's", append([]string{fresh}, all...), remaining)
	// Once go-redis's map has the move, the slot's batches go to the
	// target alone: the store's slot cache was emptied when the source
	// said its keys were not there, so the slot was asked again. (A
	// cache never emptied would send every batch to the source first.)
	calls := func() int64 { return commandCalls(t, src, "fcall") + commandCalls(t, src, "evalsha") }
	for try := 0; ; try++ {
		before := calls()
		batch("after the move", keys, remaining)
		if calls() == before {
			break
		}
		if try == 40 {
			t.Fatal("40 batches after the move, the source still gets the moved slot's calls: the slot cache kept the old master")
		}
		time.Sleep(100 * time.Millisecond) // go-redis reloads its map in the background
	}
	if got := mustDo(t, dst, "CLUSTER", "COUNTKEYSINSLOT", slot); got != "7" {
		t.Errorf("the target holds %s keys of the slot; want 7", got)
	}
	if got := mustDo(t, src, "CLUSTER", "COUNTKEYSINSLOT", slot); got != "0" {
		t.Errorf("the source holds %s keys of the slot; want 0", got)
	}
}

// otherMaster is a master of cl other than src, and both one's IDs.
func otherMaster(t *testing.T, cl *redistest.Cluster, src *redistest.Server) (dst *redistest.Server, srcID, dstID string) {
	t.Helper()
	for _, n := range cl.Nodes {
		if n != src {
			dst = n
			break
		}
	}
	return dst, mustDo(t, src, "CLUSTER", "MYID"), mustDo(t, dst, "CLUSTER", "MYID")
}

func migrateKeys(t *testing.T, src, dst *redistest.Server, redisKey func(string) string, keys ...string) {
	t.Helper()
	args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", "5000", "KEYS"}
	for _, k := range keys {
		args = append(args, redisKey(k))
	}
	mustDo(t, src, args...)
}

// errorCount is how many errors of a kind srv has answered (INFO
// errorstats).
func errorCount(t *testing.T, srv *redistest.Server, kind string) int64 {
	t.Helper()
	n, err := errorStat(srv, kind)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// errorStat is errorCount for a goroutine other than the test's.
func errorStat(srv *redistest.Server, kind string) (int64, error) {
	info, err := srv.Do("INFO", "errorstats")
	if err != nil {
		return 0, fmt.Errorf("INFO errorstats: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+kind+":count="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO errorstats: %q: %w", line, err)
			}
			return n, nil
		}
	}
	return 0, nil
}

// TestDecideMultiLimitWhileSlotMigrates: a multi-limit request whose keys
// sit on both sides of a migrating slot cannot be split, so it is sent
// again until the migration has moved them all; the single-limit requests
// of its call are split off and decided at once. Each is decided once.
func TestDecideMultiLimitWhileSlotMigrates(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 2})
	t.Cleanup(func() { _ = cc.Close() })
	at := time.Unix(1_800_000_000, 0)
	s := newStore(t, upstream.Config{Client: cc, Prefix: "mml:", Now: func() time.Time { return at }})
	limits := []engine.NamedLimit{
		{Name: "burst", Limit: limitOf(engine.FixedWindow, 100, time.Hour)},
		{Name: "daily", Limit: limitOf(engine.FixedWindow, 200, 24*time.Hour)},
	}
	multiKeys := func(k string) []string {
		return []string{s.LimitKey(k, limits[0]), s.LimitKey(k, limits[1])}
	}
	single := limitOf(engine.FixedWindow, 100, time.Hour)
	moving := upstream.Slot(multiKeys("mm:0")[0])
	var singles []string
	for i := 1; len(singles) < 2; i++ {
		if k := "mm:" + strconv.Itoa(i); upstream.Slot(s.Key(k, engine.FixedWindow)) == moving {
			singles = append(singles, k)
		}
	}
	src := cl.MasterOf(multiKeys("mm:0")[0])
	dst, srcID, dstID := otherMaster(t, cl, src)
	slot := strconv.Itoa(int(moving))

	round := int64(0)
	// The calls have no deadline (the test's own timeout bounds a call that
	// never ends): that the request waits for the migration is shown by
	// order and by Redis's TRYAGAIN count, not by a deadline a loaded
	// machine overruns.
	batch := func(step string) {
		t.Helper()
		round++
		detail := make([]engine.Decision, 2)
		reqs := []engine.Request{{Key: "mm:0", Limits: limits, Detail: detail, Cost: 1}}
		for _, k := range singles {
			reqs = append(reqs, engine.Request{Key: k, Limit: single, Cost: 1})
		}
		res := make([]engine.Result, len(reqs))
		if err := engine.Wait(s, reqs, res, time.Time{}); err != nil {
			t.Fatalf("%s: Decide: %v", step, err)
		}
		if r := res[0]; r.Err != nil || !r.Decision.Allowed || detail[0].Remaining != 100-round || detail[1].Remaining != 200-round {
			t.Fatalf("%s: the multi-limit request: %+v, %+v; want allowed with %d and %d remaining", step, r, detail, 100-round, 200-round)
		}
		for i, r := range res[1:] {
			if r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != 100-round {
				t.Fatalf("%s: key %s: %+v; want allowed with %d remaining", step, singles[i], r, 100-round)
			}
		}
	}
	batch("before")
	tryAgain0 := errorCount(t, src, "TRYAGAIN")
	mustDo(t, dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	mustDo(t, src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	mustDo(t, src, "MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", "5000", "KEYS", multiKeys("mm:0")[0], s.Key(singles[0], engine.FixedWindow))
	// The request's other key moves during the next batch, once the
	// source has refused it twice (TRYAGAIN): the call it came in, then
	// the request sent again alone. Ordered by Redis's count rather than
	// by a sleep, which a loaded machine outlasts before the batch has
	// reached Redis.
	moved := make(chan error, 1)
	var movedAt time.Time // written before moved is sent on
	go func() {
		for {
			n, err := errorStat(src, "TRYAGAIN")
			if err != nil {
				moved <- err
				return
			}
			if n-tryAgain0 >= 2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		_, err := src.Do("MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", "5000", "KEYS", multiKeys("mm:0")[1])
		movedAt = time.Now()
		moved <- err
	}()
	start := time.Now()
	batch("the request's keys on both sides")
	decided := time.Now()
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	if decided.Before(movedAt) {
		t.Errorf("decided %v before its keys were on one side", movedAt.Sub(decided))
	}
	batch("every key of the request moved")
	t.Logf("the multi-limit request was decided %v after its keys were split across the masters", decided.Sub(start).Round(time.Millisecond))
}

// TestCallsPerMaster: a batch over many keys, in hundreds of slots of
// every master, costs each master one script call (EVALSHA, then FCALL
// once Check has loaded the library), and decides as many requests as it
// holds.
func TestCallsPerMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 2})
	t.Cleanup(func() { _ = cc.Close() })
	at := time.Unix(1_800_000_000, 0)
	s := newStore(t, upstream.Config{Client: cc, Prefix: "cpm:", Now: func() time.Time { return at }})
	lim := limitOf(engine.GCRA, 1000, time.Second)
	var reqs []engine.Request
	slots := map[uint16]bool{}
	for i := range 500 {
		r := engine.Request{Key: "k:" + strconv.Itoa(i), Limit: lim, Cost: 1}
		reqs = append(reqs, r)
		slots[upstream.Slot(s.Key(r.Key, r.Limit.Algorithm))] = true
	}
	decide(t, s, reqs...) // loads the script on every master
	for round, cmd := range []string{"evalsha", "fcall"} {
		if cmd == "fcall" {
			if err := s.Check(context.Background()); err != nil || s.Scripts() != "functions" {
				t.Fatalf("Check: %v, %s; want the library loaded on every master", err, s.Scripts())
			}
		}
		for _, n := range cl.Nodes {
			mustDo(t, n, "CONFIG", "RESETSTAT")
		}
		for k, r := range decide(t, s, reqs...) {
			if r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != lim.Capacity()-2-int64(round) {
				t.Fatalf("%s, request %d: %+v; want allowed, the %d-th of its key", cmd, k, r, round+2)
			}
		}
		for _, n := range cl.Nodes {
			if calls := commandCalls(t, n, cmd); calls != 1 {
				t.Errorf("master %s: %d %s calls for a batch of %d keys in %d slots; want 1", n.Addr, calls, cmd, len(reqs), len(slots))
			}
		}
	}
}

// commandCalls is how many calls of cmd (lower case) srv has run (INFO
// commandstats).
func commandCalls(t *testing.T, srv *redistest.Server, cmd string) int64 {
	t.Helper()
	for _, line := range strings.Split(mustDo(t, srv, "INFO", "commandstats"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, err := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
			if err != nil {
				t.Fatal(fmt.Errorf("INFO commandstats: %q: %w", line, err))
			}
			return n
		}
	}
	return 0
}
