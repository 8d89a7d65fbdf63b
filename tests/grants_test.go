package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// Grants (--grants): three sidecars on one hot key, each deciding it from
// units Redis granted it. What is asserted is what the issue asks: the
// fleet never admits more than the limit, counted by the clients, by
// every sidecar and in Redis; a reset and a policy reload revoke the
// grants; a sidecar killed with a grant outstanding takes nothing over
// the limit with it; and when the load moves from one sidecar to another,
// the refusals caused by units held in the first one's grant stay under
// the stated bound, a quarter of the capacity per other sidecar.

// grantsPolicies: fixed windows of an hour, so that no window ends in a
// test and Redis's count is the whole story; refused when Redis cannot
// answer, so that nothing but Redis and the grants admits.
const grantsPolicies = `policies:
  hot:
    algorithm: fixed_window
    limit: %d
    period: 1h
    on_failure: deny
`

// grantsFleet is sidecars with --grants on one Redis (or Cluster), and
// the Redis masters to read the counts from.
type grantsFleet struct {
	sidecars []*sluice
	clients  []*redis.Client
	masters  []string
	policies string
}

func startGrantsFleet(t *testing.T, n int, cluster bool, limit int) *grantsFleet {
	t.Helper()
	f := &grantsFleet{policies: filepath.Join(t.TempDir(), "policies.yaml")}
	if err := os.WriteFile(f.policies, []byte(fmt.Sprintf(grantsPolicies, limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	upstream := ""
	if cluster {
		cl := redistest.StartCluster(t, 3, 0)
		upstream = "redis+cluster://" + strings.Join(cl.Addrs(), ",")
		f.masters = cl.Addrs()
	} else {
		r := redistest.Start(t)
		upstream = "redis://" + r.Addr
		f.masters = []string{r.Addr}
	}
	for range n {
		s := startSluice(t, "--upstream", upstream, "--grants", "--policies", f.policies, "--policies-poll", "100ms",
			"--upstream-timeout", decidingTimeout, "--on-upstream-failure", "deny")
		f.sidecars = append(f.sidecars, s)
		f.clients = append(f.clients, client(t, s))
	}
	return f
}

// redisCount is the fixed window's count of key in Redis: the units
// admitted and the units held in grants.
func (f *grantsFleet) redisCount(t *testing.T, key string) int64 {
	t.Helper()
	var total int64
	found := 0
	for _, addr := range f.masters {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		keys, err := rdb.Keys(context.Background(), "*hot:"+key+"*").Result()
		if err != nil {
			rdb.Close()
			t.Fatalf("KEYS on %s: %v", addr, err)
		}
		for _, k := range keys {
			n, err := rdb.HGet(context.Background(), k, "n").Int64()
			if err != nil {
				rdb.Close()
				t.Fatalf("HGET %s n: %v", k, err)
			}
			total += n
			found++
		}
		rdb.Close()
	}
	if found != 1 {
		t.Fatalf("%d states of %q in Redis, want 1", found, key)
	}
	return total
}

// grantInfo is a sidecar's INFO grants.
func grantInfo(t *testing.T, rdb *redis.Client) map[string]int64 { return info(t, rdb, "grants") }

// allow sends RL.ALLOW hot key and says whether it was admitted.
func allow(ctx context.Context, rdb *redis.Client, key string) (bool, error) {
	return allowBy(ctx, rdb, "hot", key)
}

// allowBy sends RL.ALLOW policy key and says whether it was admitted.
func allowBy(ctx context.Context, rdb *redis.Client, policy, key string) (bool, error) {
	v, err := rdb.Do(ctx, "RL.ALLOW", policy, key).Slice()
	if err != nil {
		return false, err
	}
	if len(v) < 1 {
		return false, fmt.Errorf("RL.ALLOW answered %v", v)
	}
	n, ok := v[0].(int64)
	return ok && n == 1, nil
}

// hammer sends RL.ALLOW hot key from workers goroutines on rdb until stop
// is closed or each has sent most, counting the admissions in admitted.
// It returns once all are done, with the first error a worker met (each
// stops at its first). It touches no testing.T: it runs off the test's
// goroutine.
func hammer(rdb *redis.Client, key string, workers, most int, stop <-chan struct{}, admitted *atomic.Int64) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range most {
				select {
				case <-stop:
					return
				default:
				}
				ok, err := allow(context.Background(), rdb, key)
				if err != nil {
					errs <- fmt.Errorf("RL.ALLOW: %w", err)
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when none
}

// waitGrantsReturned waits until no sidecar holds a grant (their key went
// cold: the flush ended them and gave back what they did not spend).
func (f *grantsFleet) waitGrantsReturned(t *testing.T) {
	t.Helper()
	within(t, 5*time.Second, "every sidecar's grants ended", func() bool {
		for _, c := range f.clients {
			if grantInfo(t, c)["grants_held"] != 0 {
				return false
			}
		}
		return true
	})
}

// Three sidecars on one hot key, more load than the limit: the clients'
// admissions, the sidecars' own counts and Redis's count all agree, and
// none is over the limit; most decisions came from grants.
func TestGrantsThreeSidecarsOneHotKey(t *testing.T) {
	const limit = 3000
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			f := startGrantsFleet(t, 3, cluster, limit)
			var admitted [3]atomic.Int64
			var errs [3]error
			var wg sync.WaitGroup
			for i, c := range f.clients {
				wg.Go(func() { errs[i] = hammer(c, "user1", 4, 400, nil, &admitted[i]) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			f.waitGrantsReturned(t)
			var total, fromGrants, bySidecars int64
			for i, c := range f.clients {
				total += admitted[i].Load()
				fromGrants += grantInfo(t, c)["grant_decisions"]
				bySidecars += info(t, c, "stats")["decisions_allowed"]
			}
			inRedis := f.redisCount(t, "user1")
			t.Logf("admitted %d of %d (%d from grants); the sidecars count %d, Redis %d", total, limit, fromGrants, bySidecars, inRedis)
			if total > limit || bySidecars != total {
				t.Fatalf("admitted %d by the clients' count, %d by the sidecars', limit %d", total, bySidecars, limit)
			}
			// Every grant ended and gave back what it did not spend:
			// Redis counts exactly what was admitted.
			if inRedis != total {
				t.Fatalf("Redis counts %d, the clients were admitted %d", inRedis, total)
			}
			if total != limit {
				t.Errorf("admitted %d under a load of 4800 against a limit of %d: units lost", total, limit)
			}
			if fromGrants < total/2 {
				t.Errorf("only %d of %d admissions came from grants", fromGrants, total)
			}
		})
	}
}

// A reset (RL.RESET through one sidecar, announced to the others) and a
// policy reload each revoke the grants every sidecar holds, mid-load.
func TestGrantsRevokedMidLoad(t *testing.T) {
	f := startGrantsFleet(t, 3, false, 1_000_000)
	stop := make(chan struct{})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(f.clients))
	for i, c := range f.clients {
		wg.Go(func() { errs[i] = hammer(c, "user2", 2, 1_000_000, stop, &admitted) })
	}
	defer func() {
		close(stop)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	}()
	revoked := func() []int64 {
		out := make([]int64, len(f.clients))
		for i, c := range f.clients {
			out[i] = grantInfo(t, c)["grants_revoked"]
		}
		return out
	}
	everyHolds := func() bool {
		for _, c := range f.clients {
			if grantInfo(t, c)["grants_held"] < 1 {
				return false
			}
		}
		return true
	}
	reloads := 0
	revokes := []struct {
		name   string
		revoke func()
	}{
		{"RL.RESET", func() {
			if err := f.clients[0].Do(context.Background(), "RL.RESET", "POLICY", "hot", "user2").Err(); err != nil {
				t.Fatalf("RL.RESET: %v", err)
			}
		}},
		{"reload", func() {
			reloads++ // another content each time, or the watcher has nothing to reload
			more := fmt.Sprintf(grantsPolicies, 1_000_000+reloads)
			if err := os.WriteFile(f.policies, []byte(more), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, rv := range revokes {
		// A sidecar may be between two grants when the revocation comes:
		// tried again until each has dropped one. The announcement and
		// the reload are asynchronous: each try waits up to 2s for them.
		before := revoked()
		allRevoked := func() bool {
			for i, n := range revoked() {
				if n <= before[i] {
					return false
				}
			}
			return true
		}
		for try := 0; ; try++ {
			within(t, 5*time.Second, "every sidecar holds a grant", everyHolds)
			rv.revoke()
			for start := time.Now(); !allRevoked() && time.Since(start) < 2*time.Second; {
				time.Sleep(20 * time.Millisecond)
			}
			if allRevoked() {
				break
			}
			if try == 4 {
				t.Fatalf("%s: grants revoked per sidecar went from %v to %v", rv.name, before, revoked())
			}
		}
	}
}

// A sidecar killed (SIGKILL, by its PID) with a grant outstanding: the
// units it held are lost to the fleet until the window ends (its grant
// is never given back), and nothing is admitted over the limit; the other
// sidecar admits the rest.
func TestGrantsSidecarKilledWithAGrant(t *testing.T) {
	const limit = 2000
	f := startGrantsFleet(t, 2, false, limit)
	stop := make(chan struct{})
	var killed, other atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Its connections fail once it is killed: the error is expected.
		_ = hammer(f.clients[0], "user3", 4, limit, stop, &killed)
	}()
	within(t, 5*time.Second, "the first sidecar holds a grant", func() bool {
		return grantInfo(t, f.clients[0])["grant_units_outstanding"] > 0
	})
	s := f.sidecars[0]
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	s.done <- nil // killed on purpose: its cleanup expects nothing more
	close(stop)
	<-done
	held := f.redisCount(t, "user3") - killed.Load()
	if err := hammer(f.clients[1], "user3", 4, limit, nil, &other); err != nil {
		t.Fatal(err)
	}
	total := killed.Load() + other.Load()
	t.Logf("the killed sidecar was admitted %d and held %d unspent; the other admitted %d; limit %d", killed.Load(), held, other.Load(), limit)
	if total > limit {
		t.Fatalf("admitted %d, limit %d", total, limit)
	}
	if held < 0 || held > limit/4 {
		t.Fatalf("%d units held by the killed sidecar, want 0 to a quarter of %d", held, limit)
	}
	if total+held != limit {
		t.Fatalf("admitted %d and %d lost in the killed sidecar's grant: %d, want the limit %d", total, held, total+held, limit)
	}
}

// The load moves from one sidecar to another: the first one's load falls
// to a trickle (still hot, so its grant lives on) while the second one's
// rises. The second one's refusals while the fleet has admitted less than
// the limit are the refusals caused by units held in the first one's
// grant: they are counted, and the units missing at each are at most the
// first one's grant, a quarter of the limit. Once the first one's grants
// end and give back, the whole limit is admitted, no more.
func TestGrantsLoadMoves(t *testing.T) {
	const limit = 4000
	f := startGrantsFleet(t, 2, false, limit)
	var first, second atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var err error
	wg.Go(func() { err = hammer(f.clients[0], "user4", 4, limit, stop, &first) })
	within(t, 20*time.Second, "the first sidecar admitted half the limit", func() bool { return first.Load() >= limit/2 })
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// The first sidecar's trickle: a request every 5ms.
	trickleStop, trickleDone := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-trickleStop:
				trickleDone <- nil
				return
			case <-tick.C:
			}
			ok, err := allow(context.Background(), f.clients[0], "user4")
			if err != nil {
				trickleDone <- err
				return
			}
			if ok {
				first.Add(1)
			}
		}
	}()
	// The second sidecar's load, until it has been refused for a second
	// on end (the trickle holding what is left) or 10s pass.
	var refusals, worst atomic.Int64
	var lastAdmit atomic.Int64
	lastAdmit.Store(time.Now().UnixNano())
	moveStop := make(chan struct{})
	var moved sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		moved.Go(func() {
			for {
				select {
				case <-moveStop:
					return
				default:
				}
				ok, err := allow(context.Background(), f.clients[1], "user4")
				if err != nil {
					errs <- err
					return
				}
				if ok {
					second.Add(1)
					lastAdmit.Store(time.Now().UnixNano())
					continue
				}
				if missing := limit - first.Load() - second.Load(); missing > 0 {
					refusals.Add(1)
					for w := worst.Load(); missing > w && !worst.CompareAndSwap(w, missing); w = worst.Load() {
					}
				}
			}
		})
	}
	start := time.Now()
	for time.Since(start) < 10*time.Second && time.Since(time.Unix(0, lastAdmit.Load())) < time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	close(trickleStop)
	if err := <-trickleDone; err != nil {
		t.Fatal(err)
	}
	// The first sidecar cold, its grants end and give back: the second
	// admits what they held.
	f.waitGrantsReturned(t)
	within(t, 5*time.Second, "the whole limit admitted", func() bool { return first.Load()+second.Load() >= limit })
	close(moveStop)
	moved.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := first.Load() + second.Load()
	t.Logf("first sidecar admitted %d, second %d; the second was refused %d times while units were held in the first one's grant (at most %d missing, bound %d)",
		first.Load(), second.Load(), refusals.Load(), worst.Load(), limit/4)
	if total != limit {
		t.Fatalf("admitted %d, want the whole limit %d once the grants came back", total, limit)
	}
	if worst.Load() > limit/4 {
		t.Fatalf("a refusal met %d units held elsewhere, over the bound %d", worst.Load(), limit/4)
	}
	if inRedis := f.redisCount(t, "user4"); inRedis != limit {
		t.Fatalf("Redis counts %d, want %d", inRedis, limit)
	}
}

// The buckets and a multi-limit policy under grants, three sidecars on
// one hot key each: never more than the capacity (refilling one unit an
// hour, nothing refills during the test), counted by the clients and by
// every sidecar, most of it from grants. What the grants held when the
// load ended is not given back (a bucket's units lapse as it refills),
// so the fleet may admit less than the capacity.
func TestGrantsBucketsAndMultiLimit(t *testing.T) {
	const capacity = 2000
	f := startGrantsFleet(t, 3, false, capacity)
	err := os.WriteFile(f.policies, []byte(fmt.Sprintf(`policies:
  hot:
    algorithm: fixed_window
    limit: %[1]d
    period: 1h
  token:
    algorithm: token_bucket
    rate: 1
    period: 1h
    capacity: %[1]d
    on_failure: deny
  gcra:
    algorithm: gcra
    rate: 1
    period: 1h
    burst: %[2]d
    on_failure: deny
  multi:
    on_failure: deny
    limits:
      - name: bucket
        algorithm: token_bucket
        rate: 1
        period: 1h
        capacity: %[1]d
      - name: hour
        algorithm: fixed_window
        limit: %[3]d
        period: 1h
`, capacity, capacity-1, capacity+500)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "every sidecar has the new policies", func() bool {
		for _, c := range f.clients {
			if _, err := allowBy(context.Background(), c, "multi", "probe"); err != nil {
				return false
			}
		}
		return true
	})
	for _, policy := range []string{"token", "gcra", "multi"} {
		t.Run(policy, func(t *testing.T) {
			before := make([]int64, len(f.clients))
			grantsBefore := make([]int64, len(f.clients))
			for i, c := range f.clients {
				before[i] = info(t, c, "stats")["decisions_allowed"]
				grantsBefore[i] = grantInfo(t, c)["grant_decisions"]
			}
			var admitted atomic.Int64
			errs := make([]error, len(f.clients))
			var wg sync.WaitGroup
			for i, c := range f.clients {
				wg.Go(func() {
					var inner sync.WaitGroup
					ch := make(chan error, 4)
					for range 4 {
						inner.Go(func() {
							for range 250 {
								ok, err := allowBy(context.Background(), c, policy, "user5")
								if err != nil {
									ch <- err
									return
								}
								if ok {
									admitted.Add(1)
								}
							}
						})
					}
					inner.Wait()
					close(ch)
					errs[i] = <-ch
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			var bySidecars, fromGrants int64
			for i, c := range f.clients {
				bySidecars += info(t, c, "stats")["decisions_allowed"] - before[i]
				fromGrants += grantInfo(t, c)["grant_decisions"] - grantsBefore[i]
			}
			t.Logf("%s: admitted %d of a capacity of %d (%d from grants); the sidecars count %d", policy, admitted.Load(), capacity, fromGrants, bySidecars)
			// One unit may refill in an hour: the test lasts seconds.
			if admitted.Load() > capacity || bySidecars != admitted.Load() {
				t.Fatalf("admitted %d by the clients' count, %d by the sidecars', capacity %d", admitted.Load(), bySidecars, capacity)
			}
			if fromGrants < admitted.Load()/2 {
				t.Errorf("only %d of %d admissions came from grants", fromGrants, admitted.Load())
			}
		})
	}
}
