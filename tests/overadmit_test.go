package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/redisurl"
)

// Over-admission per failover. Redis replicates asynchronously: the
// charges a master had not yet sent to its replica when it died are gone,
// and the promoted replica admits them again. These tests count it from
// the clients' side: one key per policy at its limit under load from three
// sidecars (the real binary), the master killed by its PID, every
// admission counted against the limit. A policy that is not durable may
// go over by what the replica lacked; a durable one (durable: true) never
// goes over.
//
// On one machine a killed master's last writes are already in the
// kernel's socket buffers and reach the replica anyway, so a plain kill
// loses next to nothing. The test in the suite makes the replica lag
// first, as a slow network or a busy replica does: the replica is paused
// and its link cut (CLIENT KILL TYPE replica) while the load goes on, and
// the master is killed once it has admitted a fifth of the limit more;
// the replica is resumed as the master dies, and promoted. The longer
// measurement (overadmitRounds) kills the master plainly, round after
// round, and reports the over-admission of each.

// overadmitLimit is each policy's limit, per hour: no window ends in a
// test.
const overadmitLimit = 2000

// overadmitPolicies are the two policies measured: alike but for
// durable, and refusing on failure, so that nothing but the store admits.
const overadmitPolicies = `policies:
  plain:
    algorithm: fixed_window
    limit: %[1]d
    period: 1h
    on_failure: deny
  kept:
    algorithm: fixed_window
    limit: %[1]d
    period: 1h
    on_failure: deny
    durable: true
`

// failoverTarget is a Redis with a replica, behind sidecars.
type failoverTarget struct {
	upstream string
	// masterOf returns the live master that serves a key, waiting for
	// a failover to finish.
	masterOf func(key string) *redistest.Server
	// replicaOf returns the replica of a master.
	replicaOf func(master *redistest.Server) *redistest.Server
	// keys returns a client key per policy whose states one master
	// serves.
	keys func() string
}

func clusterTarget(t *testing.T) failoverTarget {
	cl := redistest.StartCluster(t, 3, 1)
	ft := failoverTarget{upstream: "redis+cluster://" + strings.Join(cl.Addrs(), ",")}
	ft.masterOf = cl.MasterOf
	ft.replicaOf = func(m *redistest.Server) *redistest.Server {
		for _, n := range cl.Nodes {
			// A replica's ROLE: slave, its master's host and port, …
			if role := strings.Split(mustDoT(t, n, "ROLE"), "\n"); n != m && len(role) > 2 && role[0] == "slave" && role[2] == strconv.Itoa(m.Port) {
				return n
			}
		}
		t.Fatalf("no replica of %s", m.Addr)
		return nil
	}
	ft.keys = func() string {
		for i := 0; ; i++ {
			k := fmt.Sprint("tenant", i)
			if cl.MasterOf(stateKey("plain", k)) == cl.MasterOf(stateKey("kept", k)) {
				return k
			}
		}
	}
	return ft
}

func sentinelTarget(t *testing.T) failoverTarget {
	st := redistest.StartSentinel(t)
	servers := []*redistest.Server{st.Master, st.Replica}
	ft := failoverTarget{upstream: "redis+sentinel://" + strings.Join(st.Addrs(), ",") + "/" + st.Name}
	// A master all the sentinels name: a dead master restarted before
	// they agree may be taken back as the master, and the promoted
	// replica made its replica, its data set replaced by the restarted
	// one's (empty here).
	ft.masterOf = func(string) *redistest.Server {
		var m *redistest.Server
		within(t, 30*time.Second, "a master all the sentinels name", func() bool {
			m = nil
			for _, sen := range st.Sentinels {
				out, err := sen.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", st.Name)
				addr := strings.Join(strings.Split(out, "\n"), ":")
				if err != nil || m != nil && m.Addr != addr {
					return false
				}
				for _, s := range servers {
					if s.Addr == addr {
						m = s
					}
				}
			}
			if m == nil {
				return false
			}
			role, err := m.Do("ROLE")
			return err == nil && strings.HasPrefix(role, "master")
		})
		return m
	}
	ft.replicaOf = func(m *redistest.Server) *redistest.Server {
		if m == st.Master {
			return st.Replica
		}
		return st.Master
	}
	ft.keys = func() string { return "tenant" }
	return ft
}

