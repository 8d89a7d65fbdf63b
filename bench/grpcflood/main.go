// Command grpcflood measures the peak resident memory of a Sluice binary
// under the gRPC door's hostile shapes (issue 44): clients that write PINGs
// and never read, and clients that open streams of large messages they
// never finish. It starts the binary given, on 127.0.0.1 with the in-memory
// store, runs one shape for a bounded time, and prints the binary's peak
// RSS (VmHWM, from /proc) and whether the door still answers.
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
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
		"--rls-config", *rlsConfig, "--log-level", "warn"}, flag.Args()...)
	cmd := exec.Command(*bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
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
			wg.Go(func() { pings(ctx, addr) })
		}
	case "streams":
		for range 6 {
			wg.Go(func() { streams(ctx, addr, 16) })
		}
	default:
		log.Fatalf("unknown -shape %q", *shape)
	}
	wg.Wait()
	peak := status(pid, "VmHWM")
	fmt.Printf("shape=%s args=%q idle_rss=%dMiB peak_rss=%dMiB answers_after=%v\n",
		*shape, flag.Args(), idle>>20, peak>>20, answers(addr))
}

// dial opens a raw HTTP/2 connection: the preface and SETTINGS sent.
func dial(ctx context.Context, addr string) (net.Conn, *http2.Framer, bool) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, false
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10) // a client that reads nothing
	}
	fr := http2.NewFramer(nc, nc)
	nc.Write([]byte(http2.ClientPreface))
	fr.WriteSettings()
	return nc, fr, true
}

// pings writes PINGs and never reads, until ctx ends or the server
// closes the connection (then it reconnects, as a hostile client would).
func pings(ctx context.Context, addr string) {
	var buf bytes.Buffer
	w := http2.NewFramer(&buf, nil)
	for range 1000 {
		w.WritePing(false, [8]byte{1, 2, 3})
	}
	batch := buf.Bytes()
	for ctx.Err() == nil {
		nc, _, ok := dial(ctx, addr)
		if !ok {
			return
		}
		for ctx.Err() == nil {
			nc.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := nc.Write(batch); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					continue
				}
				break
			}
		}
		nc.Close()
	}
}

// streams opens n streams of 4 MiB messages on one connection, sends all
// but the last bytes of each, and holds them, reconnecting if closed.
func streams(ctx context.Context, addr string, n int) {
	var hbuf bytes.Buffer
	henc := hpack.NewEncoder(&hbuf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	chunk := make([]byte, 16384)
	for ctx.Err() == nil {
		nc, fr, ok := dial(ctx, addr)
		if !ok {
			return
		}
		go func() { <-ctx.Done(); nc.Close() }()
		nc.SetWriteDeadline(time.Now().Add(*duration))
		fr.WriteWindowUpdate(0, 1<<30)
		failed := false
		for i := range n {
			id := uint32(2*i + 1)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true})
			prefix := binary.BigEndian.AppendUint32([]byte{0}, 4<<20-5)
			if err := fr.WriteData(id, false, prefix); err != nil {
				failed = true
				break
			}
			for sent := 5; sent < 4<<20-1024; sent += len(chunk) {
				if err := fr.WriteData(id, false, chunk); err != nil {
					failed = true
					break
				}
			}
			if failed {
				break
			}
		}
		if !failed {
			<-ctx.Done() // held
		}
		nc.Close()
	}
}

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
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), ":")
		if ok && name == field {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	log.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}
