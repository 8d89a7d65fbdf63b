package tests

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	"github.com/sluice-rl/sluice/internal/testca"
)

// Failure tests: the real binary in front of real redis-server
// processes that are killed, paused, flushed, failed over, unreachable at
// start-up, guarded by an ACL user and by TLS. Each test is bounded in time
// and logs the figures it measures.

// upstreamTimeout is the deadline the resilience tests give the binary
// (--upstream-timeout, its default).
const upstreamTimeout = 100 * time.Millisecond

// reply is one request of a load run as the client saw it.
type reply struct {
	n         int // the request's number on its connection
	sent, got time.Time
	d         []int64 // the decision's integers, when there was no error
	err       error
}

// load is a bounded run of concurrent clients, each on its own connection
// sending one request at a time until stopped, until maxPerConn requests,
// or until maxDur.
type load struct {
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	replies [][]reply // per connection; each written only by its goroutine until wg is done
}

const maxPerConn = 50_000

// startLoad starts conns clients against addr; args(conn, n) is the n-th
// command of connection conn.
// It is stopped when t ends, if not before.
func startLoad(t *testing.T, addr string, conns int, maxDur time.Duration, args func(conn, n int) []any) *load {
	return startLoadOn(t, func(int) string { return addr }, conns, 0, maxDur, args)
}

// startLoadOn is startLoad with connection conn on addr(conn), each
// sending a request every tick of every (their ticks spread over one
// interval; a reply that comes late skips the ticks it missed), or one
// after another when every is 0.
func startLoadOn(t *testing.T, addr func(conn int) string, conns int, every, maxDur time.Duration, args func(conn, n int) []any) *load {
	l := &load{stop: make(chan struct{}), replies: make([][]reply, conns)}
	t.Cleanup(func() { l.Stop() })
	deadline := time.Now().Add(maxDur)
	for c := range conns {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: addr(c), Protocol: 2, PoolSize: 1,
				ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: -1})
			defer rdb.Close()
			var tick <-chan time.Time
			if every > 0 {
				tk := time.NewTicker(every)
				defer tk.Stop()
				tick = tk.C
				time.Sleep(every * time.Duration(c) / time.Duration(conns))
			}
			for n := 0; n < maxPerConn && time.Now().Before(deadline); n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				r := reply{n: n, sent: time.Now()}
				v, err := rdb.Do(context.Background(), args(c, n)...).Result()
				r.got = time.Now()
				if err == nil {
					r.d, err = ints(v)
				}
				r.err = err
				l.replies[c] = append(l.replies[c], r)
				if tick != nil {
					select {
					case <-l.stop:
						return
					case <-tick:
					}
				}
			}
		}()
	}
	return l
}

// Stop stops the clients and returns what each saw.
func (l *load) Stop() [][]reply {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.replies
}

// summary counts a load run's replies, errors and slowest reply.
type summary struct {
	n, errs  int
	firstErr error
	max      time.Duration
}

func summarize(replies [][]reply) summary {
	var s summary
	for _, rs := range replies {
		for _, r := range rs {
			s.n++
			if r.err != nil {
				s.errs++
				if s.firstErr == nil {
					s.firstErr = r.err
				}
			}
			s.max = max(s.max, r.got.Sub(r.sent))
		}
	}
	return s
}

// ints is a RESP2 decision as integers, checked off the test goroutine.
func ints(v any) ([]int64, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("reply %T %v: want an array", v, v)
	}
	out := make([]int64, len(a))
	for i, x := range a {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("reply %v: element %d is %T", v, i, x)
		}
		out[i] = n
	}
	return out, nil
}

// info reads INFO section's integer fields from a sluice (or Redis).
func info(t *testing.T, rdb *redis.Client, section string) map[string]int64 {
	t.Helper()
	text, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}

// fallbacks is how many decisions a sidecar has made by a failure mode.
func fallbacks(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	return info(t, rdb, "sluice")["fallback_decisions"]
}

