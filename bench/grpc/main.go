// Command grpc measures rate limit services over Envoy's gRPC protocol
// (ShouldRateLimit) with one load generator: Sluice's gRPC door, and, when
// their binaries are given, other Sluice builds (-before, and any number
// of -also) and envoyproxy/ratelimit (-peer), each deciding on a real
// redis-server, and gubernator (-gubernator) over its own gRPC API
// (GetRateLimits), deciding in its own memory. It reports each one's
// decisions per second and its own CPU per decision, read from
// /proc/PID/stat, so that the client's CPU, on the same machine, is not
// counted, and, apart, Redis's CPU per decision while each one ran.
//
// Each caller has one call in flight, with one descriptor, as Envoy's
// filter sends them; the keys are spread over -keys distinct values, so
// that most decisions create a key in Redis, as a gateway's per-client
// limits do. The services run in turn, the first one rotated every run,
// since the machine is shared and noisy; every run and the medians are
// printed, with each one's CPU per decision as a ratio of the peer's.
//
//	go run ./bench/grpc                                # this tree's Sluice alone
//	go run ./bench/grpc -peer /tmp/ratelimit -before /tmp/sluice-main -runs 5
//	go run ./bench/grpc -before /tmp/sluice-main -also workers=/tmp/sluice-workers -also shared=/tmp/sluice-shared
//	go run ./bench/grpc -peer /tmp/ratelimit -also 'grpcgo=/tmp/sluice --grpc-transport grpc-go'
//	go run ./bench/grpc -peer /tmp/ratelimit -gubernator /tmp/gubernator -runs 3
//
// The peer runs with its statistics off (USE_STATSD=false) and its
// defaults otherwise; gubernator alone (its only memberlist node), with
// its tracing off and room for every key (guberEnv). Gubernator keeps
// its counts in its own memory, so its CPU is the whole decision's, where
// the others' leaves out Redis's, printed apart for that. Everything
// listens on 127.0.0.1 and is stopped when the command ends. Linux only
// (/proc).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/bench/procs"
)

var (
	runs    = flag.Int("runs", 5, "runs of each service; medians are reported")
	dur     = flag.Duration("d", 4*time.Second, "length of one run of one service")
	callers = flag.Int("c", 50, "concurrent callers, each with one call in flight")
	keys    = flag.Int("keys", 1_000_000, "distinct descriptor values, spread over the callers")
	sluice  = flag.String("sluice", "", "Sluice binary to measure; empty: build this tree's ./cmd/sluice")
	before  = flag.String("before", "", "another Sluice binary (e.g. built from main) measured beside it; empty: none")
	others  variants
	peer    = flag.String("peer", "", "envoyproxy/ratelimit's binary (its service_cmd) measured beside it; empty: none")
	guber   = flag.String("gubernator", "", "gubernator's binary (its cmd/gubernator) measured beside it; empty: none")
)

func init() {
	flag.Var(&others, "also", "`NAME=PATH [FLAGS]`: one more Sluice binary measured beside the others, as NAME, with FLAGS added to its command line; repeatable")
}

// variant is one -also binary, with the flags it is given besides the
// benchmark's own; variants are all of them, in the order given.
type variant struct {
	name, path string
	args       []string
}

type variants []variant

func (v *variants) String() string { return fmt.Sprint(*v) }

func (v *variants) Set(s string) error {
	name, path, ok := strings.Cut(s, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("want NAME=PATH, got %q", s)
	}
	// Each name is a column and a key prefix in the one Redis; "peer" is
	// the row the ratios divide by.
	if name == "sluice" || name == "before" || name == "peer" || name == "gubernator" || slices.ContainsFunc(*v, func(o variant) bool { return o.name == name }) {
		return fmt.Errorf("-also %s: the name is taken", name)
	}
	// "PATH --flag value": the same binary with a setting changed, such
	// as --grpc-transport grpc-go.
	fields := strings.Fields(path)
	if len(fields) == 0 {
		return fmt.Errorf("want NAME=PATH, got %q", s)
	}
	*v = append(*v, variant{name, fields[0], fields[1:]})
	return nil
}

// procs are the processes the benchmark started; fatalf stops them, since
// os.Exit runs no deferred function.
var ps procs.Set

func fatalf(format string, args ...any) { ps.Fatalf(format, args...) }

// service is one rate limit service under test.
type service struct {
	name string
	pid  int
	call func(caller int, key string) error // one decision for key, by caller
	next atomic.Int64                       // the next key to ask for, shared by its callers
}

// measure runs the callers against s for d.
func (s *service) measure(d time.Duration) procs.Result {
	return ps.Measure(s.pid, *callers, d, func(c, _ int) error {
		if err := s.call(c, "k"+strconv.FormatInt(s.next.Add(1)%int64(*keys), 10)); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		return nil
	})
}

// rlsCaller calls Envoy's ShouldRateLimit on conn, one descriptor
// client=key in domain bench a call, each caller with a request of its
// own reused with a new value each call.
func rlsCaller(conn *grpc.ClientConn, callers int) func(c int, key string) error {
	rl := pb.NewRateLimitServiceClient(conn)
	entries := make([]*rlv3.RateLimitDescriptor_Entry, callers)
	reqs := make([]*pb.RateLimitRequest, callers)
	for i := range reqs {
		entries[i] = &rlv3.RateLimitDescriptor_Entry{Key: "client"}
		reqs[i] = &pb.RateLimitRequest{Domain: "bench",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{entries[i]}}}}
	}
	return func(c int, key string) error {
		entries[c].Value = key
		resp, err := rl.ShouldRateLimit(context.Background(), reqs[c])
		if err == nil && resp.OverallCode != pb.RateLimitResponse_OK {
			err = fmt.Errorf("over limit: %v", resp)
		}
		return err
	}
}

