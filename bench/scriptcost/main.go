// Command scriptcost measures what the batch script costs Redis per
// decision: Redis's own CPU time, from INFO commandstats (usec_per_call of
// FCALL, or of EVALSHA with -functions=false, divided by the batch size), not throughput, which on a shared
// machine is mostly noise. It starts its own redis-server on a free
// loopback port, sends batches through the real upstream.Store, and prints
// for each scenario and batch size the median and the least of several
// runs, and beside them the median of Redis's main thread CPU time per
// decision over the same runs (/proc/<pid>/schedstat: not inflated when
// the machine preempts Redis mid-call, as usec_per_call, a wall time, is;
// it also counts reading and answering the calls). The runs go round the
// rows (run 1 of each, then run 2 of each), so that rows compared with
// each other see the same load; with policy1, policy2 and second, a last
// line gives the median of each run's policy2 / (policy1 + second):
//
//	fresh  every request on a key never seen: one claim (SET NX GET) each
//	hot    every request of a batch on one key, with a limit that admits
//	       them all: the hot-key path, one read and one write per batch
//	floor  a four-line script that only runs SET key v NX GET PX ttl per
//	       key: what Redis spends per fresh decision that no batch script
//	       can avoid
//	policy1, policy2
//	       RL.ALLOW's work over -keys client keys picked at random: a
//	       policy of one limit (GCRA, 10 a second, burst 10), and one of
//	       two (that, and a fixed window of 100,000 a day), all-or-nothing;
//	       -sizes 16 is RL.ALLOW at redis-benchmark's -P 16
//	second the second limit of policy2 (the daily fixed window) alone, as
//	       policy1 has the first: policy2's target is at most 1.1 times
//	       policy1 plus second
//	hotpolicy
//	       every request of a batch on one key under a policy of two
//	       limits (GCRA and a fixed window) that admit them all: a hot
//	       tenant under RL.ALLOW, decided as one run
//
//	go run ./bench/scriptcost
//	go run ./bench/scriptcost -sizes 16,256,1024 -runs 7 -alg gcra,fixed
//	go run ./bench/scriptcost -scenario policy1,policy2,second -sizes 16 -runs 3 -n 3200 -callgrind
//
// On a shared machine the times move by a quarter from one run to the
// next, more than most changes to the script; -callgrind runs Redis under
// valgrind's callgrind and counts the instructions it runs instead, which
// repeat within 2% (its µs then mean nothing).
//
// Only 127.0.0.1 is used, and the server is killed when the command ends.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/upstream"
)

var (
	sizes     = flag.String("sizes", "16,256,1024", "batch sizes, comma-separated")
	runs      = flag.Int("runs", 5, "runs of each measurement; the median is reported")
	decisions = flag.Int("n", 100_000, "decisions per run (rounded up to whole batches)")
	algs      = flag.String("alg", "gcra,token,leaky,fixed,sliding,log", "algorithms, by short name")
	scenarios = flag.String("scenario", "fresh,hot,floor,policy1,policy2,second,hotpolicy", "scenarios: fresh, hot, floor, policy1, policy2, second, hotpolicy")
	keySpace  = flag.Int("keys", 100_000, "client keys the policy scenarios pick from")
	functions = flag.Bool("functions", true, "call the batch library with FCALL, as the sidecar does once it has loaded it; false: EVALSHA of the batch script")
	server    = flag.String("redis-server", "redis-server", "the redis-server binary")
	cluster   = flag.Bool("cluster", false, "run the server in cluster mode, one node serving every slot: what Cluster's checks add per decision")
	keepDumps = flag.String("keep", "", "with -callgrind: keep each measurement's callgrind dump in this folder (callgrind.out.<n>), for callgrind_annotate to say where the instructions go")
	callgrind = flag.Bool("callgrind", false, "run the server under valgrind's callgrind and give, in place of CPU time, the thousands of instructions Redis runs per decision: a count that the machine's load does not move; about 50 times slower, so with -n 3200 or so")
)

// freshLimit and hotLimit are each algorithm's limit for the two
// scenarios: a fresh key's state lives a few ms, so that the run's keys do
// not pile up; a hot key's limit admits every request of the run.
func freshLimit(a engine.Algorithm) engine.Limit {
	l := engine.Limit{Algorithm: a, Rate: 100, Period: time.Second}
	switch a {
	case engine.TokenBucket, engine.LeakyBucket:
		l.Burst = 10
	case engine.GCRA:
		l.Burst = 9
	}
	return l
}

