package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/redisurl"
	"github.com/sluice-rl/sluice/upstream"
)

// Resharding under load: hash slots move between the masters of a Redis
// Cluster while three sidecars, failing closed (--on-upstream-failure
// deny), decide on keys in those slots. Some slots move step by step, by
// hand, with pauses between the steps, so that every state of a migration
// lasts long enough to be met for certain: the slot importing and
// migrating with all its keys still on the source, with half of them moved
// (the source's call decides the keys it holds; a key gone is "not here"
// to its script, and its request, sent again alone with its key
// declared, meets ASK) for longer than the upstream timeout, as a stalled migration would
// leave it, with all of them moved, and then owned by the target, which
// sidecars with the old slot map learn through MOVED. Other slots move with
// `redis-cli --cluster reshard`, as an operator moves them.
//
// Every client pipelines decisions on several keys of one slot, so that a
// sidecar's batch holds several keys of a slot in one script call. Half of
// the keys have a limit no run reaches, half one that every run exceeds
// many times over, with the deny cache kept to one entry so that their
// refusals keep reaching Redis too. Then: no client gets an error, no
// decision is made by the failure mode (which here would be a refusal, so
// none waited at Redis past the upstream timeout), no key admits
// more than its limit, every key's count in Redis is exactly what the
// clients were admitted (nothing charged twice or lost), and afterwards
// the slots' keys live on their new masters, which decide them without a
// redirection.
func TestClusterReshardUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	nodes := clusterNodes(t, cl.Nodes[0])
	// Masters by the slots they start with: 0-5460, 5461-10922, 10923-16383.
	a, b, c := nodes.owner(t, 0), nodes.owner(t, 5461), nodes.owner(t, 10923)
	// By hand: three slots of a move to b. With redis-cli: the four lowest
	// slots of c (reshard takes a source's slots in order) move to a.
	handSlots := []uint16{100, 2000, 4000}
	cliSlots := []uint16{10923, 10924, 10925, 10926}
	slots := append(append([]uint16(nil), handSlots...), cliSlots...)

	const (
		perSlot = 8 // keys per slot: loose ones first, then tight ones
		loose   = 1_000_000_000
		tight   = 60
	)
	keys := keysInSlots(slots, perSlot) // slot → its keys
	limitOf := func(k int) int64 {
		if k < perSlot/2 {
			return loose
		}
		return tight
	}
	period := farFromWindowEdge(10 * time.Minute)

	up := "redis+cluster://" + strings.Join(cl.Addrs(), ",")
	// The deadline is long beside a round trip on a loaded machine (at
	// 100ms, under -race beside other work, a round trip now and then
	// timed out: a refusal by the failure mode, and a charge Redis made
	// after the sidecar gave up), and the stalled migration below outlasts
	// it all the same.
	const timeout = 2 * time.Second
	args := []string{"--upstream", up, "--on-upstream-failure", "deny", "--deny-cache-size", "1",
		"--upstream-timeout", timeout.String()}
	var sidecars []*sluice
	var rdbs []*redis.Client
	for range 3 {
		s := startSluice(t, args...)
		sidecars = append(sidecars, s)
		rdbs = append(rdbs, client(t, s))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range cl.Nodes {
				out, err := n.Do("CLUSTER", "NODES")
				t.Logf("CLUSTER NODES at %s: %v\n%s", n.Addr, err, out)
			}
			for i, s := range sidecars {
				t.Logf("sidecar %d:\n%s", i, s.logs)
			}
		}
	})
	ctx := ctxT(t)
	// Every key exists before the first slot moves, and the sidecars know
	// the slot map.
	for _, slot := range slots {
		for k, key := range keys[slot] {
			for i, rdb := range rdbs {
				if _, err := rdb.Do(ctx, "RL.FIXED", key, limitOf(k), period, 0).Result(); err != nil {
					t.Fatalf("sidecar %d, key %s: %v", i, key, err)
				}
			}
		}
	}

	// The load: four connections to each sidecar, each sending rounds of
	// three decisions on distinct keys of one slot, pipelined.
	l := startReshardLoad(t, sidecars, 4, 40*time.Second, func(conn int, rng *rand.Rand) []reshardReq {
		slot := slots[rng.IntN(len(slots))]
		ks := rng.Perm(perSlot)[:3]
		reqs := make([]reshardReq, len(ks))
		for i, k := range ks {
			reqs[i] = reshardReq{key: keys[slot][k], limit: limitOf(k)}
		}
		return reqs
	}, period)
	time.Sleep(500 * time.Millisecond)
	fallbacks0 := int64(0)
	for _, rdb := range rdbs {
		fallbacks0 += fallbacks(t, rdb)
	}
	stats0 := errorStats(t, a.srv)
	moving := time.Now()

	// By hand, the three slots together: importing and migrating, then
	// half of each slot's keys moved, then all, then owned by b.
	pause := func(what string) {
		t.Logf("reshard: %s", what)
		time.Sleep(3 * upstreamTimeout)
	}
	for _, slot := range handSlots {
		mustCluster(t, b.srv, "CLUSTER", "SETSLOT", strconv.Itoa(int(slot)), "IMPORTING", a.id)
		mustCluster(t, a.srv, "CLUSTER", "SETSLOT", strconv.Itoa(int(slot)), "MIGRATING", b.id)
	}
	pause("slots importing on b and migrating on a, every key still on a")
	// Every other key of a slot from first on, so that most rounds of
	// three keys span both masters.
	everyOther := func(slot uint16, first int) []string {
		var ks []string
		for k := first; k < perSlot; k += 2 {
			ks = append(ks, redisurl.DefaultPrefix+"{"+keys[slot][k]+"}:fixed")
		}
		return ks
	}
	for _, slot := range handSlots {
		migrate(t, a.srv, b.srv, everyOther(slot, 0))
	}
	// A stalled migration: longer than the upstream timeout.
	pause("half of each slot's keys on b")
	time.Sleep(timeout + 5*upstreamTimeout)
	for _, slot := range handSlots {
		migrate(t, a.srv, b.srv, everyOther(slot, 1))
	}
	pause("every key on b, the slots still a's")
	for _, slot := range handSlots {
		for _, n := range []clusterNode{b, a, c} {
			mustCluster(t, n.srv, "CLUSTER", "SETSLOT", strconv.Itoa(int(slot)), "NODE", b.id)
		}
	}
	pause("the slots b's")
	stats1 := errorStats(t, a.srv)

	// With redis-cli, as an operator would.
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found in PATH: install it (apt-get install -y redis-tools)")
	}
	out, err := exec.Command(cli, "--cluster", "reshard", c.srv.Addr, "--cluster-from", c.id, "--cluster-to", a.id,
		"--cluster-slots", strconv.Itoa(len(cliSlots)), "--cluster-yes", "--cluster-pipeline", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
	}
	pause("redis-cli moved four slots from c to a")
	replies := l.Stop()

	// The slots' keys live on their new masters.
	for _, slot := range handSlots {
		checkSlotOn(t, slot, b, []clusterNode{a, c}, perSlot)
	}
	for _, slot := range cliSlots {
		checkSlotOn(t, slot, a, []clusterNode{b, c}, perSlot)
	}

	fb := -fallbacks0
	for _, rdb := range rdbs {
		fb += fallbacks(t, rdb)
	}
	sum := l.summary(replies)
	still, moved := percentiles(replies, time.Time{}, moving), percentiles(replies, moving, time.Now())
	t.Logf("%d rounds (%d decisions: %d allowed, %d refused); a round took %v before the slots moved and %v while they moved (median, 99th percentile, slowest); %d decisions by the failure mode; at the source of the slots moved by hand: %v",
		sum.rounds, sum.decisions, sum.allowed, sum.decisions-sum.allowed, still, moved, fb, diffStats(stats0, stats1))
	if sum.errs > 0 {
		t.Errorf("%d of %d rounds met an error; the first: %v", sum.errs, sum.rounds, sum.firstErr)
	}
	if fb != 0 {
		t.Errorf("%d decisions by the failure mode (refusals, with deny) while slots moved; want 0", fb)
	}
	// The test met what it means to: the source's script met keys gone
	// (a script's "non local key", counted as ERR) and redirected their
	// requests, sent again, with ASK while the slots moved by hand.
	d := diffStats(stats0, stats1)
	if d["ASK"] == 0 || d["ERR"] == 0 {
		t.Errorf("the source answered %v while its slots moved; want ASK and ERR among them", d)
	}

	// Every key: admitted at most its limit, and exactly as many as Redis
	// counted. A fresh connection asks at cost 0, which takes nothing.
	for _, slot := range slots {
		for k, key := range keys[slot] {
			v, err := rdbs[0].Do(ctx, "RL.FIXED", key, limitOf(k), period, 0).Result()
			dec, derr := ints(v)
			if err != nil || derr != nil {
				t.Fatalf("key %s after the reshard: %v %v", key, err, derr)
			}
			counted := limitOf(k) - dec[2]
			admitted := sum.admitted[key]
			if admitted > limitOf(k) {
				t.Errorf("key %s (slot %d): %d admitted, over its limit %d", key, slot, admitted, limitOf(k))
			}
			if counted != admitted {
				t.Errorf("key %s (slot %d): Redis counts %d, clients were admitted %d", key, slot, counted, admitted)
			}
			if limitOf(k) == tight && sum.asked[key] <= tight {
				t.Errorf("key %s: asked only %d times, not beyond its limit %d", key, sum.asked[key], tight)
			}
		}
	}

	// Settled: decisions on the moved keys through every sidecar reach the
	// new masters without a redirection from the old.
	before := map[string]map[string]int64{}
	for _, n := range nodes {
		before[n.id] = errorStats(t, n.srv)
	}
	evalsB0 := evalCalls(t, b.srv)
	for _, rdb := range rdbs {
		for _, slot := range slots {
			for k, key := range keys[slot] {
				if _, err := rdb.Do(ctx, "RL.FIXED", key, limitOf(k), period, 0).Result(); err != nil {
					t.Fatalf("key %s after the reshard: %v", key, err)
				}
			}
		}
	}
	for _, n := range nodes {
		if d := diffStats(before[n.id], errorStats(t, n.srv)); len(d) > 0 {
			t.Errorf("%s answered %v after the reshard; want no redirection", n.srv.Addr, d)
		}
	}
	if n := evalCalls(t, b.srv) - evalsB0; n < int64(len(rdbs)*len(handSlots)) {
		t.Errorf("b ran %d scripts for the slots it took; want at least %d", n, len(rdbs)*len(handSlots))
	}
}