// The one rule every service decides: a fixed window no caller reaches.
const benchYAML = "domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n"

func main() {
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "sluice-grpc-bench-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(dir)
	ps.Dir = dir
	defer ps.Stop()
	start := func(env []string, name string, args ...string) *exec.Cmd { return ps.Start(env, name, args...) }

	bin := *sluice
	if bin == "" {
		bin = filepath.Join(dir, "sluice")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/sluice").CombinedOutput(); err != nil {
			fatalf("go build: %v\n%s", err, out)
		}
	}
	// One Redis for all: it is not what is measured. A million keys per
	// service stay well within its memory.
	redisPort := strconv.Itoa(ps.FreePort())
	redis := start(nil, "redis-server", "--bind", "127.0.0.1", "--port", redisPort, "--save", "", "--appendonly", "no")
	redisAddr := "127.0.0.1:" + redisPort
	ps.WaitListen(redisAddr, 20*time.Second)

	// Sluice reads the directory; the peer reads RUNTIME_ROOT/ratelimit/config.
	cfgDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		fatalf("%v", err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(benchYAML), 0o644); err != nil {
		fatalf("%v", err)
	}

	var services []*service
	dial := func(addr string) *grpc.ClientConn {
		ps.WaitListen(addr, 20*time.Second)
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fatalf("%v", err)
		}
		return conn
	}
	add := func(name string, cmd *exec.Cmd, addr string) {
		services = append(services, &service{name: name, pid: cmd.Process.Pid, call: rlsCaller(dial(addr), *callers)})
	}
	startSluice := func(name, bin, prefix string, extra ...string) {
		addr := fmt.Sprintf("127.0.0.1:%d", ps.FreePort())
		args := append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", ps.FreePort()), "--grpc-listen", addr,
			"--rls-config", cfgDir, "--upstream", "redis://" + redisAddr, "--key-prefix", prefix,
			"--admin-listen", "off", "--log-level", "warn"}, extra...)
		cmd := start(nil, bin, args...)
		add(name, cmd, addr)
	}
	startSluice("sluice", bin, "sluice:")
	if *before != "" {
		startSluice("before", *before, "before:")
	}
	for _, o := range others {
		startSluice(o.name, o.path, o.name+":", o.args...)
	}
	if *peer != "" {
		grpcPort := ps.FreePort()
		cmd := start([]string{"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
			"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
			"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ps.FreePort()), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ps.FreePort())}, *peer)
		add("peer", cmd, fmt.Sprintf("127.0.0.1:%d", grpcPort))
	}
	if *guber != "" {
		grpcAddr := fmt.Sprintf("127.0.0.1:%d", ps.FreePort())
		cmd := start(guberEnv(grpcAddr, fmt.Sprintf("127.0.0.1:%d", ps.FreePort()), fmt.Sprintf("127.0.0.1:%d", ps.FreePort()), *keys),
			*guber)
		call := guberCaller(dial(grpcAddr), *callers, benchGuberRule)
		if err := waitGuber(call, 20*time.Second); err != nil {
			fatalf("%v", err)
		}
		services = append(services, &service{name: "gubernator", pid: cmd.Process.Pid, call: call})
	}

	// Warm each: connections, scripts, pools, goroutine stacks.
	for _, s := range services {
		s.measure(time.Second)
	}
	res := make([][]procs.Result, len(services))
	// Redis's CPU per decision while each service ran (they run in turn):
	// the part of Sluice's and the peer's decisions their own CPU leaves
	// out, and that gubernator, keeping its counts in its own memory,
	// counts in its own.
	redisCPU := make([][]float64, len(services))
	fmt.Printf("%d callers, one call of one descriptor in flight each, %v per run, %d keys, fixed window, %d runs\n",
		*callers, *dur, *keys, *runs)
	fmt.Printf("%-4s", "run")
	for _, s := range services {
		fmt.Printf(" %12s %10s", s.name+" dec/s", "µs CPU")
	}
	fmt.Println()
	for run := range *runs {
		for j := range services {
			i := (run + j) % len(services)
			r0, t0 := ps.CPU(redis.Process.Pid), time.Now()
			r := services[i].measure(*dur)
			n := r.PerSec * time.Since(t0).Seconds()
			res[i] = append(res[i], r)
			redisCPU[i] = append(redisCPU[i], us(ps.CPU(redis.Process.Pid)-r0)/max(n, 1))
		}
		fmt.Printf("%-4d", run+1)
		for i := range services {
			r := res[i][run]
			fmt.Printf(" %12.0f %10.1f", r.PerSec, us(r.CPUPerOp))
		}
		fmt.Println()
	}
	fmt.Printf("%-4s", "med")
	meds := make([]float64, len(services))
	for i := range services {
		perSec, cpuPerOp := procs.Medians(res[i])
		meds[i] = us(cpuPerOp)
		fmt.Printf(" %12.0f %10.1f", perSec, meds[i])
	}
	fmt.Println()
	if p := slices.IndexFunc(services, func(s *service) bool { return s.name == "peer" }); p >= 0 {
		for i, s := range services {
			if i != p {
				fmt.Printf("%s's CPU per decision: %.2f× the peer's\n", s.name, meds[i]/meds[p])
			}
		}
	}
	rs := make([]string, len(services))
	for i, s := range services {
		rs[i] = fmt.Sprintf("%s %.1f µs", s.name, procs.Median(redisCPU[i]))
	}
	fmt.Printf("Redis's CPU per decision, medians: %s\n", strings.Join(rs, ", "))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