// stateKey is the Redis key of a client key's state under a policy of
// overadmitPolicies.
func stateKey(policy, key string) string {
	return redisurl.DefaultPrefix + "{" + policy + ":" + key + "}:fixed"
}

func mustDoT(t *testing.T, s *redistest.Server, args ...string) string {
	t.Helper()
	out, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%s at %s: %v", strings.Join(args, " "), s.Addr, err)
	}
	return out
}

// admissions is a load's count of admissions per policy.
type admissions struct {
	plain, kept atomic.Int64
	last        atomic.Int64 // UnixNano of the last admission
	errs        atomic.Int64
	firstErr    atomic.Value
}

// allowLoad runs conns clients per policy on each sidecar, each sending
// RL.ALLOW one at a time, until stop is closed or maxDur passes.
func allowLoad(sidecars []*sluice, key string, conns int, maxDur time.Duration, stop chan struct{}) (*admissions, *sync.WaitGroup) {
	a := &admissions{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(maxDur)
	for _, s := range sidecars {
		for _, policy := range []string{"plain", "kept"} {
			count := &a.plain
			if policy == "kept" {
				count = &a.kept
			}
			for range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, PoolSize: 1,
						ReadTimeout: 5 * time.Second, MaxRetries: -1})
					defer rdb.Close()
					for time.Now().Before(deadline) {
						select {
						case <-stop:
							return
						default:
						}
						v, err := rdb.Do(context.Background(), "RL.ALLOW", policy, key).Result()
						var d []int64
						if err == nil {
							d, err = ints(v)
						}
						if err != nil {
							if a.errs.Add(1) == 1 {
								a.firstErr.Store(err)
							}
							continue
						}
						if d[0] == 1 {
							count.Add(1)
							a.last.Store(time.Now().UnixNano())
						}
					}
				}()
			}
		}
	}
	return a, &wg
}

// overadmitRun is one failover under load, and what it admitted.
type overadmitRun struct {
	plain, kept int64 // admissions
	failovers   int64 // as the sidecars' INFO counted them, summed
}