// clusterNode is a master: its server and its cluster ID.
type clusterNode struct {
	srv   *redistest.Server
	id    string
	slots [][2]int // ranges, inclusive
}

type clusterNodeList []clusterNode

// clusterNodes reads the masters from CLUSTER NODES at srv.
func clusterNodes(t *testing.T, srv *redistest.Server) clusterNodeList {
	t.Helper()
	out := mustCluster(t, srv, "CLUSTER", "NODES")
	var list clusterNodeList
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		port, err := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
		if err != nil {
			t.Fatalf("CLUSTER NODES: %q", line)
		}
		n := clusterNode{id: f[0], srv: &redistest.Server{Addr: addr, Port: port}}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			x, err1 := strconv.Atoi(lo)
			y, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, [2]int{x, y})
			}
		}
		list = append(list, n)
	}
	return list
}

// owner is the master that serves slot.
func (l clusterNodeList) owner(t *testing.T, slot int) clusterNode {
	t.Helper()
	for _, n := range l {
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return n
			}
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return clusterNode{}
}

func mustCluster(t *testing.T, srv *redistest.Server, args ...string) string {
	t.Helper()
	out, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%s at %s: %v", strings.Join(args, " "), srv.Addr, err)
	}
	return out
}

// migrate moves keys from src to dst with one MIGRATE.
func migrate(t *testing.T, src, dst *redistest.Server, keys []string) {
	t.Helper()
	args := append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", "5000", "KEYS"}, keys...)
	mustCluster(t, src, args...)
}