func hotLimit(a engine.Algorithm) engine.Limit {
	l := engine.Limit{Algorithm: a, Rate: engine.MaxLogRate, Period: time.Second}
	switch a {
	case engine.TokenBucket, engine.LeakyBucket, engine.GCRA:
		l.Rate, l.Burst = 1_000_000, 1_000_000
	}
	return l
}

// floorScript is the least a script can do per fresh decision.
const floorScript = `for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[1], 'NX', 'GET', 'PX', ARGV[2]) end return #KEYS`

func main() {
	flag.Parse()
	log.SetFlags(0)
	var ns []int
	for f := range strings.SplitSeq(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("bad batch size %q", f)
		}
		ns = append(ns, n)
	}
	var as []engine.Algorithm
	for f := range strings.SplitSeq(*algs, ",") {
		a, err := engine.ParseAlgorithm(strings.TrimSpace(f))
		if err != nil {
			log.Fatal(err)
		}
		as = append(as, a)
	}

	stop, addr, pid, dir, err := startRedis()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer client.Close()
	var decider redis.UniversalClient = client
	if *cluster {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, Protocol: 2})
		defer cc.Close()
		decider = cc
	}
	store, err := upstream.New(upstream.Config{Client: decider})
	if err != nil {
		stop()
		log.Fatal(err)
	}
	m := &meter{ctx: context.Background(), client: client, store: store, pid: pid, dir: dir, stop: stop, call: "evalsha"}
	if *functions {
		// Check loads the library, as the sidecar's start does.
		if err := store.Check(m.ctx); err != nil || store.Scripts() != "functions" {
			stop()
			log.Fatalf("loading the batch library: %v (%s)", err, store.Scripts())
		}
		m.call = "fcall"
	}

	last := "main thread CPU / decision"
	if *callgrind {
		last = "thousands of instructions / decision"
	}
	fmt.Printf("Redis µs per decision, %d runs of %d decisions: usec_per_call of "+strings.ToUpper(m.call)+" / N, median (least); %s, median\n", *runs, *decisions, last)
	fmt.Printf("%-8s %-8s", "scenario", "alg")
	for _, n := range ns {
		fmt.Printf(" %22s", "N="+strconv.Itoa(n))
	}
	fmt.Println()
	var rows []*row
	for sc := range strings.SplitSeq(*scenarios, ",") {
		switch sc {
		case "floor":
			rows = append(rows, &row{scenario: sc, alg: "-", measure: m.floor})
		case "policy1", "policy2", "second", "hotpolicy":
			rows = append(rows, &row{scenario: sc, alg: "-", measure: func(n int) (float64, error) { return m.policy(n, sc) }})
		case "fresh", "hot":
			for _, a := range as {
				rows = append(rows, &row{scenario: sc, alg: a.Short(), measure: func(n int) (float64, error) { return m.batches(sc, a, n) }})
			}
		default:
			stop()
			log.Fatalf("unknown scenario %q", sc)
		}
	}
	// Run r of every row, then run r + 1 of every row: the machine's
	// load moves over seconds, and rows compared with each other (policy2
	// against policy1 and second) then see the same load.
	for range *runs {
		for _, r := range rows {
			m.measure(r, ns)
		}
	}
	for _, r := range rows {
		r.print()
	}
	m.printTarget(rows, ns)
}

// row is one scenario's (and algorithm's) measurements: per batch size,
// Redis µs and main-thread CPU µs per decision, one of each per run.
type row struct {
	scenario, alg string
	measure       func(n int) (float64, error)
	us, cpu       [][]float64 // [batch size][run]
}

// median is the median of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func (r *row) print() {
	fmt.Printf("%-8s %-8s", r.scenario, r.alg)
	for k := range r.us {
		us, cpu := slices.Clone(r.us[k]), slices.Clone(r.cpu[k])
		fmt.Printf(" %6.3f (%5.3f) %6.3f", median(us), us[0], median(cpu))
	}
	fmt.Println()
}

// printTarget prints, where policy1, policy2 and second were all
// measured, the median over runs of policy2 / (policy1 + second), each
// run's three measured side by side: issue 27's target is at most 1.1.
func (m *meter) printTarget(rows []*row, ns []int) {
	by := map[string]*row{}
	for _, r := range rows {
		by[r.scenario] = r
	}
	p1, p2, sec := by["policy1"], by["policy2"], by["second"]
	if p1 == nil || p2 == nil || sec == nil {
		return
	}
	fmt.Printf("%-17s", "policy2/(1+second)")
	for k := range ns {
		var us, cpu []float64
		for j := range p2.us[k] {
			us = append(us, p2.us[k][j]/(p1.us[k][j]+sec.us[k][j]))
			cpu = append(cpu, p2.cpu[k][j]/(p1.cpu[k][j]+sec.cpu[k][j]))
		}
		fmt.Printf(" %6.3f (%5.3f) %6.3f", median(us), us[0], median(cpu))
	}
	fmt.Println()
}