// client is a RESP2 go-redis client of a sidecar, closed when t ends.
func client(t *testing.T, s *sluice) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// within polls ok every 10ms until it holds, failing t after limit; it
// returns how long that took.
func within(t *testing.T, limit time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// fromStore reports whether a fresh key decided through a and peeked
// through b shows one count: both sidecars decide from the shared Redis.
func fromStore(ctx context.Context, a, b *redis.Client, key string) bool {
	v, err := a.Do(ctx, "RL.TOKEN", key, 100, 1, "1h", 7).Result()
	if d, derr := ints(v); err != nil || derr != nil || d[0] != 1 || d[2] != 93 {
		return false
	}
	v, err = b.Do(ctx, "RL.TOKEN", key, 100, 1, "1h", 0).Result()
	d, derr := ints(v)
	return err == nil && derr == nil && d[2] == 93
}

// outagePolicies are three policies that differ only in on_failure, with
// a limit no load run reaches, so that only a failure mode ever refuses.
const outagePolicies = `policies:
  open:
    algorithm: fixed_window
    limit: 1000000000
    period: 1h
    on_failure: allow
  closed:
    algorithm: fixed_window
    limit: 1000000000
    period: 1h
    on_failure: deny
  local:
    algorithm: fixed_window
    limit: 1000000000
    period: 1h
    on_failure: local
`

var outageNames = []string{"open", "closed", "local"}

// Redis killed (SIGKILL), paused (SIGSTOP) or made to forget its scripts
// (SCRIPT FLUSH) while 50 connections send RL.ALLOW over three policies:
// every request gets a reply and no error; while Redis cannot answer, each
// policy's failure mode decides, and every connection is answered before
// Redis can answer again; when it can, two sidecars agree again.
//
// "In time" is asserted as an order, not in milliseconds, which a loaded
// machine stretches: a reply that waited for Redis could only come after
// Redis was mended. How long the breaker waits before it probes a mended
// Redis is engine's TestGuardBreakerOpensProbesAndCloses, on an injected
// clock; the upstream timeout counting a request's time in the queue is
// engine's batcher tests.
func TestRedisOutageUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		// outage breaks Redis and returns the function that mends it;
		// down says whether Redis then cannot answer at all.
		outage func(t *testing.T, r *redistest.Server) func()
		down   bool
	}{
		{"kill", func(t *testing.T, r *redistest.Server) func() {
			r.Kill()
			return r.Restart
		}, true},
		{"sigstop", func(t *testing.T, r *redistest.Server) func() {
			if err := r.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := r.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			}
		}, true},
		{"script-flush", func(t *testing.T, r *redistest.Server) func() {
			// Flush again and again while the load runs.
			for range 20 {
				if _, err := r.Do("SCRIPT", "FLUSH"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(25 * time.Millisecond)
			}
			return func() {}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.Start(t)
			pol := filepath.Join(t.TempDir(), "policies.yaml")
			if err := os.WriteFile(pol, []byte(outagePolicies), 0o644); err != nil {
				t.Fatal(err)
			}
			timeout := upstreamTimeout
			if !tc.down {
				// SCRIPT FLUSH tests the reload of lost scripts, not the
				// deadline: a batch that meets NOSCRIPT sends EVAL within
				// what is left of its deadline, which a loaded machine
				// under -race can spend before Redis has compiled the
				// script again.
				timeout = time.Second
			}
			// The whole limit locally: a local count is told from Redis's
			// by its size (checkFailureModes), where the fleet's share
			// would divide it by the sidecars counted so far.
			args := []string{"--upstream", "redis://" + r.Addr, "--policies", pol,
				"--upstream-timeout", timeout.String(), "--on-upstream-failure", "allow", "--local-share", "whole"}
			a, b := startSluice(t, args...), startSluice(t, args...)
			ra, rb := client(t, a), client(t, b)
			ctx := ctxT(t)
			// The first round trip loads the scripts, which on a loaded
			// machine may outlast the deadline once: the count is shared
			// once a fresh key shows it.
			within(t, 5*time.Second, "the sidecars share a count before the outage", func() bool {
				return fromStore(ctx, ra, rb, fmt.Sprint("warm:", time.Now().UnixNano()))
			})
			precharge(t, ra)
			l := startLoad(t, a.Addr, 50, 20*time.Second, func(c, n int) []any {
				return []any{"RL.ALLOW", outageNames[n%3], fmt.Sprint("conn", c)}
			})
			time.Sleep(500 * time.Millisecond)
			before := fallbacks(t, ra)
			broke := time.Now()
			mend := tc.outage(t, r)
			if tc.down {
				time.Sleep(1500 * time.Millisecond) // an outage long enough for many probes
			}
			mended := time.Now()
			mend()
			back := within(t, 5*time.Second, "decisions global again", func() bool {
				return fromStore(ctx, ra, rb, fmt.Sprint("after:", time.Now().UnixNano()))
			})
			t.Logf("%s: decisions global again %v after Redis answered", tc.name, back.Round(time.Millisecond))
			// The restarted Redis lost the charge: charge it again, so that
			// what Redis decides from now on is told apart.
			precharge(t, ra)
			recharged, fbRecharged := time.Now(), fallbacks(t, ra)
			time.Sleep(300 * time.Millisecond) // load on the mended Redis too
			replies := l.Stop()
			fbAfter := fallbacks(t, ra) - fbRecharged
			sum := summarize(replies)
			t.Logf("%s: %d replies from 50 connections, slowest %v, %d fallback decisions",
				tc.name, sum.n, sum.max.Round(time.Millisecond), fallbacks(t, ra)-before)
			if sum.errs > 0 {
				t.Errorf("%d of %d requests got an error; the first: %v\n%s", sum.errs, sum.n, sum.firstErr, a.logs)
			}
			if !tc.down {
				// Every decision came from Redis: none by a failure mode,
				// so no "closed" request was refused.
				if n := fallbacks(t, ra) - before; n != 0 {
					t.Errorf("%d decisions by failure mode during SCRIPT FLUSH; want 0\n%s", n, a.logs)
				}
				checkNoRefusal(t, replies)
				checkFromRedis(t, replies, time.Time{}, 0)
				return
			}
			checkFailureModes(t, replies, broke, mended)
			checkFromRedis(t, replies, recharged, fbAfter)
			if !strings.Contains(a.logs.String(), "the upstream Redis cannot be used") {
				t.Errorf("the log does not say the upstream failed:\n%s", a.logs)
			}
		})
	}
}

