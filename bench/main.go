// Command bench measures Sluice against an application calling Redis
// directly with the minimal script it would write (bench/baseline: GCRA as
// redis-cell answers it, and a token bucket in a hash), never Sluice's own
// scripts, with redis-benchmark driving both under the same load in one run. Each scenario runs the two
// sides in turn, several times; it prints the median of each side and the
// median of the ratios of the runs made side by side.
//
//	go run ./bench            # builds Sluice, starts its own Redis, runs everything
//	go run ./bench -runs 5 -n 400000
//	go run ./bench -sluice /path/to/old/sluice -only '1000000, -P (16|1)$|latency' -sluice-args '--io-loops 2'
//	go run ./bench -only durable   # --durable replica against not, with a replica
//	go run ./bench -only record    # --record (by default, and every decision) against not
//	go run ./bench -only 'hot key' # one hot key, --grants on three sidecars among them
//	go run ./bench -only 'grants on' # keys from 1,000,000, none hot: --grants against not
//
// -sluice measures a prebuilt binary, so that runs of two builds can be
// interleaved on a noisy machine; -only runs the scenarios whose name
// matches its regular expression.
// Everything listens on 127.0.0.1 and is stopped when the command ends.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/csv"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/bench/baseline"
)

// stopAll ends the processes the benchmark started; fatalf calls it, since
// os.Exit runs no deferred function.
var stopAll = func() {}

func fatalf(format string, args ...any) {
	stopAll()
	log.Fatalf(format, args...)
}

var (
	runs     = flag.Int("runs", 5, "runs of each scenario; the median is reported")
	requests = flag.Int("n", 200_000, "requests per run")
	clients  = flag.Int("c", 50, "concurrent connections")
	prebuilt = flag.String("sluice", "", "a prebuilt sluice `binary` to measure instead of building ./cmd/sluice")
	extra    = flag.String("sluice-args", "", "more `flags` for every sidecar measured, space-separated (\"--io-loops 2\")")
	only     = flag.String("only", "", "run only the scenarios whose name matches this `regexp`")
)