type meter struct {
	ctx    context.Context
	client *redis.Client
	store  *upstream.Store
	serial int    // makes every fresh key new
	pid    int    // the redis-server's
	dir    string // its working directory, where callgrind writes
	stop   func()
	// dumps counts callgrind's dumps and instructions sums them.
	dumps        int
	instructions int64
	// decided counts the decisions of the last measurement, the first
	// batch (which loads the script) included, as the CPU time does.
	decided int
	// call is the command batches go as: "fcall" or "evalsha".
	call string
}

// cpu reads the nanoseconds Redis's main thread has spent on a CPU; under
// callgrind, the instructions it has run.
func (m *meter) cpu() (int64, error) {
	if *callgrind {
		return m.counted()
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(m.pid) + "/schedstat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty schedstat")
	}
	return strconv.ParseInt(f[0], 10, 64)
}

// counted has callgrind dump its counts, which zeroes them, and returns
// the instructions Redis has run since it started: the dumps' sum.
func (m *meter) counted() (int64, error) {
	if out, err := exec.Command("callgrind_control", "--dump", strconv.Itoa(m.pid)).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control --dump: %w: %s", err, out)
	}
	m.dumps++
	name := fmt.Sprintf("%s/callgrind.out.%d.%d", m.dir, m.pid, m.dumps)
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
			m.instructions += n
			if *keepDumps != "" {
				return m.instructions, os.Rename(name, fmt.Sprintf("%s/callgrind.out.%d", *keepDumps, m.dumps))
			}
			_ = os.Remove(name)
			return m.instructions, nil
		}
	}
	return 0, fmt.Errorf("%s: no totals", name)
}

// fatalf stops the redis-server and exits: os.Exit runs no deferred stop.
func (m *meter) fatalf(format string, args ...any) {
	m.stop()
	log.Fatalf(format, args...)
}

// measure runs r's measurement once for each batch size.
func (m *meter) measure(r *row, ns []int) {
	if r.us == nil {
		r.us, r.cpu = make([][]float64, len(ns)), make([][]float64, len(ns))
	}
	for k, n := range ns {
		before, err := m.cpu()
		if err != nil {
			m.fatalf("%v", err)
		}
		us, err := r.measure(n)
		if err != nil {
			m.fatalf("%s %s N=%d: %v", r.scenario, r.alg, n, err)
		}
		after, err := m.cpu()
		if err != nil {
			m.fatalf("%v", err)
		}
		r.us[k] = append(r.us[k], us)
		r.cpu[k] = append(r.cpu[k], float64(after-before)/1000/float64(m.decided))
	}
}

// batches sends one run of batches of n requests through the store and
// returns Redis's µs per decision.
func (m *meter) batches(scenario string, a engine.Algorithm, n int) (float64, error) {
	reqs := make([]engine.Request, n)
	res := make([]engine.Result, n)
	l := freshLimit(a)
	if scenario == "hot" {
		l = hotLimit(a)
	}
	rounds := (*decisions + n - 1) / n
	m.decided = (rounds + 1) * n
	// One batch first, unmeasured: it loads the script.
	for round := -1; round < rounds; round++ {
		if round == 0 {
			if err := m.resetStats(); err != nil {
				return 0, err
			}
		}
		m.serial++
		hot := fmt.Sprintf("hot:%d", m.serial)
		for i := range reqs {
			key := hot
			if scenario == "fresh" {
				key = "fresh:" + strconv.Itoa(m.serial) + ":" + strconv.Itoa(i)
			}
			reqs[i] = engine.Request{Key: key, Limit: l, Cost: 1}
		}
		if err := engine.Wait(m.store, reqs, res, time.Time{}); err != nil {
			return 0, err
		}
		for i := range res {
			if res[i].Err != nil {
				return 0, res[i].Err
			}
			if !res[i].Decision.Allowed {
				return 0, fmt.Errorf("request %d refused: the limit should admit all", i)
			}
		}
	}
	us, err := m.usecPerCall(m.call)
	return us / float64(n), err
}

// policyLimits are the policy scenarios' limits: a burst limit, and a
// daily one beside it for policy2.
var policyLimits = []engine.NamedLimit{
	{Name: "burst", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 9}},
	{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 100_000, Period: 24 * time.Hour}},
}