// outageLimit is the outage policies' limit; charged is what precharge
// takes of it in Redis for each connection's "local" key, more than any
// connection sends (maxPerConn), so that a remaining count above
// outageLimit-charged comes from the sidecar's own in-memory store, and one
// at or below it from Redis.
const (
	outageLimit = 1_000_000_000
	charged     = 100_000
)

// precharge takes charged units of each load connection's "local" key in
// Redis, through the sidecar.
func precharge(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for c := range 50 {
			p.Do(ctx, "RL.ALLOW", "local", fmt.Sprint("conn", c), charged)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("precharge: %v", err)
	}
	for c, cmd := range cmds {
		if d, err := ints(cmd.(*redis.Cmd).Val()); err != nil || d[2] > outageLimit-charged {
			t.Fatalf("precharge conn%d: %v, %v: not counted in Redis", c, d, err)
		}
	}
}

// checkFromRedis: the "local" requests sent after from were decided by
// Redis, which holds the charge, not by the sidecar's memory, except at
// most fallbacks of them: the failure-mode decisions the sidecar counted
// since from. (A loaded machine stretches a round trip past the 100ms
// deadline now and then, and the sidecar then rightly decides by the
// failure mode; what must not be is a decision in memory it does not
// count, or none from Redis.)
func checkFromRedis(t *testing.T, replies [][]reply, from time.Time, fallbacks int64) {
	t.Helper()
	var n, inMemory int64
	var first string
	for c, rs := range replies {
		for _, r := range rs {
			if r.err != nil || r.sent.Before(from) || outageNames[r.n%3] != "local" {
				continue
			}
			n++
			if r.d[2] > outageLimit-charged {
				if inMemory++; first == "" {
					first = fmt.Sprintf("conn %d request %d: %v", c, r.n, r.d)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no request after Redis returned")
	}
	if inMemory > fallbacks || inMemory == n {
		t.Errorf("%d of %d requests after Redis returned decided in memory, not by Redis, with %d fallback decisions counted; the first: %s",
			inMemory, n, fallbacks, first)
	}
}

// checkNoRefusal: with a limit no run reaches, only a failure mode refuses.
func checkNoRefusal(t *testing.T, replies [][]reply) {
	t.Helper()
	for c, rs := range replies {
		for _, r := range rs {
			if r.err == nil && r.d[0] != 1 {
				t.Errorf("conn %d request %d (%s) refused: %v", c, r.n, outageNames[r.n%3], r.d)
				return
			}
		}
	}
}

// checkFailureModes checks the replies to requests sent while Redis could
// not answer (after broke, answered before mended): "open" allowed, "closed"
// refused, and "local" counted by the sidecar's in-memory store, one more
// each time on a connection's own key. It also checks that each policy was
// asked often enough to tell.
func checkFailureModes(t *testing.T, replies [][]reply, broke, mended time.Time) {
	t.Helper()
	seen := map[string]int{}
	for c, rs := range replies {
		last := int64(-1)
		answered := 0 // requests of c sent and answered while Redis was broken
		for _, r := range rs {
			if r.err != nil || r.sent.Before(broke) || r.got.After(mended) {
				continue
			}
			answered++
			name := outageNames[r.n%3]
			seen[name]++
			ok := true
			switch name {
			case "open":
				ok = r.d[0] == 1
			case "closed":
				ok = r.d[0] == 0
			case "local":
				// The in-memory store's own count, not Redis's (which
				// holds the charge): consecutive local decisions on this
				// connection's key go down by one.
				ok = r.d[0] == 1 && r.d[2] > outageLimit-charged && (last < 0 || r.d[2] == last-1)
				last = r.d[2]
			}
			if !ok {
				t.Errorf("conn %d request %d during the outage (%s): %v", c, r.n, name, r.d)
				return
			}
		}
		if answered == 0 {
			t.Errorf("conn %d: no request sent during the outage was answered before Redis was mended: one waited for Redis", c)
		}
	}
	t.Logf("requests decided during the outage by policy: %v", seen)
	for _, name := range outageNames {
		if seen[name] < 50 {
			t.Errorf("only %d %q requests during the outage", seen[name], name)
		}
	}
}

// The master of a Sentinel set-up is killed under load: the sidecar
// follows the new master, deciding by its failure mode meanwhile, and every
// request gets a reply.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	st := redistest.StartSentinel(t)
	up := "redis+sentinel://" + strings.Join(st.Addrs(), ",") + "/" + st.Name
	// A round trip a loaded machine stretches past the default 100ms is
	// decided locally, and the sidecars then disagree although the
	// failover is long over: the count checks wait for Redis.
	a := startSluice(t, "--upstream", up, "--on-upstream-failure", "local", "--upstream-timeout", decidingTimeout)
	b := startSluice(t, "--upstream", up, "--on-upstream-failure", "local", "--upstream-timeout", decidingTimeout)
	ra, rb := client(t, a), client(t, b)
	ctx := ctxT(t)
	if !fromStore(ctx, ra, rb, "warm") {
		t.Fatalf("the sidecars do not share a count before the failover\n%s", a.logs)
	}
	l := startLoad(t, a.Addr, 20, 25*time.Second, func(c, n int) []any {
		return []any{"RL.TOKEN", fmt.Sprint("sent:", c, ":", n%10), 1_000_000_000, 1_000_000, "1s"}
	})
	time.Sleep(300 * time.Millisecond)
	old := st.Master.Addr
	killed := time.Now()
	st.Master.Kill()
	// Sample the fallback counter: its first and last rise bound the time
	// decisions came from the failure mode.
	var first, last time.Time
	prev := fallbacks(t, ra)
	moved := within(t, 20*time.Second, "the sidecars following the new master", func() bool {
		n := fallbacks(t, ra)
		if n > prev {
			if first.IsZero() {
				first = time.Now()
			}
			last = time.Now()
		}
		prev = n
		m, err := st.CurrentMaster()
		return err == nil && m != old && fromStore(ctx, ra, rb, fmt.Sprint("after:", time.Now().UnixNano()))
	})
	time.Sleep(300 * time.Millisecond)
	replies := l.Stop()
	sum := summarize(replies)
	m, _ := st.CurrentMaster()
	fb := time.Duration(0)
	if !first.IsZero() {
		fb = last.Sub(first)
	}
	t.Logf("master %s killed; new master %s; the store decided again after %v; fallback decisions for %.2fs (from %v to %v after the kill); %d replies, slowest %v",
		old, m, moved.Round(time.Millisecond), fb.Seconds(), first.Sub(killed).Round(time.Millisecond),
		last.Sub(killed).Round(time.Millisecond), sum.n, sum.max.Round(time.Millisecond))
	if sum.errs > 0 {
		t.Errorf("%d of %d requests got an error; the first: %v\n%s", sum.errs, sum.n, sum.firstErr, a.logs)
	}
	// From the store at the end: decisions add no fallbacks.
	n0 := fallbacks(t, ra)
	for i := range 20 {
		if !fromStore(ctx, ra, rb, fmt.Sprint("end:", i)) {
			t.Fatalf("key end:%d: the sidecars disagree after the failover\n%s", i, a.logs)
		}
	}
	if n := fallbacks(t, ra) - n0; n != 0 {
		t.Errorf("%d fallback decisions after the failover", n)
	}
}

// A Redis Cluster master is killed under load over keys in many slots: once
// its replica takes over, the sidecar decides for keys in every slot from
// the store again, including those whose master died.
func TestClusterFailoverUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	up := "redis+cluster://" + strings.Join(cl.Addrs(), ",")
	// As in the Sentinel test: a round trip a loaded machine stretches
	// past the default 100ms is decided locally, and the sidecars then
	// disagree although the failover is long over. The dead master refuses
	// connections; no deadline is needed to notice it.
	a := startSluice(t, "--upstream", up, "--on-upstream-failure", "local", "--upstream-timeout", decidingTimeout)
	b := startSluice(t, "--upstream", up, "--on-upstream-failure", "local", "--upstream-timeout", decidingTimeout)
	ra, rb := client(t, a), client(t, b)
	ctx := ctxT(t)
	const keys = 300
	key := func(i int) string { return fmt.Sprint("slot:", i) }
	l := startLoad(t, a.Addr, 20, 25*time.Second, func(c, n int) []any {
		return []any{"RL.TOKEN", key((c*7919 + n) % keys), 1_000_000_000, 1_000_000, "1s"}
	})
	time.Sleep(300 * time.Millisecond)
	// The victim: the master of key 0's slot.
	victimKey := redisurl.DefaultPrefix + "{" + key(0) + "}:token"
	victim := cl.MasterOf(victimKey)
	var moved []int // keys whose master dies
	for i := range keys {
		if cl.MasterOf(redisurl.DefaultPrefix+"{"+key(i)+"}:token") == victim {
			moved = append(moved, i)
		}
	}
	// The other sidecar has sent to the victim's slots, and then sends
	// nothing: its map of them is the one from before the kill, which
	// only its own watch of the masters can correct.
	for _, i := range moved[:min(len(moved), 20)] {
		if err := rb.Do(ctx, "RL.TOKEN", key(i), 1_000_000_000, 1_000_000, "1s").Err(); err != nil {
			t.Fatal(err)
		}
	}
	victim.Kill()
	// The moved keys decided from the store again, through the loaded
	// sidecar.
	sweep := func(prefix string) bool {
		n0 := fallbacks(t, ra)
		for _, i := range moved[:min(len(moved), 20)] {
			v, err := ra.Do(ctx, "RL.TOKEN", fmt.Sprint(prefix, key(i)), 100, 1, "1h", 7).Result()
			if d, derr := ints(v); err != nil || derr != nil || d[0] != 1 || d[2] != 93 {
				return false
			}
		}
		return fallbacks(t, ra) == n0
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range cl.Nodes {
				out, err := n.Do("CLUSTER", "NODES")
				t.Logf("CLUSTER NODES at %s: %v\n%s", n.Addr, err, out)
			}
			t.Logf("sidecar a:\n%s\nsidecar b:\n%s", a.logs, b.logs)
		}
	})
	took := within(t, 20*time.Second, "keys of the killed master's slots decided from the store", func() bool {
		return sweep(fmt.Sprint("f", time.Now().UnixNano(), ":"))
	})
	promoted := cl.MasterOf(victimKey)
	// The idle sidecar's watch looks at the masters every second, and
	// reloads its map while one does not answer: well within 3s of the
	// failover, its first request to a moved slot goes to the promoted
	// master, not by its failure mode.
	time.Sleep(3 * time.Second)
	nb := fallbacks(t, rb)
	for _, i := range moved[:min(len(moved), 20)] {
		if err := rb.Do(ctx, "RL.TOKEN", key(i), 1_000_000_000, 1_000_000, "1s").Err(); err != nil {
			t.Fatalf("key %d through the idle sidecar: %v", i, err)
		}
	}
	if n := fallbacks(t, rb) - nb; n != 0 {
		t.Errorf("the idle sidecar answered %d of its first requests to the moved slots by its failure mode, 3s after the failover\n%s", n, b.logs)
	}
	replies := l.Stop()
	sum := summarize(replies)
	t.Logf("master %s (%d of %d keys) killed; %s serves them now; the store decided them again %v after the kill; %d replies, slowest %v",
		victim.Addr, len(moved), keys, promoted.Addr, took.Round(time.Millisecond), sum.n, sum.max.Round(time.Millisecond))
	if promoted == victim {
		t.Fatalf("the killed master still serves %s", victimKey)
	}
	if sum.errs > 0 {
		t.Errorf("%d of %d requests got an error; the first: %v\n%s", sum.errs, sum.n, sum.firstErr, a.logs)
	}
	// Every key, in every slot, from the store.
	n0 := fallbacks(t, ra)
	cmds, err := ra.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range keys {
			p.Do(ctx, "RL.TOKEN", "final:"+key(i), 100, 1, "1h", 7)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pipeline after the failover: %v\n%s", err, a.logs)
	}
	for i, c := range cmds {
		if d, err := ints(c.(*redis.Cmd).Val()); err != nil || d[2] != 93 {
			t.Fatalf("key %d after the failover: %v %v", i, d, err)
		}
		v, err := rb.Do(ctx, "RL.TOKEN", "final:"+key(i), 100, 1, "1h", 0).Result()
		if d, derr := ints(v); err != nil || derr != nil || d[2] != 93 {
			t.Fatalf("key %d through the other sidecar: %v %v; its fallbacks: %d\n%s", i, v, err, fallbacks(t, rb), b.logs)
		}
	}
	if n := fallbacks(t, ra) - n0; n != 0 {
		t.Errorf("%d fallback decisions after the failover", n)
	}
}