// wanted tells whether -only selects the scenario named name.
func wanted(name string) bool {
	ok, err := regexp.MatchString(*only, name)
	if err != nil {
		fatalf("-only: %v", err)
	}
	return ok
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(dir)
	var procs []*exec.Cmd
	stopAll = func() {
		for _, p := range procs {
			_ = p.Process.Kill() // only the processes this command started
			_ = p.Wait()
		}
		procs = nil
	}
	defer stopAll()
	start := func(name string, args ...string) int {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		logf, _ := os.Create(filepath.Join(dir, filepath.Base(name)+strconv.Itoa(len(procs))+".log"))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			fatalf("start %s: %v", name, err)
		}
		procs = append(procs, cmd)
		return cmd.Process.Pid
	}

	sluiceBin, constBin := filepath.Join(dir, "sluice"), filepath.Join(dir, "constserver")
	builds := map[string]string{sluiceBin: "./cmd/sluice", constBin: "./bench/constserver"}
	if *prebuilt != "" {
		delete(builds, sluiceBin)
		sluiceBin = *prebuilt
	}
	for bin, pkg := range builds {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	redisPort, sluicePort, memPort, constPort := freePort(), freePort(), freePort(), freePort()
	redisSocket, sluiceSocket := filepath.Join(dir, "redis.sock"), filepath.Join(dir, "sluice.sock")
	start("redis-server", "--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
		"--unixsocket", redisSocket, "--unixsocketperm", "700")
	waitPort(redisPort)
	sluice := func(args ...string) int { return start(sluiceBin, append(args, strings.Fields(*extra)...)...) }
	sluicePID := sluice("--listen", "127.0.0.1:"+sluicePort, "--admin-listen", "127.0.0.1:"+freePort(),
		"--upstream", "redis://127.0.0.1:"+redisPort)
	// The same sidecar on a Unix socket (--listen unix:PATH), as an
	// application in its pod can reach it; Redis is still reached over TCP.
	sluiceUnixPID := sluice("--listen", "unix:"+sluiceSocket, "--admin-listen", "127.0.0.1:"+freePort(),
		"--upstream", "redis://127.0.0.1:"+redisPort)
	waitSocket(sluiceSocket)
	memPID := sluice("--listen", "127.0.0.1:"+memPort, "--admin-listen", "127.0.0.1:"+freePort())
	constPID := start(constBin, "--listen", "127.0.0.1:"+constPort)
	for _, p := range []string{sluicePort, memPort, constPort} {
		waitPort(p)
	}

	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + redisPort})
	defer one.Close()
	rdb := nodes{one}
	ctx := context.Background()
	for _, sc := range []baseline.Script{baseline.GCRA, baseline.Token} {
		if err := one.ScriptLoad(ctx, sc.Source).Err(); err != nil {
			fatalf("SCRIPT LOAD: %v", err)
		}
	}

	fmt.Printf("Sluice vs an application calling Redis with a minimal script (bench/baseline), redis-benchmark -c %d, -n %d, median of %d\n",
		*clients, *requests, *runs)
	fmt.Printf("machine: %s/%s, %d CPUs, %s\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel())

	// Many keys, all allowed: GCRA through CL.THROTTLE (burst 1000 at
	// 1000/s), and a token bucket through RL.TOKEN, against the baselines.
	// Where Sluice runs short of a target, Redis answering PING under the
	// same load is beside it: no RESP server goes faster on this machine,
	// so a ratio of direct calls above PING's cannot be reached here.
	ping := []string{"PING"}
	pingTCP, pingUnix := target{port: redisPort, args: ping}, target{socket: redisSocket, args: ping}
	gcraDirect := []string{"EVALSHA", baseline.GCRA.SHA, "1", "k:__rand_int__", "1000", "1000", "1", "1"}
	gcraSidecar := []string{"CL.THROTTLE", "k:__rand_int__", "1000", "1000", "1", "1"}
	tokenDirect := []string{"EVALSHA", baseline.Token.SHA, "1", "t:__rand_int__", "1000", "1000", "1000", "1"}
	tokenSidecar := []string{"RL.TOKEN", "t:__rand_int__", "1000", "1000", "1s"}
	for _, k := range []int{1_000_000, 100_000} {
		for _, p := range []int{16, 1} {
			name := fmt.Sprintf("GCRA, keys from %d, -P %d", k, p)
			if !wanted(name) {
				continue
			}
			var ceiling []target
			if p == 1 {
				ceiling = append(ceiling, pingTCP)
			}
			c := compare(rdb, *requests, *clients, p, target{port: redisPort, args: gcraDirect, keys: k},
				target{port: sluicePort, args: gcraSidecar, keys: k, pid: sluicePID}, ceiling...)
			report(name, c)
		}
		if name := fmt.Sprintf("token bucket, keys from %d, -P 16", k); wanted(name) {
			c := compare(rdb, *requests, *clients, 16, target{port: redisPort, args: tokenDirect, keys: k},
				target{port: sluicePort, args: tokenSidecar, keys: k, pid: sluicePID})
			report(name, c)
		}
	}

	// One hot key allowed: a limit high enough to admit everything.
	hotDirect := []string{"EVALSHA", baseline.GCRA.SHA, "1", "hot-open", "1000000000", "1000000", "1", "1"}
	hotSidecar := []string{"CL.THROTTLE", "hot-open", "1000000000", "1000000", "1", "1"}
	if name := "one hot key allowed, -P 16"; wanted(name) {
		c := compare(rdb, *requests, *clients, 16, target{port: redisPort, args: hotDirect},
			target{port: sluicePort, args: hotSidecar, pid: sluicePID})
		report(name, c)
	}

	// One hot key allowed on three sidecars with grants (--grants),
	// against three on the in-memory store.
	if name := "one hot key, allowed, 3 sidecars on one Redis"; wanted(name) {
		grantRows(sluice, rdb, redisPort, 16)
	}

	// Many keys, none hot, on a sidecar with grants (--grants) beside the
	// one without: grants must cost nothing where no key is hot.
	if name := "GCRA, keys from 1000000, -P 16, grants on"; wanted(name) {
		grantsColdRow(name, sluice, rdb, redisPort, target{port: sluicePort, args: gcraSidecar, keys: 1_000_000, pid: sluicePID})
	}

	// One hot key refused: burst 0 at 1 per hour.
	coldDirect := []string{"EVALSHA", baseline.GCRA.SHA, "1", "hot", "0", "1", "3600", "1"}
	coldSidecar := []string{"CL.THROTTLE", "hot", "0", "1", "3600", "1"}
	if name := "one hot key refused, -P 16"; wanted(name) {
		c := compare(rdb, *requests, *clients, 16, target{port: redisPort, args: coldDirect},
			target{port: sluicePort, args: coldSidecar, pid: sluicePID}, pingTCP)
		report(name, c)
		fmt.Printf("    round trips reaching Redis through Sluice: %.2f%% of requests\n", 100*c.b.scriptsPerRequest)
	}

	// The application reaching its sidecar over a Unix socket; direct
	// calls stay on TCP, as a central Redis is on another machine.
	for _, row := range []struct {
		name   string
		p      int
		direct []string
		keys   int
		side   []string
	}{
		{"GCRA, keys from 1000000, -P 16, Unix socket", 16, gcraDirect, 1_000_000, gcraSidecar},
		{"GCRA, keys from 1000000, -P 1, Unix socket", 1, gcraDirect, 1_000_000, gcraSidecar},
		{"one hot key refused, -P 16, Unix socket", 16, coldDirect, 0, coldSidecar},
	} {
		if !wanted(row.name) {
			continue
		}
		c := compare(rdb, *requests, *clients, row.p, target{port: redisPort, args: row.direct, keys: row.keys},
			target{socket: sluiceSocket, args: row.side, keys: row.keys, pid: sluiceUnixPID}, pingUnix)
		report(row.name, c)
	}

	if wanted("Redis Cluster") {
		clusterRows(start, sluice, dir, gcraSidecar)
	}
	if wanted("TLS to Redis") {
		tlsRows(start, sluice, dir, gcraDirect, gcraSidecar)
	}

	// One client, one request at a time: latency.
	// A tenth of the requests: plenty for a median, and ten times faster.
	if name := "-c 1 latency"; wanted(name) {
		c := compare(rdb, *requests/10, 1, 1, target{port: redisPort, args: gcraDirect},
			target{port: sluicePort, args: gcraSidecar, pid: sluicePID})
		fmt.Printf("%-40s p50 direct %.3f ms, Sluice %.3f ms, difference %+.3f ms\n", name, c.a.p50, c.b.p50, c.b.p50-c.a.p50)
	}

	// The in-memory store against a server that answers from nothing, and
	// Redis answering PING beside them: the ceiling of any RESP server on
	// this machine. Keys from 100,000, the default --max-keys.
	for _, p := range []int{1, 16} {
		name := fmt.Sprintf("in-memory store, -P %d", p)
		if !wanted(name) {
			continue
		}
		n := *requests
		if p > 1 {
			// Five times the requests: at over 500,000 a second, a run of
			// the usual count lasts a third of a second, too short to
			// average out the machine's hiccups.
			n *= 5
		}
		c := compare(nil, n, *clients, p, target{port: constPort, args: gcraSidecar, pid: constPID},
			target{port: memPort, args: gcraSidecar, pid: memPID})
		pc := compare(nil, n, *clients, p, pingTCP, target{port: memPort, args: gcraSidecar, pid: memPID})
		fmt.Printf("%-40s constant reply %9.0f/s, Sluice in-memory %9.0f/s, ratio %.2f; to Redis answering PING %.2f; CPU µs per request: constant %.2f, Sluice %.2f\n",
			name, c.a.rps, c.b.rps, c.ratio, pc.ratio, c.a.serverCPU, c.b.serverCPU)
	}

	if wanted("record") {
		recordRows(sluice, dir, redisPort, rdb, gcraSidecar)
	}
	if wanted("durable") {
		durableRows(start, sluice, dir, one, redisPort, rdb, gcraSidecar)
	}
}

