// Command grpcflood measures the peak resident memory of a Sluice binary
// under the gRPC door's hostile shapes (issue 44): clients that write PINGs
// and never read, and clients that open streams of large messages they
// never finish. It starts the binary given, on 127.0.0.1 with the in-memory
// store, runs one shape for a bounded time (the clients are package
// flood's, which bench/doorflood runs on every door at once), and prints
// the binary's peak RSS (VmHWM, from /proc) and whether the door still
// answers.
//
//	go build -o /tmp/sluice ./cmd/sluice
//	go run ./bench/grpcflood -bin /tmp/sluice -shape pings
//	go run ./bench/grpcflood -bin /tmp/sluice -shape streams -- --max-input-memory 16mb
//
// Everything listens on 127.0.0.1; the clients stop after -d, and the
// binary with them. Linux only (/proc).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/bench/flood"
	"github.com/sluice-rl/sluice/bench/procs"
)

var (
	bin       = flag.String("bin", "", "the Sluice binary to measure (required)")
	shape     = flag.String("shape", "pings", "pings: 60 connections writing PINGs, never reading; streams: 6 connections × 16 streams of 4 MiB messages never finished")
	duration  = flag.Duration("d", 15*time.Second, "how long the shape runs")
	rlsConfig = flag.String("rls-config", "examples/ratelimit", "--rls-config for the binary")
)

func main() {
	flag.Parse()
	if *bin == "" {
		log.Fatal("-bin is required")
	}
	port, err := procs.FreePort()
	if err != nil {
		log.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "off", "--grpc-listen", addr,
		"--rls-config", *rlsConfig, "--log-level", "info"}, flag.Args()...)
	cmd := exec.Command(*bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	// The bound the binary states is its Go memory limit, which it logs
	// at start; its warnings are passed on, its other lines dropped.
	limit := make(chan int64, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			if m := limitLine.FindSubmatch(line); m != nil {
				n, _ := strconv.ParseInt(string(m[1]), 10, 64)
				limit <- n
			} else if !bytes.Contains(line, []byte("level=INFO")) {
				fmt.Fprintln(os.Stderr, string(line))
			}
		}
	}()
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := procs.WaitListen(addr, 10*time.Second); err != nil {
		log.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	pid := cmd.Process.Pid
	idle := status(pid, "VmRSS")

	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var wg sync.WaitGroup
	switch *shape {
	case "pings":
		for range 60 {
			wg.Go(func() { flood.GRPCPings(ctx, addr) })
		}
	case "streams":
		for range 6 {
			wg.Go(func() { flood.GRPCStreams(ctx, addr, 16) })
		}
	default:
		log.Fatalf("unknown -shape %q", *shape)
	}
	wg.Wait()
	peak := status(pid, "VmHWM")
	var goLimit int64
	select {
	case goLimit = <-limit:
	default: // not logged (GOMEMLIMIT set by the environment): 0
	}
	fmt.Printf("shape=%s args=%q idle_rss=%dMiB peak_rss=%dMiB answers_after=%v go_memory_limit=%dMiB\n",
		*shape, flag.Args(), idle>>20, peak>>20, answers(addr), goLimit>>20)
}

var limitLine = regexp.MustCompile(`msg="go memory limit" bytes=(\d+)`)

// answers reports whether the door answers a call once the shape ended.
func answers(addr string) bool {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "x",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	return err == nil
}

// status reads a field of /proc/PID/status, in bytes.
func status(pid int, field string) int64 {
	v, err := procs.Status(pid, field)
	if err != nil {
		log.Fatal(err)
	}
	return v
}
