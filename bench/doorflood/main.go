// Command doorflood measures a Sluice binary's peak resident memory with
// its three doors (RESP, Envoy's gRPC rate limit service, the HTTP check)
// loaded by issue 44's hostile memory shapes, each door's alone and then
// all three at once, and checks that the process stays within the bound
// it states: Go's memory limit, which it logs at start (`go memory limit`,
// from --max-input-memory, --max-keys, --deny-cache-size and
// --http-max-conns, or from the container's limit), and 64 MiB for what
// Go does not count (stacks, the runtime's own, fragmentation), the
// allowance tests/memory_test.go gives RESP's shapes.
//
// During each shape a legitimate client on every door asks for a few
// decisions a second (RL.ALLOW, ShouldRateLimit, GET /v1/check), one at a
// time, each given -answer-within (10 s); the answers and their latency are reported, so a
// door starved by another door's flood shows. Each shape runs on a fresh
// process, so that its peak (VmHWM, from /proc) is its own.
//
//	go run ./bench/doorflood                          # builds ./cmd/sluice, 15 s a shape
//	go run ./bench/doorflood -d 15s -- --max-input-memory 64mb
//
// The shapes (package flood's clients, each reconnecting at once when
// closed):
//
//   - resp: 200 connections each holding the first 2 MiB of a 16 MB
//     argument, and 100 pipelining 2 MiB ECHOs without end, never reading;
//   - grpc: 60 connections writing PINGs, never reading, and 6 connections
//     × 16 streams of 4 MiB messages never finished;
//   - http: -http-clients connections (past --http-max-conns' default of
//     1,024) each sending a 1,000,000-byte header line never ended;
//   - all: the three at once.
//
// Everything listens on 127.0.0.1 and stops after -d a shape; the
// binary is started and stopped by this command. It exits 1 when a shape
// broke the bound or a door answered no decision during one. Linux only
// (/proc). It measures memory, not speed: the latencies are those of a
// machine the flood itself keeps busy.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/bench/flood"
	"github.com/sluice-rl/sluice/bench/procs"
)

var (
	bin         = flag.String("bin", "", "the Sluice binary to measure; empty: build ./cmd/sluice")
	shapesFlag  = flag.String("shapes", "resp,grpc,http,all", "the shapes to run, in order: resp, grpc, http, all, or some at once joined by + (grpc+http)")
	logs        = flag.String("logs", "", "keep the binary's logs in this directory, a file a shape; empty: dropped")
	duration    = flag.Duration("d", 15*time.Second, "how long each shape runs")
	rate        = flag.Int("rate", 5, "legitimate decisions a second on each door")
	httpClients = flag.Int("http-clients", 1200, "hostile HTTP check connections")
	policies    = flag.String("policies", "examples/policies.yaml", "--policies for the binary (the legitimate checks use its policy api)")
	rlsConfig   = flag.String("rls-config", "examples/ratelimit", "--rls-config for the binary (the legitimate calls use its domain shop)")
	asJSON      = flag.Bool("json", false, "print each shape's result as a line of JSON instead of text")
	// Long, since the point is whether a door answers at all, on a
	// machine the flood itself keeps busy; the flood goes on until the
	// last decision asked is answered or given up.
	answerWithin = flag.Duration("answer-within", 10*time.Second, "how long a legitimate decision is given")
)

const (
	mib = 1 << 20
	// slack is what the bound allows past Go's memory limit.
	slack = 64 * mib
)

// Door is what one door's legitimate client saw during a shape.
type Door struct {
	Door     string
	Sent     int
	Answered int            // decisions (allowed or refused) within -answer-within, the flood on
	Failures map[string]int `json:",omitempty"` // what the others got, by error
	P50, P99 time.Duration  // of the answered
	After    bool           // a decision answered once the shape ended
}