// target is one side of a comparison: the server redis-benchmark loads
// (a port on 127.0.0.1, or a Unix socket's path), the command it sends,
// how many distinct keys __rand_int__ draws from (0 means 100,000), and
// the process whose CPU time is counted (0: none).
type target struct {
	port, socket string
	args         []string
	keys         int
	pid          int
	cluster      bool   // redis-benchmark --cluster: port is a seed node
	cacert       string // redis-benchmark --tls, trusting this CA file
}

// sample is one redis-benchmark run.
type sample struct {
	rps, p50          float64
	redisCPU          float64 // Redis's CPU µs per request
	scriptsPerRequest float64 // script calls (EVALSHA, EVAL, FCALL) Redis saw per request sent
	serverCPU         float64 // the target process's CPU µs per request
	clientCPU         float64 // redis-benchmark's CPU µs per request
}

// comparison is the median of several runs of each side, and the medians
// of the ratios b/a of the runs made one after the other; ceiling is the
// median ratio to a of a third target run beside them (0: none), and c
// the median of its runs.
type comparison struct {
	a, b, c                  sample
	ratio, cpuRatio, ceiling float64
}

// compare runs redis-benchmark, n requests from c clients, against a and
// then b (and then the ceiling, if one is given), *runs times, so that the
// machine's drift, which is large on a shared VM, touches every side
// alike; each ratio is taken within one round of runs.
func compare(rdb nodes, n, c, pipeline int, a, b target, ceiling ...target) comparison {
	var as, bs, cs []sample
	var ratios, cpuRatios, ceilings []float64
	for range *runs {
		x, y := once(rdb, n, c, pipeline, a), once(rdb, n, c, pipeline, b)
		as, bs = append(as, x), append(bs, y)
		ratios = append(ratios, y.rps/x.rps)
		cpuRatios = append(cpuRatios, y.redisCPU/x.redisCPU)
		for _, t := range ceiling {
			z := once(rdb, n, c, pipeline, t)
			cs, ceilings = append(cs, z), append(ceilings, z.rps/x.rps)
		}
	}
	cmp := comparison{a: medianSample(as), b: medianSample(bs), ratio: median(ratios), cpuRatio: median(cpuRatios)}
	if len(ceilings) > 0 {
		cmp.c, cmp.ceiling = medianSample(cs), median(ceilings)
	}
	return cmp
}

