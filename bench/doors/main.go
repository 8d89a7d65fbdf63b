// Command doors measures the gRPC door (Envoy's rate limit service) beside
// RESP on one Sluice and one Redis: throughput, and Sluice's own CPU per
// decision, read from /proc. Each side has the same number of callers, each
// with one call in flight: gRPC callers send ShouldRateLimit with one
// descriptor, as Envoy's filter does; RESP callers are go-redis clients
// sending RL.FIXED, one command at a time (not redis-benchmark's
// pipelines). Both decide the same fixed-window limit over the same keys.
// The sides run in turn, their order swapped every run, since the machine
// is shared and noisy; it prints every run and the medians.
//
//	go run ./bench/doors                 # builds Sluice, starts its own Redis
//	go run ./bench/doors -runs 7 -d 5s -c 50
//
// Everything listens on 127.0.0.1 and is stopped when the command ends.
// Linux only (/proc).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	runs    = flag.Int("runs", 5, "runs of each side; medians are reported")
	dur     = flag.Duration("d", 4*time.Second, "length of one run of one side")
	callers = flag.Int("c", 50, "concurrent callers, each with one call in flight")
	keys    = flag.Int("keys", 1000, "distinct keys, spread over the callers")
)

var stopAll = func() {}

func fatalf(format string, args ...any) {
	stopAll()
	log.Fatalf(format, args...)
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("%v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitListen(addr string) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			fatalf("nothing listens on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpu is a process's user and system time so far, from /proc.
func cpu(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		fatalf("%v", err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(ut+st) * tick
}

type result struct {
	perSec   float64
	cpuPerOp time.Duration
}

// measure runs one side for *dur: n callers calling once each in turn.
func measure(pid int, call func(ctx context.Context, caller, i int) error) result {
	var total atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	stop := make(chan struct{})
	c0, t0 := cpu(pid), time.Now()
	for c := range *callers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := call(ctx, c, i); err != nil {
					fatalf("call: %v", err)
				}
				total.Add(1)
			}
		})
	}
	time.Sleep(*dur)
	close(stop)
	wg.Wait()
	el, used := time.Since(t0), cpu(pid)-c0
	n := total.Load()
	return result{perSec: float64(n) / el.Seconds(), cpuPerOp: used / time.Duration(max(n, 1))}
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "sluice-doors-bench-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(dir)
	var procs []*exec.Cmd
	stopAll = func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		procs = nil
	}
	defer stopAll()
	start := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			fatalf("%s: %v", name, err)
		}
		procs = append(procs, cmd)
		return cmd
	}

	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/sluice").CombinedOutput(); err != nil {
		fatalf("go build: %v\n%s", err, out)
	}
	redisAddr := fmt.Sprintf("127.0.0.1:%d", freePort())
	start("redis-server", "--bind", "127.0.0.1", "--port", strings.Split(redisAddr, ":")[1], "--save", "", "--appendonly", "no")
	waitListen(redisAddr)

	rlsDir := filepath.Join(dir, "rls")
	if err := os.Mkdir(rlsDir, 0o755); err != nil {
		fatalf("%v", err)
	}
	const yaml = "domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n"
	if err := os.WriteFile(filepath.Join(rlsDir, "bench.yaml"), []byte(yaml), 0o644); err != nil {
		fatalf("%v", err)
	}
	respAddr := fmt.Sprintf("127.0.0.1:%d", freePort())
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", freePort())
	sl := start(bin, "--listen", respAddr, "--grpc-listen", grpcAddr, "--rls-config", rlsDir,
		"--upstream", "redis://"+redisAddr, "--admin-listen", "off", "--log-level", "warn")
	waitListen(respAddr)
	waitListen(grpcAddr)
	pid := sl.Process.Pid

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fatalf("%v", err)
	}
	defer conn.Close()
	rl := pb.NewRateLimitServiceClient(conn)
	// One request per key, made once: the call path is what is measured.
	reqs := make([]*pb.RateLimitRequest, *keys)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client", Value: "k" + strconv.Itoa(i)}}}}}
	}
	grpcCall := func(ctx context.Context, c, i int) error {
		resp, err := rl.ShouldRateLimit(ctx, reqs[(c*7919+i)%len(reqs)])
		if err == nil && resp.OverallCode != pb.RateLimitResponse_OK {
			err = fmt.Errorf("over limit: %v", resp)
		}
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Protocol: 2, PoolSize: *callers})
	defer rdb.Close()
	respKeys := make([]string, *keys)
	for i := range respKeys {
		respKeys[i] = "bench:k" + strconv.Itoa(i)
	}
	respCall := func(ctx context.Context, c, i int) error {
		v, err := rdb.Do(ctx, "RL.FIXED", respKeys[(c*7919+i)%len(respKeys)], 1000000000, "1h").Slice()
		if err == nil && v[0] != int64(1) {
			err = fmt.Errorf("refused: %v", v)
		}
		return err
	}

	// Warm both sides: connections, scripts, pools.
	saved := *dur
	*dur = time.Second
	measure(pid, grpcCall)
	measure(pid, respCall)
	*dur = saved

	var g, r []result
	var thrRatio, cpuRatio []float64
	fmt.Printf("%d callers, one call in flight each, %v per run, %d keys, fixed window\n", *callers, *dur, *keys)
	fmt.Printf("%-4s %14s %12s %14s %12s %10s %10s\n", "run", "gRPC dec/s", "gRPC µs CPU", "RESP dec/s", "RESP µs CPU", "thr ratio", "CPU ratio")
	for run := range *runs {
		var a, b result
		if run%2 == 0 {
			a, b = measure(pid, grpcCall), measure(pid, respCall)
		} else {
			b, a = measure(pid, respCall), measure(pid, grpcCall)
		}
		g, r = append(g, a), append(r, b)
		thrRatio = append(thrRatio, a.perSec/b.perSec)
		cpuRatio = append(cpuRatio, float64(a.cpuPerOp)/float64(b.cpuPerOp))
		fmt.Printf("%-4d %14.0f %12.1f %14.0f %12.1f %10.2f %10.2f\n", run+1, a.perSec, us(a.cpuPerOp), b.perSec, us(b.cpuPerOp),
			thrRatio[run], cpuRatio[run])
	}
	fmt.Printf("%-4s %14.0f %12.1f %14.0f %12.1f %10.2f %10.2f\n", "med",
		median(g, func(x result) float64 { return x.perSec }), median(g, func(x result) float64 { return us(x.cpuPerOp) }),
		median(r, func(x result) float64 { return x.perSec }), median(r, func(x result) float64 { return us(x.cpuPerOp) }),
		medianF(thrRatio), medianF(cpuRatio))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return medianF(v)
}

func medianF(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