// Result is one shape's run.
type Result struct {
	Shape         string
	Args          []string
	GoMemoryLimit int64 // what the binary logged
	Bound         int64 // GoMemoryLimit + slack
	IdleRSS       int64
	PeakRSS       int64         // VmHWM at the shape's end
	EndRSS        int64         // VmRSS at the shape's end: held, not a passing peak
	CPU           time.Duration // the binary's CPU time during the shape
	FloodCPU      time.Duration // this command's: the clients', mostly the flood's
	Doors         []Door
}

// Held reports whether the shape stayed within the bound and left no door
// without an answer.
func (r Result) Held() bool {
	for _, d := range r.Doors {
		if d.Answered == 0 || !d.After {
			return false
		}
	}
	return r.PeakRSS <= r.Bound
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "sluice-doorflood-")
	if err != nil {
		log.Fatal(err)
	}
	code := run(dir)
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(dir string) int {
	binary := *bin
	if binary == "" {
		binary = filepath.Join(dir, "sluice")
		if out, err := exec.Command("go", "build", "-o", binary, "./cmd/sluice").CombinedOutput(); err != nil {
			log.Printf("go build ./cmd/sluice: %v\n%s", err, out)
			return 1
		}
	}
	var results []Result
	code := 0
	for _, shape := range strings.Split(*shapesFlag, ",") {
		r, err := measure(binary, dir, shape)
		if err != nil {
			log.Printf("shape %s: %v", shape, err)
			return 1
		}
		results = append(results, r)
		if *asJSON {
			b, _ := json.Marshal(r)
			fmt.Println(string(b))
		} else {
			printResult(os.Stdout, r)
		}
		if !r.Held() {
			code = 1
		}
	}
	if !*asJSON {
		printTable(os.Stdout, results)
	}
	return code
}

// shapes are the hostile clients of each shape, started with the doors'
// addresses.
var shapes = map[string]func(ctx context.Context, wg *sync.WaitGroup, a addrs){
	"resp-args": func(ctx context.Context, wg *sync.WaitGroup, a addrs) {
		for range 200 {
			wg.Go(func() { flood.RESPLargeArg(ctx, a.resp) })
		}
	},
	"resp-unread": func(ctx context.Context, wg *sync.WaitGroup, a addrs) {
		for range 100 {
			wg.Go(func() { flood.RESPUnread(ctx, a.resp) })
		}
	},
	"grpc": func(ctx context.Context, wg *sync.WaitGroup, a addrs) {
		for range 60 {
			wg.Go(func() { flood.GRPCPings(ctx, a.grpc) })
		}
		for range 6 {
			wg.Go(func() { flood.GRPCStreams(ctx, a.grpc, 16) })
		}
	},
	"http": func(ctx context.Context, wg *sync.WaitGroup, a addrs) {
		for range *httpClients {
			wg.Go(func() { flood.HTTPHeader(ctx, a.http, 1_000_000) })
		}
	},
}

func init() {
	shapes["resp"] = func(ctx context.Context, wg *sync.WaitGroup, a addrs) {
		shapes["resp-args"](ctx, wg, a)
		shapes["resp-unread"](ctx, wg, a)
	}
	shapes["all"] = func(ctx context.Context, wg *sync.WaitGroup, a addrs) {
		for _, s := range []string{"resp", "grpc", "http"} {
			shapes[s](ctx, wg, a)
		}
	}
}

type addrs struct{ resp, grpc, http string }

var limitLine = regexp.MustCompile(`msg="go memory limit" bytes=(\d+)`)