func once(rdb nodes, n, c, pipeline int, t target) sample {
	cpu0, eval0 := redisStats(rdb)
	own0 := processCPU(t.pid)
	rps, p50, client := benchmark(t, c, pipeline, n)
	own1 := processCPU(t.pid)
	cpu1, eval1 := redisStats(rdb)
	perRequest := func(seconds float64) float64 { return seconds / float64(n) * 1e6 }
	return sample{rps, p50, perRequest(cpu1 - cpu0), (eval1 - eval0) / float64(n), perRequest(own1 - own0), perRequest(client)}
}

func medianSample(ss []sample) sample {
	field := func(f func(sample) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		return median(xs)
	}
	return sample{
		rps:               field(func(s sample) float64 { return s.rps }),
		p50:               field(func(s sample) float64 { return s.p50 }),
		redisCPU:          field(func(s sample) float64 { return s.redisCPU }),
		scriptsPerRequest: field(func(s sample) float64 { return s.scriptsPerRequest }),
		serverCPU:         field(func(s sample) float64 { return s.serverCPU }),
		clientCPU:         field(func(s sample) float64 { return s.clientCPU }),
	}
}

// report prints one scenario against Redis. The last figures add up every
// process's CPU per request, redis-benchmark's included: where they all
// share the machine's CPUs, as here, that sum is what bounds throughput.
func report(name string, c comparison) {
	fmt.Printf("%-40s direct %9.0f/s, Sluice %9.0f/s, ratio %.2f; p50 ms: direct %.3f, Sluice %.3f; Redis CPU µs per request: direct %.2f, Sluice %.2f (%.0f%%); Sluice's own %.2f; all processes: direct %.2f, Sluice %.2f",
		name, c.a.rps, c.b.rps, c.ratio, c.a.p50, c.b.p50, c.a.redisCPU, c.b.redisCPU, 100*c.cpuRatio, c.b.serverCPU,
		c.a.redisCPU+c.a.clientCPU, c.b.redisCPU+c.b.serverCPU+c.b.clientCPU)
	if c.ceiling > 0 {
		// redis-benchmark is one thread: near 100% of a CPU, it is the
		// load generator that sets the rate, not the server.
		fmt.Printf("; Redis answering PING: %.2f times direct; redis-benchmark busy %.0f%% of a CPU through Sluice, %.0f%% against PING",
			c.ceiling, 100*c.b.clientBusy(), 100*c.c.clientBusy())
	}
	fmt.Println()
}

