package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// leasePolicies is a concurrency policy of 10 leases that end after 1s.
func leasePolicies(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(p, []byte("policies:\n  jobs:\n    algorithm: concurrency\n    limit: 10\n    lease_ttl: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Three sidecars on one Redis, 50 clients holding leases of one key for
// random short times: the lease script's own high-water mark shows that
// never more than 10 were held at once; every lease was still held when
// its client released it, or ended by itself; none is left. A lease
// released 1s or more after its client asked for it may have ended by
// itself first (a loaded machine can stall a client that long): it counts
// as lost only when the client saw less than its lease_ttl pass.
func TestLeasesAcrossSidecars(t *testing.T) {
	r := redistest.Start(t)
	pol := leasePolicies(t)
	var cars []*sluice
	for range 3 {
		// The test counts leases, not latency: a CI machine running the
		// race detector beside it can stall a lease call past the default
		// 100ms, and a release that times out is an error to its client.
		cars = append(cars, startSluice(t, "--upstream", "redis://"+r.Addr, "--policies", pol, "--upstream-timeout", decidingTimeout))
	}
	const clients, limit = 50, 10
	var granted, released, abandoned, refused, lost, expired atomic.Int64
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: cars[i%3].Addr, Protocol: 2})
			defer rdb.Close()
			ctx := ctxT(t)
			rng := rand.New(rand.NewPCG(uint64(i), 16))
			for n := 0; time.Now().Before(stop); n++ {
				id := fmt.Sprintf("c%d-%d", i, n)
				asked := time.Now()
				v, err := rdb.Do(ctx, "RL.ACQUIRE", "POLICY", "jobs", "work", id).Slice()
				if err != nil || len(v) != 5 {
					errs <- fmt.Errorf("client %d: RL.ACQUIRE: %v %v", i, v, err)
					return
				}
				if v[0].(int64) != 1 {
					refused.Add(1)
					time.Sleep(time.Duration(2+rng.IntN(8)) * time.Millisecond)
					continue
				}
				granted.Add(1)
				time.Sleep(time.Duration(1+rng.IntN(20)) * time.Millisecond)
				if rng.IntN(50) == 0 {
					abandoned.Add(1) // a client that never releases: its lease ends at 1s
					continue
				}
				held, err := rdb.Do(ctx, "RL.RELEASE", "POLICY", "jobs", "work", id).Int64()
				if err != nil {
					errs <- fmt.Errorf("client %d: RL.RELEASE: %v", i, err)
					return
				}
				switch {
				case held == 1:
					released.Add(1)
				case time.Since(asked) >= time.Second: // its lease_ttl may have passed
					expired.Add(1)
				default:
					lost.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	key := "sluice:{jobs:work}:lease"
	mark, err := r.Do("ZSCORE", key, "")
	if err != nil {
		t.Fatal(err)
	}
	most, _ := strconv.Atoi(strings.TrimPrefix(mark, "-"))
	t.Logf("granted %d, released %d, abandoned %d, ended before a late release %d, refused %d; most held at once: %d",
		granted.Load(), released.Load(), abandoned.Load(), expired.Load(), refused.Load(), most)
	if most > limit {
		t.Errorf("the script saw %d leases held at once, more than the limit %d", most, limit)
	}
	if most < limit || refused.Load() == 0 {
		t.Errorf("most held %d, refused %d: the clients never contended, so the test proves nothing", most, refused.Load())
	}
	if lost.Load() > 0 {
		t.Errorf("%d leases were gone when their client released them, well before their 1s", lost.Load())
	}
	if granted.Load() != released.Load()+abandoned.Load()+expired.Load()+lost.Load() {
		t.Errorf("granted %d != released %d + abandoned %d + ended before a late release %d + lost %d",
			granted.Load(), released.Load(), abandoned.Load(), expired.Load(), lost.Load())
	}
	// The abandoned leases end by themselves: after the TTL none is left.
	time.Sleep(1100 * time.Millisecond)
	rdb := redis.NewClient(&redis.Options{Addr: cars[0].Addr, Protocol: 2})
	defer rdb.Close()
	v, err := rdb.Do(ctxT(t), "RL.ACQUIRE", "POLICY", "jobs", "work", "last").Slice()
	if err != nil || v[0].(int64) != 1 || v[2].(int64) != limit-1 {
		t.Errorf("after every lease ended: %v %v, want all %d free", v, err, limit)
	}
	info, err := rdb.Info(ctxT(t), "leases").Result()
	if err != nil || !strings.Contains(info, "leases_acquired:") || !strings.Contains(info, "leases_released:") {
		t.Errorf("INFO leases = %q, %v", info, err)
	}
}

// A client killed while it holds a lease frees its slot at lease_ttl, not
// before.
func TestLeaseOfKilledClient(t *testing.T) {
	r := redistest.Start(t)
	pol := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pol, []byte("policies:\n  one:\n    algorithm: concurrency\n    limit: 1\n    lease_ttl: 1500ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--policies", pol, "--upstream-timeout", decidingTimeout)
	// The client: acquires, then sleeps holding the lease until killed.
	// The lease ends 1500ms after Redis granted it, which is after started.
	started := time.Now()
	cli := exec.Command("sh", "-c", "redis-cli -p "+strconv.Itoa(s.Port)+" RL.ACQUIRE POLICY one k doomed && exec sleep 60")
	out := &syncBuffer{}
	cli.Stdout = out
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "doomed") {
		if time.Now().After(deadline) {
			_ = cli.Process.Kill()
			t.Fatalf("the client did not acquire: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	acquired := time.Now()
	_ = cli.Process.Kill()
	_ = cli.Wait()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	defer rdb.Close()
	v, err := rdb.Do(ctxT(t), "RL.ACQUIRE", "POLICY", "one", "k", "next").Slice()
	// Refused, or admitted only once lease_ttl has passed: a loaded
	// machine may take that long to get here, and the order is what the
	// test asserts, not how fast it ran.
	switch {
	case err != nil:
		t.Fatalf("right after the kill: %v", err)
	case v[0].(int64) == 0 && (v[3].(int64) <= 0 || v[3].(int64) > 1500):
		t.Fatalf("right after the kill: %v, want refused for up to 1500ms", v)
	case v[0].(int64) == 1 && time.Since(started) < 1500*time.Millisecond:
		t.Fatalf("right after the kill, %v after the client started: %v, want refused until lease_ttl", time.Since(started), v)
	}
	time.Sleep(time.Until(acquired.Add(1600 * time.Millisecond)))
	v, err = rdb.Do(ctxT(t), "RL.ACQUIRE", "POLICY", "one", "k", "next").Slice()
	if err != nil || v[0].(int64) != 1 {
		t.Errorf("after lease_ttl: %v %v, want the slot free", v, err)
	}
}