// failoverUnderLoad starts three sidecars on ft, puts the two policies'
// keys under load, kills their master (lagging its replica first when
// lag), waits for the promoted replica to refuse both keys, and counts.
func failoverUnderLoad(t *testing.T, ft failoverTarget, lag bool) overadmitRun {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(pol, fmt.Appendf(nil, overadmitPolicies, overadmitLimit), 0o644); err != nil {
		t.Fatal(err)
	}
	var sidecars []*sluice
	for range 3 {
		sidecars = append(sidecars, startSluice(t, "--upstream", ft.upstream, "--policies", pol, "--upstream-timeout", "500ms"))
	}
	key := ft.keys()
	plainKey, keptKey := stateKey("plain", key), stateKey("kept", key)
	master := ft.masterOf(plainKey)
	replica := ft.replicaOf(master)
	count := func(s *redistest.Server, k string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSpace(mustDoT(t, s, "HGET", k, "n")), 10, 64)
		return n
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, s := range sidecars {
				t.Logf("sidecar %d:\n%s", i, s.logs)
			}
		}
	})

	stop := make(chan struct{})
	loaded := time.Now()
	a, wg := allowLoad(sidecars, key, 3, 45*time.Second, stop)
	var once sync.Once
	end := func() { once.Do(func() { close(stop) }); wg.Wait() }
	defer end()
	within(t, 20*time.Second, "a fifth of the limit admitted", func() bool { return count(master, plainKey) >= overadmitLimit/5 })
	cut := int64(0)
	if lag {
		if err := replica.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = replica.Signal(syscall.SIGCONT) })
		mustDoT(t, master, "CLIENT", "KILL", "TYPE", "replica")
		cut = count(master, plainKey)
		within(t, 20*time.Second, "another fifth admitted with the replica cut off", func() bool {
			return count(master, plainKey) >= cut+overadmitLimit/5
		})
	}
	before := count(master, plainKey)
	killed := time.Now()
	rate := float64(a.plain.Load()) / killed.Sub(loaded).Seconds()
	master.Kill()
	if lag {
		if err := replica.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	promoted := ft.masterOf(plainKey)
	took := time.Since(killed)
	after := count(promoted, plainKey)
	t.Logf("the master died with the plain key at %d (the replica cut off at %d), the plain policy admitting %.0f/s; the new master had %d once found; failover took %v; admitted so far: plain %d, kept %d",
		before, cut, rate, after, took.Round(time.Millisecond), a.plain.Load(), a.kept.Load())
	// The dead master comes back, as a replica of the promoted one: until
	// then the durable policy has no replica to wait for, and refuses.
	master.Restart()
	// The load goes on until neither key has admitted for a second.
	for start := time.Now(); time.Since(time.Unix(0, a.last.Load())) < time.Second || count(promoted, keptKey) < overadmitLimit; {
		if time.Since(start) > 40*time.Second {
			t.Fatalf("both keys not refusing on the promoted master within 40s: plain %d admitted, kept %d; the promoted master counts %d and %d; %d errors, the first %v",
				a.plain.Load(), a.kept.Load(), count(promoted, plainKey), count(promoted, keptKey), a.errs.Load(), a.firstErr.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	end()
	run := overadmitRun{plain: a.plain.Load(), kept: a.kept.Load()}
	// Each sidecar's watcher looks every second.
	within(t, 10*time.Second, "the failover in the sidecars' INFO", func() bool {
		run.failovers = 0
		for _, s := range sidecars {
			run.failovers += info(t, client(t, s), "sluice")["upstream_failovers"]
		}
		return run.failovers >= int64(len(sidecars))
	})
	t.Logf("limit %d; plain: %d admitted (%+d), kept (durable): %d admitted (%+d); INFO upstream_failovers summed %d; %d errors",
		overadmitLimit, run.plain, run.plain-overadmitLimit, run.kept, run.kept-overadmitLimit, run.failovers, a.errs.Load())
	if run.kept > overadmitLimit {
		t.Errorf("the durable policy admitted %d, over its limit %d", run.kept, overadmitLimit)
	}
	// A charge whose reply the kill lost was refused by the failure mode:
	// the limit is reached with fewer admissions than it allows.
	if n := count(promoted, plainKey); n < overadmitLimit {
		t.Errorf("the plain key is at %d on the new master, under its limit %d: the load did not reach the limit", n, overadmitLimit)
	}
	if a.errs.Load() > 0 {
		t.Errorf("%d requests got an error; the first: %v", a.errs.Load(), a.firstErr.Load())
	}
	return run
}

// A replica lagging when its master dies loses what it lacked: a plain
// policy admits it again, a durable one does not, and the sidecars count
// the failover. On Cluster and on Sentinel.
func TestFailoverOverAdmission(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(*testing.T) failoverTarget
	}{
		{"cluster", clusterTarget},
		{"sentinel", sentinelTarget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := failoverUnderLoad(t, tc.target(t), true)
			if run.plain <= overadmitLimit {
				t.Errorf("the plain policy admitted %d (limit %d): the failover lost nothing, so the durable policy's count proves nothing",
					run.plain, overadmitLimit)
			}
		})
	}
}

// overadmitRounds, when set (SLUICE_FAILOVER_ROUNDS=N), runs the longer
// measurement: N plain kills per topology, no lag made, each round's
// over-admission logged (go test ./tests -run TestFailoverMeasure -v).
func TestFailoverMeasure(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("SLUICE_FAILOVER_ROUNDS"))
	if rounds == 0 {
		t.Skip("the longer failover measurement runs with SLUICE_FAILOVER_ROUNDS=N (docs/operating.md)")
	}
	for _, name := range []string{"cluster", "sentinel"} {
		var over []int64
		for r := range rounds {
			t.Run(fmt.Sprint(name, "/", r), func(t *testing.T) {
				ft := clusterTarget
				if name == "sentinel" {
					ft = sentinelTarget
				}
				run := failoverUnderLoad(t, ft(t), false)
				over = append(over, run.plain-overadmitLimit)
			})
		}
		t.Logf("%s: over-admission of the plain policy per failover, %d rounds: %v", name, rounds, over)
	}
}
