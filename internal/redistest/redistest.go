// Package redistest starts real redis-server processes for tests: each on a
// free loopback port, in its own temporary directory, stopped when the test
// ends. A missing redis-server fails the test with a clear message rather
// than skipping it, so a machine without Redis can never pass by accident.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	Dir  string
	cmd  *exec.Cmd
	// exited is closed once cmd has been waited for: alive reads it rather
	// than cmd.ProcessState, which Wait writes on another goroutine.
	exited chan struct{}
	argv   []string    // the command line
	conf   string      // configuration given on standard input, for "redis-server -"
	tls    *tls.Config // set: the server speaks TLS only, and Do dials with this
	tb     testing.TB
}

// Start runs a redis-server with the given extra configuration directives
// ("appendonly no", "cluster-enabled yes", …) and waits until it answers
// PING. It is stopped (SIGKILL) in tb.Cleanup.
func Start(tb testing.TB, directives ...string) *Server {
	tb.Helper()
	return StartAt(tb, FreePort(tb), directives...)
}

// StartAt is Start on a given port: for a test that points a client at an
// address before any server listens there.
func StartAt(tb testing.TB, port int, directives ...string) *Server {
	tb.Helper()
	return startAt(tb, port, nil, directives)
}

// StartTLS runs a redis-server that speaks only TLS on its port, with the
// server certificate, key and CA in the given PEM files, not asking clients
// for certificates. Do (and the PING that waits for start-up) dials with
// client, which must trust the CA.
func StartTLS(tb testing.TB, client *tls.Config, certFile, keyFile, caFile string, directives ...string) *Server {
	tb.Helper()
	port := FreePort(tb)
	d := append([]string{"port 0", "tls-port " + strconv.Itoa(port), "tls-cert-file " + certFile,
		"tls-key-file " + keyFile, "tls-ca-cert-file " + caFile, "tls-auth-clients no"}, directives...)
	return startAt(tb, port, client, d)
}

func startAt(tb testing.TB, port int, client *tls.Config, directives []string) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server not found in PATH: install it (apt-get install -y redis-server redis-tools) or run scripts/test, which does")
	}
	s := &Server{Dir: tb.TempDir(), tb: tb, Port: port, tls: client}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	s.argv = []string{bin, "-"}
	s.conf = s.config(directives)
	s.start()
	tb.Cleanup(s.Kill)
	return s
}

func (s *Server) config(directives []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\nprotected-mode no\n", s.Port, s.Dir)
	for _, d := range directives {
		b.WriteString(d + "\n")
	}
	return b.String()
}

func (s *Server) start() {
	s.tb.Helper()
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Dir = s.Dir
	cmd.Stdin = strings.NewReader(s.conf)
	logf, err := os.Create(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("redistest: start redis-server: %v", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	s.exited = exited
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Do("PING"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.Kill() // it may be running but unreachable: leave no server behind
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			s.tb.Fatalf("redistest: redis-server on %s did not answer PING within 10s; its log:\n%s", s.Addr, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		for i := 0; i < 500 && s.alive(); i++ {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

func (s *Server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Restart starts the server again on the same port and directory, after Kill.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	s.start()
}

// Signal sends sig to the server, e.g. SIGSTOP and SIGCONT to pause it.
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Do sends one command over a fresh connection and returns the reply as
// text (a simple RESP2 reader: enough for setup and inspection).
func (s *Server) Do(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var c net.Conn
	var err error
	if s.tls != nil {
		d := tls.Dialer{Config: s.tls}
		c, err = d.DialContext(ctx, "tcp", s.Addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", s.Addr)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: unexpected reply %q", line)
}

// FreePort returns a loopback TCP port that was free a moment ago.
//
// It is picked below the kernel's ephemeral range (32768 and up on Linux),
// from which outgoing connections take their local ports: a port the
// kernel hands out, closed and given to a test, can be taken by a client's
// connection before the test's server binds it, and the server then fails
// with "address already in use". Below the range only another listener
// can take it, and this process never hands a port out twice. Ports stay
// under 22768 so that a Cluster node's bus port (port + 10000) is below
// the range too, and that port must be free as well.
func FreePort(tb testing.TB) int {
	tb.Helper()
	for range 1000 {
		port := portsFrom + rand.IntN(portsTo-portsFrom)
		if _, taken := handedOut.LoadOrStore(port, true); taken {
			continue
		}
		if !free(port) || !free(port+10000) {
			continue
		}
		return port
	}
	tb.Fatalf("redistest: no free port in [%d, %d) after 1000 tries", portsFrom, portsTo)
	return 0
}

// free tells whether a loopback port can be listened on now.
func free(port int) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// The range FreePort picks from, and the ports it has handed out.
const portsFrom, portsTo = 15000, 22768

var handedOut sync.Map // int → true
