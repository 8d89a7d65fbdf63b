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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/bench/procs"
)

var (
	runs    = flag.Int("runs", 5, "runs of each side; medians are reported")
	dur     = flag.Duration("d", 4*time.Second, "length of one run of one side")
	callers = flag.Int("c", 50, "concurrent callers, each with one call in flight")
	keys    = flag.Int("keys", 1000, "distinct keys, spread over the callers")
)

// ps are the processes the benchmark started; fatalf stops them, since
// os.Exit runs no deferred function.
var ps procs.Set

func fatalf(format string, args ...any) { ps.Fatalf(format, args...) }

// measure runs one side for *dur: the callers calling once each in turn.
func measure(pid int, call func(ctx context.Context, caller, i int) error) procs.Result {
	return ps.Measure(pid, *callers, *dur, func(c, i int) error { return call(context.Background(), c, i) })
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "sluice-doors-bench-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(dir)
	ps.Dir = dir
	defer ps.Stop()
	start := func(name string, args ...string) *exec.Cmd { return ps.Start(nil, name, args...) }

	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/sluice").CombinedOutput(); err != nil {
		fatalf("go build: %v\n%s", err, out)
	}
	redisAddr := fmt.Sprintf("127.0.0.1:%d", ps.FreePort())
	start("redis-server", "--bind", "127.0.0.1", "--port", strings.Split(redisAddr, ":")[1], "--save", "", "--appendonly", "no")
	ps.WaitListen(redisAddr, 15*time.Second)

	rlsDir := filepath.Join(dir, "rls")
	if err := os.Mkdir(rlsDir, 0o755); err != nil {
		fatalf("%v", err)
	}
	const yaml = "domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n"
	if err := os.WriteFile(filepath.Join(rlsDir, "bench.yaml"), []byte(yaml), 0o644); err != nil {
		fatalf("%v", err)
	}
	respAddr := fmt.Sprintf("127.0.0.1:%d", ps.FreePort())
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", ps.FreePort())
	sl := start(bin, "--listen", respAddr, "--grpc-listen", grpcAddr, "--rls-config", rlsDir,
		"--upstream", "redis://"+redisAddr, "--admin-listen", "off", "--log-level", "warn")
	ps.WaitListen(respAddr, 15*time.Second)
	ps.WaitListen(grpcAddr, 15*time.Second)
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

	var g, r []procs.Result
	var thrRatio, cpuRatio []float64
	fmt.Printf("%d callers, one call in flight each, %v per run, %d keys, fixed window\n", *callers, *dur, *keys)
	fmt.Printf("%-4s %14s %12s %14s %12s %10s %10s\n", "run", "gRPC dec/s", "gRPC µs CPU", "RESP dec/s", "RESP µs CPU", "thr ratio", "CPU ratio")
	for run := range *runs {
		var a, b procs.Result
		if run%2 == 0 {
			a, b = measure(pid, grpcCall), measure(pid, respCall)
		} else {
			b, a = measure(pid, respCall), measure(pid, grpcCall)
		}
		g, r = append(g, a), append(r, b)
		thrRatio = append(thrRatio, a.PerSec/b.PerSec)
		cpuRatio = append(cpuRatio, float64(a.CPUPerOp)/float64(b.CPUPerOp))
		fmt.Printf("%-4d %14.0f %12.1f %14.0f %12.1f %10.2f %10.2f\n", run+1, a.PerSec, us(a.CPUPerOp), b.PerSec, us(b.CPUPerOp),
			thrRatio[run], cpuRatio[run])
	}
	gThr, gCPU := procs.Medians(g)
	rThr, rCPU := procs.Medians(r)
	fmt.Printf("%-4s %14.0f %12.1f %14.0f %12.1f %10.2f %10.2f\n", "med",
		gThr, us(gCPU), rThr, us(rCPU),
		medianF(thrRatio), medianF(cpuRatio))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func medianF(v []float64) float64 { return procs.Median(v) }