// measure starts the binary with its three doors, runs shape on them for
// *duration beside the legitimate clients, and stops it.
func measure(binary, dir, shape string) (Result, error) {
	var parts []func(ctx context.Context, wg *sync.WaitGroup, a addrs)
	for _, name := range strings.Split(shape, "+") {
		start, ok := shapes[name]
		if !ok {
			return Result{}, fmt.Errorf("unknown shape %q (resp, grpc, http, all, or some joined by +)", name)
		}
		parts = append(parts, start)
	}
	var a addrs
	for _, p := range []*string{&a.resp, &a.grpc, &a.http} {
		port, err := procs.FreePort()
		if err != nil {
			return Result{}, err
		}
		*p = "127.0.0.1:" + strconv.Itoa(port)
	}
	args := append([]string{"--listen", a.resp, "--admin-listen", "off", "--grpc-listen", a.grpc, "--rls-config", *rlsConfig,
		"--http-listen", a.http, "--policies", *policies, "--log-level", "info"}, flag.Args()...)
	logDir := dir
	if *logs != "" {
		logDir = *logs
	}
	logPath := filepath.Join(logDir, "sluice-"+shape+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return Result{}, err
	}
	defer logFile.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	failed := func(err error) (Result, error) {
		b, _ := os.ReadFile(logPath)
		return Result{}, fmt.Errorf("%w; its log:\n%s", err, tail(b, 20))
	}
	for _, addr := range []string{a.resp, a.grpc, a.http} {
		if err := procs.WaitListen(addr, 10*time.Second); err != nil {
			return failed(err)
		}
	}
	r := Result{Shape: shape, Args: flag.Args()}
	for deadline := time.Now().Add(5 * time.Second); r.GoMemoryLimit == 0; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		if m := limitLine.FindSubmatch(b); m != nil {
			r.GoMemoryLimit, _ = strconv.ParseInt(string(m[1]), 10, 64)
		} else if time.Now().After(deadline) {
			return failed(errors.New(`the binary logged no "go memory limit" (is GOMEMLIMIT set?)`))
		}
	}
	r.Bound = r.GoMemoryLimit + slack
	pid := cmd.Process.Pid
	time.Sleep(300 * time.Millisecond) // settled after start
	if r.IdleRSS, err = procs.Status(pid, "VmRSS"); err != nil {
		return failed(err)
	}

	clients := []*client{newRESP(a.resp), newGRPC(a.grpc), newHTTP(a.http)}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	// Each client connected and answered before the shape starts, as a
	// gateway's pooled connection is.
	for _, c := range clients {
		wctx, wcancel := context.WithTimeout(context.Background(), *answerWithin)
		err := c.decide(wctx)
		wcancel()
		if err != nil {
			return failed(fmt.Errorf("%s: a decision before the shape: %w", c.door, err))
		}
	}
	cpu0, err := procs.CPU(pid)
	if err != nil {
		return failed(err)
	}
	// The legitimate clients ask for decisions for *duration; the flood
	// goes on until the last of them is answered (or given up), so that
	// every answer counted came during the flood.
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	floodCtx, stopFlood := context.WithCancel(context.Background())
	defer stopFlood()
	var hostile, legit sync.WaitGroup
	for _, start := range parts {
		start(floodCtx, &hostile, a)
	}
	askUntil := time.Now().Add(*duration)
	doors := make([]Door, len(clients))
	for i, c := range clients {
		legit.Go(func() { doors[i] = c.probe(askUntil, time.Second/time.Duration(*rate)) })
	}
	legit.Wait()
	select {
	case <-exited:
		return failed(errors.New("the binary exited during the shape"))
	default:
	}
	if r.EndRSS, err = procs.Status(pid, "VmRSS"); err != nil {
		return failed(err)
	}
	stopFlood()
	hostile.Wait()
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	r.FloodCPU = time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	cpu1, err := procs.CPU(pid)
	if err != nil {
		return failed(err)
	}
	r.CPU = cpu1 - cpu0
	if r.PeakRSS, err = procs.Status(pid, "VmHWM"); err != nil {
		return failed(err)
	}
	for i, c := range clients {
		actx, acancel := context.WithTimeout(context.Background(), *answerWithin)
		doors[i].After = c.decide(actx) == nil
		acancel()
	}
	r.Doors = doors
	return r, nil
}

// client is one door's legitimate client.
type client struct {
	door   string
	decide func(ctx context.Context) error // one decision; nil when answered
	close  func()
}