// SIGTERM while 20 connections pipeline: every request written before the
// signal gets its reply, none is lost, and the binary exits 0.
func TestSIGTERMUnderPipelinedLoad(t *testing.T) {
	r := redistest.Start(t)
	s := startSluice(t, "--upstream", "redis://"+r.Addr)
	const conns, depth = 20, 50
	var pipeline []byte
	for range depth {
		pipeline = append(pipeline, cmd("RL.TOKEN", "term", "1000000000", "1000000", "1s")...)
	}
	var (
		signaled atomic.Int64 // UnixNano of the SIGTERM; 0 before it
		wg       sync.WaitGroup
		mu       sync.Mutex
		lost     []string // guarded by mu
		answered atomic.Int64
	)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
			if err != nil {
				mu.Lock()
				lost = append(lost, fmt.Sprintf("conn %d: dial: %v", c, err))
				mu.Unlock()
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			rd := bufio.NewReader(conn)
			for round := 0; round < 10_000; round++ {
				if _, err := conn.Write(pipeline); err != nil {
					return // the server closed: nothing of this round was sent before it did
				}
				wrote := time.Now().UnixNano()
				for i := range depth {
					if err := readDecision(rd); err != nil {
						var bad badReply
						if errors.As(err, &bad) {
							mu.Lock()
							lost = append(lost, fmt.Sprintf("conn %d round %d: %v", c, round, err))
							mu.Unlock()
							return
						}
						if sig := signaled.Load(); sig == 0 || wrote < sig {
							mu.Lock()
							lost = append(lost, fmt.Sprintf("conn %d round %d: reply %d of %d, written %v before the SIGTERM: %v",
								c, round, i+1, depth, time.Duration(sig-wrote), err))
							mu.Unlock()
						}
						return
					}
					answered.Add(1)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	signaled.Store(time.Now().UnixNano())
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	select {
	case exitErr = <-s.done:
		s.done <- exitErr // for the cleanup's stop
	case <-time.After(15 * time.Second):
		t.Fatalf("sluice did not exit within 15s of SIGTERM\n%s", s.logs)
	}
	wg.Wait()
	t.Logf("%d replies before and during the drain", answered.Load())
	if exitErr != nil {
		t.Errorf("exit after SIGTERM: %v; want 0\n%s", exitErr, s.logs)
	}
	for _, l := range lost {
		t.Error("lost: " + l)
	}
	if answered.Load() < conns*depth {
		t.Errorf("only %d replies", answered.Load())
	}
}

// badReply is a reply that came but is not a decision.
type badReply string

func (e badReply) Error() string { return string(e) }

// readDecision reads one RESP2 array of integers.
func readDecision(rd *bufio.Reader) error {
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "*") {
		return badReply(fmt.Sprintf("reply %q: want an array", line))
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return err
	}
	for range n {
		if line, err = rd.ReadString('\n'); err != nil {
			return err
		}
		if !strings.HasPrefix(line, ":") {
			return badReply(fmt.Sprintf("element %q: want an integer", line))
		}
	}
	return nil
}

// Start-up with no Redis at the --upstream address: the binary starts,
// decides by its failure mode, and decides from Redis within seconds of
// one appearing there.
func TestStartWithRedisUnreachable(t *testing.T) {
	port := redistest.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := startSluice(t, "--upstream", "redis://"+addr, "--on-upstream-failure", "deny")
	rdb := client(t, s)
	ctx := ctxT(t)
	do := func() []int64 {
		t.Helper()
		v, err := rdb.Do(ctx, "RL.TOKEN", "startup", 100, 1, "1h").Result()
		if err != nil {
			t.Fatalf("with no Redis: %v\n%s", err, s.logs)
		}
		d, err := ints(v)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for range 5 {
		if d := do(); d[0] != 0 {
			t.Fatalf("with no Redis and deny: %v; want refused", d)
		}
	}
	if n := fallbacks(t, rdb); n < 5 {
		t.Errorf("fallback_decisions %d; want at least 5", n)
	}
	r := redistest.StartAt(t, port)
	took := within(t, 5*time.Second, "decisions from the Redis that appeared", func() bool {
		return do()[0] == 1
	})
	t.Logf("decisions from Redis %v after it answered PING", took.Round(time.Millisecond))
	if got, err := r.Do("EXISTS", redisurl.DefaultPrefix+"{startup}:token"); err != nil || got != "1" {
		t.Errorf("the key is not in Redis: %q, %v", got, err)
	}
}

// decidesFromStore sends three requests for a fresh key through s and
// checks that the store counted them: each admitted, one fewer left each
// time, and no decision by a failure mode.
func decidesFromStore(t *testing.T, s *sluice, rdb *redis.Client, key string) {
	t.Helper()
	n0 := fallbacks(t, rdb)
	for i := range 3 {
		v, err := rdb.Do(context.Background(), "RL.TOKEN", key, 10, 1, "1h").Result()
		d, derr := ints(v)
		if err != nil || derr != nil || d[0] != 1 || d[2] != int64(9-i) {
			t.Fatalf("request %d for %s: %v, %v, %v\n%s", i, key, v, err, derr, s.logs)
		}
	}
	if n := fallbacks(t, rdb) - n0; n != 0 {
		t.Errorf("%d fallback decisions for %s\n%s", n, key, s.logs)
	}
}

// An ACL user toward Redis: with its password the binary decides from
// Redis, with a wrong one it falls back (and says so), and never crashes.
func TestUpstreamACLUser(t *testing.T) {
	r := redistest.Start(t)
	if _, err := r.Do("ACL", "SETUSER", "limiter", "reset", "on", ">s3cret", "~sluice:*", "&sluice:*",
		"+evalsha", "+eval", "+del", "+publish", "+subscribe", "+ping", "+hello", "+auth", "+client",
		// and what the scripts call
		"+time", "+get", "+set", "+hmget", "+hset", "+pexpire", "+pexpireat", "+pexpiretime",
		"+zadd", "+zcount", "+zrange", "+zrangebyscore", "+zremrangebyscore"); err != nil {
		t.Fatal(err)
	}
	// The default user is off, so only the ACL user can decide.
	if _, err := r.Do("ACL", "SETUSER", "default", "off"); err != nil {
		t.Fatal(err)
	}
	t.Run("right password", func(t *testing.T) {
		s := startSluice(t, "--upstream", "redis://limiter:s3cret@"+r.Addr, "--on-upstream-failure", "deny")
		rdb := client(t, s)
		ctx := ctxT(t)
		decidesFromStore(t, s, rdb, "acl")
		if err := rdb.Do(ctx, "RL.RESET", "acl").Err(); err != nil {
			t.Errorf("RL.RESET as the ACL user: %v", err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		s := startSluice(t, "--upstream", "redis://limiter:wrong@"+r.Addr, "--on-upstream-failure", "deny")
		rdb := client(t, s)
		ctx := ctxT(t)
		for i := range 5 {
			v, err := rdb.Do(ctx, "RL.TOKEN", "acl", 10, 1, "1h").Result()
			d, derr := ints(v)
			if err != nil || derr != nil || d[0] != 0 {
				t.Fatalf("request %d with a wrong password: %v, %v; want refused by deny\n%s", i, v, err, s.logs)
			}
		}
		if n := fallbacks(t, rdb); n < 5 {
			t.Errorf("fallback_decisions %d; want at least 5", n)
		}
		logs := s.logs.String()
		if !strings.Contains(logs, "the upstream Redis cannot be used") || !strings.Contains(logs, "WRONGPASS") {
			t.Errorf("the log does not say why the upstream fails:\n%s", logs)
		}
		if strings.Contains(logs, "wrong@") {
			t.Errorf("the log shows the password:\n%s", logs)
		}
	})
}

// TLS toward Redis: a CA and a server certificate made here, a redis-server
// speaking only TLS, and the binary trusting that CA through
// --upstream-tls-ca.
func TestUpstreamTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := makeCerts(t)
	files := map[string][]byte{"ca.pem": caPEM, "redis.crt": certPEM, "redis.key": keyPEM}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	// A redis-server built without TLS refuses tls-port: StartTLS then
	// fails with its log, which says so.
	r := redistest.StartTLS(t, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"},
		filepath.Join(dir, "redis.crt"), filepath.Join(dir, "redis.key"), filepath.Join(dir, "ca.pem"))
	s := startSluice(t, "--upstream", "rediss://"+r.Addr, "--upstream-tls-ca", filepath.Join(dir, "ca.pem"),
		"--on-upstream-failure", "deny")
	rdb := client(t, s)
	ctx := ctxT(t)
	decidesFromStore(t, s, rdb, "tls")
	if got, err := r.Do("EXISTS", redisurl.DefaultPrefix+"{tls}:token"); err != nil || got != "1" {
		t.Errorf("the key is not in Redis: %q, %v", got, err)
	}
	// A CA for an upstream without TLS is a mistake, said at start-up.
	misuse := exec.Command(sluiceBin, "--listen", "127.0.0.1:0", "--admin-listen", "off",
		"--upstream", "redis://"+r.Addr, "--upstream-tls-ca", filepath.Join(dir, "ca.pem"))
	misuse.Env = cleanEnv()
	if out, err := misuse.CombinedOutput(); err == nil || !strings.Contains(string(out), "does not use TLS") {
		t.Errorf("--upstream-tls-ca with redis://: %v\n%s", err, out)
	}
	// Without the CA the certificate is not trusted: a fallback, not a crash.
	s2 := startSluice(t, "--upstream", "rediss://"+r.Addr, "--on-upstream-failure", "deny")
	r2 := client(t, s2)
	if v, err := r2.Do(ctx, "RL.TOKEN", "tls2", 10, 1, "1h").Result(); err != nil {
		t.Errorf("untrusted certificate: %v", err)
	} else if d, _ := ints(v); d[0] != 0 {
		t.Errorf("untrusted certificate: %v; want refused by deny", d)
	}
}

// makeCerts makes a CA and a certificate it signs, for 127.0.0.1, good
// for a server and for a client, as PEM.
func makeCerts(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	ca := testca.New(t)
	c := ca.Issue(t, "127.0.0.1")
	return ca.CertPEM, c.CertPEM, c.KeyPEM
}
