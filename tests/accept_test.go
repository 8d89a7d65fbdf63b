package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// A listener out of file descriptors stops no door and no process (issue
// 44 item 1: 700 idle connections to the gRPC door of a sidecar limited
// to 512 files ended it, RESP and all, with "accept4: too many open
// files"). Under a small RLIMIT_NOFILE each door in turn is flooded with
// idle connections until its accepts fail; the sidecar must stay up, a
// RESP connection opened before must still be answered, and once the
// flood is gone every door must accept and answer again.
func TestAcceptPastFileLimit(t *testing.T) {
	const files = 128 // the sidecar's descriptors, listeners and loops included
	const flood = 2 * files
	for _, door := range []string{"resp", "grpc own", "grpc grpc-go", "http check", "admin", "rls http"} {
		t.Run(door, func(t *testing.T) {
			grpcAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
			httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
			rlsHTTP := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
			transport := "own"
			if door == "grpc grpc-go" {
				transport = "grpc-go"
			}
			port := redistest.FreePort(t)
			s := launchUnder(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", files, files)},
				"", "tcp", fmt.Sprintf("127.0.0.1:%d", port), port,
				"--grpc-listen", grpcAddr, "--grpc-transport", transport, "--rls-config", writeRLS(t, map[string]string{"config.yaml": acceptRLS}),
				"--http-listen", httpAddr, "--policies", writePolicies(t), "--rls-http-listen", rlsHTTP, "--io-loops", "1")
			addrs := map[string]string{"resp": s.Addr, "grpc own": grpcAddr, "grpc grpc-go": grpcAddr,
				"http check": httpAddr, "admin": s.Admin, "rls http": rlsHTTP}
			for _, a := range addrs {
				waitAccepting(t, a, s)
			}

			held, err := net.Dial("tcp", s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			heldR := bufio.NewReader(held)
			respPing(t, held, heldR)

			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range flood {
				c, err := net.DialTimeout("tcp", addrs[door], 2*time.Second)
				if err != nil {
					break // the listen backlog is full: the flood has done its work
				}
				conns = append(conns, c)
			}
			// The RESP door accepts with a descriptor to spare and then fails
			// to give the connection to an event loop (it needs a second
			// one), which closes it: out of files either way.
			waitFor(t, 20*time.Second, func() bool {
				l := s.logs.String()
				return strings.Contains(l, "accept failed") || strings.Contains(l, "connection not adopted")
			}, s.logs)
			select {
			case err := <-s.done:
				s.done <- err
				t.Fatalf("sluice exited while its %s door was out of descriptors: %v\n%s", door, err, s.logs)
			default:
			}
			respPing(t, held, heldR) // the other connections are still served

			for _, c := range conns {
				c.Close()
			}
			conns = nil
			if strings.Contains(s.logs.String(), "accept failed") {
				waitFor(t, 20*time.Second, func() bool { return strings.Contains(s.logs.String(), "accepting connections again") }, s.logs)
			}
			// The descriptors come back as the server reads the flood's
			// ends, which may be after a first new connection was taken
			// and closed for want of one: wait for an answer, bounded.
			waitFor(t, 10*time.Second, func() bool { return pingOnce(s.Addr) == nil }, s.logs)
			rc, _ := rlsClient(t, grpcAddr)
			checkStatuses(t, ask(t, rc, "accept", 1, desc("k", "v")), rlOK, st{rlOK, 100, rlHour, "", 99})
			for _, u := range []string{"http://" + httpAddr + "/v1/check?policy=api&key=k", "http://" + s.Admin + "/healthz", "http://" + rlsHTTP + "/healthcheck"} {
				resp, err := http.Get(u)
				if err != nil {
					t.Fatalf("%s after the flood: %v", u, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s after the flood: %s", u, resp.Status)
				}
			}
		})
	}
}

const acceptRLS = `domain: accept
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// waitAccepting waits until addr takes a connection.
func waitAccepting(t *testing.T, addr string, s *sluice) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}, s.logs)
}

// respPing sends PING on c and wants +PONG within 5 s.
// pingOnce opens a connection to addr and asks it one PING.
func pingOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "+PONG\r\n" {
		err = fmt.Errorf("PING answered %q", line)
	}
	return err
}

func respPing(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("PING: %v", err)
	}
	line, err := r.ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING answered %q, %v", line, err)
	}
}