// hotPolicyLimits admit every request of the hotpolicy scenario.
var hotPolicyLimits = []engine.NamedLimit{
	{Name: "burst", Limit: hotLimit(engine.GCRA)},
	{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1_000_000_000_000, Period: 24 * time.Hour}},
}

// policy runs batches of n requests, as RL.ALLOW hands them to the store,
// on client keys picked at random from -keys (or all on one, hotpolicy),
// under the scenario's policy, and returns Redis's µs per decision.
func (m *meter) policy(n int, scenario string) (float64, error) {
	reqs := make([]engine.Request, n)
	res := make([]engine.Result, n)
	rounds := (*decisions + n - 1) / n
	m.decided = (rounds + 1) * n
	rng := rand.New(rand.NewPCG(uint64(n), uint64(m.serial)))
	for round := -1; round < rounds; round++ {
		if round == 0 {
			if err := m.resetStats(); err != nil {
				return 0, err
			}
		}
		for i := range reqs {
			reqs[i] = engine.Request{Key: "pol:" + strconv.Itoa(rng.IntN(*keySpace)), Cost: 1}
			switch scenario {
			case "hotpolicy":
				reqs[i].Key, reqs[i].Limits = "pol:hot:"+strconv.Itoa(m.serial), hotPolicyLimits
			case "policy2":
				reqs[i].Limits = policyLimits
			case "second":
				reqs[i].Limit = policyLimits[1].Limit
			default:
				reqs[i].Limit = policyLimits[0].Limit
			}
		}
		if err := engine.Wait(m.store, reqs, res, time.Time{}); err != nil {
			return 0, err
		}
		for i := range res {
			if res[i].Err != nil {
				return 0, res[i].Err
			}
		}
	}
	m.serial++
	us, err := m.usecPerCall(m.call)
	return us / float64(n), err
}

// floor runs floorScript over batches of n fresh keys.
func (m *meter) floor(n int) (float64, error) {
	sha, err := m.client.ScriptLoad(m.ctx, floorScript).Result()
	if err != nil {
		return 0, err
	}
	keys := make([]string, n)
	rounds := (*decisions + n - 1) / n
	m.decided = rounds * n
	if err := m.resetStats(); err != nil {
		return 0, err
	}
	for range rounds {
		m.serial++
		for i := range keys {
			keys[i] = "floor:" + strconv.Itoa(m.serial) + ":" + strconv.Itoa(i)
		}
		if err := m.client.EvalSha(m.ctx, sha, keys, "1767225600000000", "10").Err(); err != nil {
			return 0, err
		}
	}
	us, err := m.usecPerCall("evalsha")
	return us / float64(n), err
}

func (m *meter) resetStats() error { return m.client.ConfigResetStat(m.ctx).Err() }

// usecPerCall reads a command's usec_per_call from INFO commandstats.
func (m *meter) usecPerCall(cmd string) (float64, error) {
	info, err := m.client.Info(m.ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, fmt.Errorf("no usec_per_call for %s in INFO commandstats", cmd)
}

// startRedis runs a redis-server on a free loopback port, without
// persistence, in a temporary directory, and returns how to stop it.
func startRedis() (stop func(), addr string, pid int, dir string, err error) {
	dir, err = os.MkdirTemp("", "sluice-scriptcost-")
	if err != nil {
		return nil, "", 0, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", 0, "", err
	}
	addr = ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	_ = ln.Close()
	args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	if *cluster {
		args = append(args, "--cluster-enabled", "yes")
	}
	cmd := exec.Command(*server, args...)
	wait := 10 * time.Second
	if *callgrind {
		// Its dumps are callgrind.out.<pid>.<n>, in dir.
		cmd = exec.Command("valgrind", append([]string{"--tool=callgrind", "--callgrind-out-file=" + dir + "/callgrind.out.%p", *server}, args...)...)
		wait = time.Minute
	}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", 0, "", fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	stop = func() {
		_ = cmd.Process.Kill() // the one process this command started
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			if *cluster {
				err = claimSlots(addr)
			}
			if err != nil {
				stop()
				return nil, "", 0, "", err
			}
			return stop, addr, cmd.Process.Pid, dir, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, "", 0, "", fmt.Errorf("redis-server did not listen on %s: %w", addr, err)
		}
	}
}

// claimSlots makes the one node at addr serve every slot and waits until
// its cluster state is ok.
func claimSlots(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		return fmt.Errorf("claiming the slots: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if info, _ := c.ClusterInfo(ctx).Result(); strings.Contains(info, "cluster_state:ok") {
			return nil
		}
	}
	return fmt.Errorf("the one-node cluster at %s did not reach state ok", addr)
}