// checkSlotOn checks that n holds slot's keys and the others none.
func checkSlotOn(t *testing.T, slot uint16, n clusterNode, others []clusterNode, want int) {
	t.Helper()
	s := strconv.Itoa(int(slot))
	if got := mustCluster(t, n.srv, "CLUSTER", "COUNTKEYSINSLOT", s); got != strconv.Itoa(want) {
		t.Errorf("slot %d: %s keys on its new master %s; want %d", slot, got, n.srv.Addr, want)
	}
	for _, o := range others {
		if got := mustCluster(t, o.srv, "CLUSTER", "COUNTKEYSINSLOT", s); got != "0" {
			t.Errorf("slot %d: %s keys left on %s", slot, got, o.srv.Addr)
		}
	}
}

// keysInSlots finds n client keys for each slot whose Redis key (under the
// fixed window) hashes there.
func keysInSlots(slots []uint16, n int) map[uint16][]string {
	want := map[uint16][]string{}
	for _, s := range slots {
		want[s] = nil
	}
	left := len(slots)
	for i := 0; left > 0; i++ {
		k := "rs:" + strconv.Itoa(i)
		s := upstream.Slot(redisurl.DefaultPrefix + "{" + k + "}:fixed")
		if ks, ok := want[s]; ok && len(ks) < n {
			want[s] = append(ks, k)
			if len(want[s]) == n {
				left--
			}
		}
	}
	return want
}