// clientBusy is the share of one CPU redis-benchmark used in a run. Its
// CPU time counts its start and its connections, which its rate does not,
// so a saturated run reads a little over 1.
func (s sample) clientBusy() float64 { return s.clientCPU * s.rps / 1e6 }

// benchmark runs redis-benchmark once and returns requests per second, the
// p50 latency in milliseconds and redis-benchmark's own CPU seconds.
func benchmark(t target, c, pipeline, n int) (rps, p50, cpu float64) {
	keys := t.keys
	if keys == 0 {
		keys = 100_000
	}
	cmdArgs := []string{"-h", "127.0.0.1", "-p", t.port}
	if t.socket != "" {
		cmdArgs = []string{"-s", t.socket}
	}
	if t.cluster {
		cmdArgs = append(cmdArgs, "--cluster")
	}
	if t.cacert != "" {
		cmdArgs = append(cmdArgs, "--tls", "--cacert", t.cacert)
	}
	cmdArgs = append(cmdArgs, "-c", strconv.Itoa(c), "-n", strconv.Itoa(n),
		"-P", strconv.Itoa(pipeline), "-r", strconv.Itoa(keys), "--csv")
	cmd := exec.Command("redis-benchmark", append(cmdArgs, t.args...)...)
	out, err := cmd.Output()
	if err != nil {
		fatalf("redis-benchmark %v: %v\n%s", t.args, err, out)
	}
	// In cluster mode redis-benchmark lists the masters before its CSV.
	if i := strings.Index(string(out), "\"test\""); i > 0 {
		out = out[i:]
	}
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[1]) < 5 {
		fatalf("redis-benchmark output: %v\n%s", err, out)
	}
	rps, _ = strconv.ParseFloat(rows[1][1], 64)
	p50, _ = strconv.ParseFloat(rows[1][4], 64)
	cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return rps, p50, cpu
}

// nodes are the Redis servers whose CPU and script calls a comparison
// counts: one, or a cluster's masters; nil, none.
type nodes []*redis.Client

// redisStats reads the CPU seconds and script call count of every node,
// summed.
func redisStats(rdb nodes) (cpu, scripts float64) {
	for _, n := range rdb {
		c, e := nodeStats(n)
		cpu, scripts = cpu+c, scripts+e
	}
	return cpu, scripts
}

// nodeStats reads one Redis's CPU seconds and script call count.
func nodeStats(rdb *redis.Client) (cpu, scripts float64) {
	info, err := rdb.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		fatalf("INFO: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, ":"); ok {
			switch k {
			case "used_cpu_sys", "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				cpu += f
			case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall":
				// The batch script's calls, however sent: EVALSHA, or FCALL
				// once its library is loaded (EVAL after a reload).
				for _, field := range strings.Split(v, ",") {
					if n, ok := strings.CutPrefix(field, "calls="); ok {
						f, _ := strconv.ParseFloat(n, 64)
						scripts += f
					}
				}
			}
		}
	}
	return cpu, scripts
}