// probe asks for a decision every interval, one at a time, until until.
func (c *client) probe(until time.Time, interval time.Duration) Door {
	d := Door{Door: c.door, Failures: map[string]int{}}
	var took []time.Duration
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		<-tick.C
		if time.Now().After(until) {
			slices.Sort(took)
			if len(took) > 0 {
				d.P50, d.P99 = took[len(took)/2], took[(len(took)*99)/100]
			}
			if len(d.Failures) == 0 {
				d.Failures = nil
			}
			return d
		}
		cctx, cancel := context.WithTimeout(context.Background(), *answerWithin)
		start := time.Now()
		err := c.decide(cctx)
		cancel()
		d.Sent++
		if err != nil {
			msg := err.Error()
			if len(msg) > 80 {
				msg = msg[:80]
			}
			d.Failures[msg]++
			continue
		}
		d.Answered++
		took = append(took, time.Since(start))
	}
}

// newRESP is an application's go-redis client, asking RL.ALLOW api: one
// connection, redialled when closed, no retries (a retry would hide a
// closed connection).
func newRESP(addr string) *client {
	rc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1,
		DialTimeout: *answerWithin, ReadTimeout: *answerWithin, WriteTimeout: *answerWithin})
	return &client{door: "resp",
		decide: func(ctx context.Context) error { return rc.Do(ctx, "RL.ALLOW", "api", "legit-resp").Err() },
		close:  func() { rc.Close() }}
}

// newGRPC is Envoy's rate limit filter, played with go-control-plane's
// generated client on one grpc-go connection.
func newGRPC(addr string) *client {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return &client{door: "grpc", decide: func(context.Context) error { return err }, close: func() {}}
	}
	rls := pb.NewRateLimitServiceClient(cc)
	req := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "legit-grpc"}}}}}
	return &client{door: "grpc",
		decide: func(ctx context.Context) error { _, err := rls.ShouldRateLimit(ctx, req); return err },
		close:  func() { cc.Close() }}
}

// newHTTP is a gateway's check (nginx's auth_request), on kept-alive
// connections: 200 and 429 are decisions, anything else is not.
func newHTTP(addr string) *client {
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	hc := &http.Client{Transport: tr}
	url := "http://" + addr + "/v1/check?policy=api&key=legit-http"
	return &client{door: "http",
		decide: func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
				return fmt.Errorf("status %s", resp.Status)
			}
			return nil
		},
		close: tr.CloseIdleConnections}
}

func printResult(w io.Writer, r Result) {
	fmt.Fprintf(w, "shape=%s args=%q idle_rss=%dMiB peak_rss=%dMiB end_rss=%dMiB go_memory_limit=%dMiB bound=%dMiB within=%t cpu=%v flood_cpu=%v\n",
		r.Shape, r.Args, r.IdleRSS/mib, r.PeakRSS/mib, r.EndRSS/mib, r.GoMemoryLimit/mib, r.Bound/mib, r.PeakRSS <= r.Bound, r.CPU.Round(10*time.Millisecond), r.FloodCPU.Round(10*time.Millisecond))
	for _, d := range r.Doors {
		fmt.Fprintf(w, "  %-4s answered %d/%d p50=%v p99=%v after=%t", d.Door, d.Answered, d.Sent,
			d.P50.Round(100*time.Microsecond), d.P99.Round(100*time.Microsecond), d.After)
		for msg, n := range d.Failures {
			fmt.Fprintf(w, " [%d× %s]", n, msg)
		}
		fmt.Fprintln(w)
	}
}

// printTable prints the results as docs/operating.md's table.
func printTable(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "\n| shape | peak RSS | RESP answered, p50 / p99 | gRPC answered, p50 / p99 | HTTP answered, p50 / p99 |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %d MiB |", r.Shape, r.PeakRSS/mib)
		for _, d := range r.Doors {
			fmt.Fprintf(w, " %d/%d, %v / %v |", d.Answered, d.Sent, d.P50.Round(100*time.Microsecond), d.P99.Round(100*time.Microsecond))
		}
		fmt.Fprintln(w)
	}
	if len(rs) > 0 {
		fmt.Fprintf(w, "\nidle %d MiB; Go's memory limit %d MiB; bound %d MiB\n", rs[0].IdleRSS/mib, rs[0].GoMemoryLimit/mib, rs[0].Bound/mib)
	}
}

// tail is b's last n lines.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