// farFromWindowEdge is a period, in whole hours, whose epoch-aligned
// window (the fixed window's) does not end within margin: the counts of
// one run all fall in one window.
func farFromWindowEdge(margin time.Duration) string {
	now := time.Now()
	for h := 1; ; h++ {
		p := time.Duration(h) * time.Hour
		if p-time.Duration(now.UnixNano())%p > margin {
			return strconv.Itoa(h) + "h"
		}
	}
}

// errorStats reads INFO errorstats: error prefix → count.
func errorStats(t *testing.T, srv *redistest.Server) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for _, line := range strings.Split(mustCluster(t, srv, "INFO", "errorstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":count=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest, 10, 64)
		m[strings.TrimPrefix(name, "errorstat_")] = n
	}
	return m
}

func diffStats(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// evalCalls is how many script calls (EVALSHA, EVAL, FCALL) srv has run.
func evalCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	var n int64
	for _, line := range strings.Split(mustCluster(t, srv, "INFO", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval" && name != "cmdstat_fcall") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		c, _ := strconv.ParseInt(calls, 10, 64)
		n += c
	}
	return n
}

// reshardReq is one decision of a round.
type reshardReq struct {
	key   string
	limit int64
}

// reshardRound is one pipelined round as a client saw it.
type reshardRound struct {
	reqs      []reshardReq
	sent, got time.Time
	allowed   []bool
	err       error
}

type reshardLoad struct {
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	rounds [][]reshardRound // per connection; each written only by its goroutine until wg is done
}

// startReshardLoad runs conns connections to each sidecar, each sending
// rounds of RL.FIXED decisions that next picks, pipelined, until stopped
// or maxDur.
func startReshardLoad(t *testing.T, sidecars []*sluice, conns int, maxDur time.Duration,
	next func(conn int, rng *rand.Rand) []reshardReq, period string) *reshardLoad {
	l := &reshardLoad{stop: make(chan struct{}), rounds: make([][]reshardRound, conns*len(sidecars))}
	t.Cleanup(func() { l.Stop() })
	deadline := time.Now().Add(maxDur)
	for c := range conns * len(sidecars) {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: sidecars[c%len(sidecars)].Addr, Protocol: 2, PoolSize: 1,
				ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: -1})
			defer rdb.Close()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for time.Now().Before(deadline) {
				select {
				case <-l.stop:
					return
				default:
				}
				r := reshardRound{reqs: next(c, rng), sent: time.Now()}
				cmds, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
					for _, q := range r.reqs {
						p.Do(context.Background(), "RL.FIXED", q.key, q.limit, period)
					}
					return nil
				})
				r.got = time.Now()
				for _, cmd := range cmds {
					if err != nil {
						break
					}
					var d []int64
					if d, err = ints(cmd.(*redis.Cmd).Val()); err == nil {
						r.allowed = append(r.allowed, d[0] == 1)
					}
				}
				r.err = err
				l.rounds[c] = append(l.rounds[c], r)
			}
		}()
	}
	return l
}

func (l *reshardLoad) Stop() [][]reshardRound {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.rounds
}

type reshardSummary struct {
	rounds, decisions, allowed, errs int
	firstErr                         error
	admitted, asked                  map[string]int64
}

func (l *reshardLoad) summary(rounds [][]reshardRound) reshardSummary {
	s := reshardSummary{admitted: map[string]int64{}, asked: map[string]int64{}}
	for _, rs := range rounds {
		for _, r := range rs {
			s.rounds++
			if r.err != nil {
				s.errs++
				if s.firstErr == nil {
					s.firstErr = r.err
				}
				continue
			}
			for i, q := range r.reqs {
				s.decisions++
				s.asked[q.key]++
				if r.allowed[i] {
					s.allowed++
					s.admitted[q.key]++
				}
			}
		}
	}
	return s
}

// percentiles renders the median, 99th percentile and slowest of the
// rounds sent from from until to.
func percentiles(rounds [][]reshardRound, from, to time.Time) string {
	var took []time.Duration
	for _, rs := range rounds {
		for _, r := range rs {
			if !r.sent.Before(from) && r.sent.Before(to) {
				took = append(took, r.got.Sub(r.sent))
			}
		}
	}
	if len(took) == 0 {
		return "(no rounds)"
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("%v, %v, %v", r(took[len(took)/2]), r(took[len(took)*99/100]), r(took[len(took)-1]))
}