// processCPU is the CPU seconds pid has used (user and system), read from
// /proc; 0 for pid 0 or where /proc cannot say.
func processCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and
	// 15 of the line, 12 and 13 after it, in clock ticks of 1/100 s.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	user, _ := strconv.ParseFloat(f[11], 64)
	sys, _ := strconv.ParseFloat(f[12], 64)
	return (user + sys) / 100
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("%v", err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func waitPort(port string) {
	for range 500 {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	fatalf("nothing listens on port %s after 5s", port)
}

func waitSocket(path string) {
	for range 500 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	fatalf("nothing listens on %s after 5s", path)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// clusterRows compares Sluice on a Redis Cluster of three masters, which
// it starts, with an application calling the baseline GCRA script on the
// cluster directly: redis-benchmark --cluster, whose clients each keep to
// one node and put that node's hash tag in every key ({tag}), so that
// each call goes straight to the master that serves it. Redis's CPU and
// script calls are summed over the masters.
func clusterRows(start func(string, ...string) int, sluice func(...string) int, dir string, sidecar []string) {
	ctx := context.Background()
	var ports, addrs []string
	for range 3 {
		p := freePort()
		start("redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+p+".conf")
		ports, addrs = append(ports, p), append(addrs, "127.0.0.1:"+p)
	}
	for _, p := range ports {
		waitPort(p)
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	var masters nodes
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		masters = append(masters, c)
	}
	// Every node must see the whole cluster before either side starts.
	for _, c := range masters {
		for try := 0; ; try++ {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if try == 1000 {
				fatalf("cluster not ok after 10s: %v %s", err, info)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := c.ScriptLoad(ctx, baseline.GCRA.Source).Err(); err != nil {
			fatalf("SCRIPT LOAD: %v", err)
		}
	}
	port := freePort()
	pid := sluice("--listen", "127.0.0.1:"+port, "--admin-listen", "127.0.0.1:"+freePort(),
		"--upstream", "redis+cluster://"+strings.Join(addrs, ","))
	waitPort(port)
	direct := []string{"EVALSHA", baseline.GCRA.SHA, "1", "k:{tag}:__rand_int__", "1000", "1000", "1", "1"}
	for _, p := range []int{16, 1} {
		name := fmt.Sprintf("Redis Cluster, GCRA, keys from 1000000, -P %d", p)
		if !wanted(name) {
			continue
		}
		c := compare(masters, *requests, *clients, p, target{port: ports[0], args: direct, keys: 1_000_000, cluster: true},
			target{port: port, args: sidecar, keys: 1_000_000, pid: pid})
		report(name, c)
		fmt.Printf("    script calls per decision: direct %.3f, Sluice %.3f\n", c.a.scriptsPerRequest, c.b.scriptsPerRequest)
	}
}

// tlsRows compares Sluice reaching Redis over TLS (rediss://) with an
// application calling the baseline script over TLS too: a Redis of its
// own that speaks only TLS, with a CA and certificate made here. The
// application reaches its sidecar over plain TCP, on its own machine.
func tlsRows(start func(string, ...string) int, sluice func(...string) int, dir string, direct, sidecar []string) {
	writeCerts(dir)
	ca := filepath.Join(dir, "ca.pem")
	port := freePort()
	start("redis-server", "--port", "0", "--tls-port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--dbfilename", "tls.rdb", "--tls-cert-file", filepath.Join(dir, "redis.crt"),
		"--tls-key-file", filepath.Join(dir, "redis.key"), "--tls-ca-cert-file", ca, "--tls-auth-clients", "no")
	waitPort(port)
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(ca)
	if err != nil || !roots.AppendCertsFromPEM(pem) {
		fatalf("the bench's CA: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, TLSConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}})
	defer rdb.Close()
	if err := rdb.ScriptLoad(context.Background(), baseline.GCRA.Source).Err(); err != nil {
		fatalf("SCRIPT LOAD over TLS: %v", err)
	}
	sport := freePort()
	pid := sluice("--listen", "127.0.0.1:"+sport, "--admin-listen", "127.0.0.1:"+freePort(),
		"--upstream", "rediss://127.0.0.1:"+port, "--upstream-tls-ca", ca)
	waitPort(sport)
	for _, p := range []int{16, 1} {
		name := fmt.Sprintf("TLS to Redis, GCRA, keys from 1000000, -P %d", p)
		if !wanted(name) {
			continue
		}
		c := compare(nodes{rdb}, *requests, *clients, p, target{port: port, args: direct, keys: 1_000_000, cacert: ca},
			target{port: sport, args: sidecar, keys: 1_000_000, pid: pid})
		report(name, c)
		fmt.Printf("    script calls per decision: direct %.3f, Sluice %.3f\n", c.a.scriptsPerRequest, c.b.scriptsPerRequest)
	}
}
