// Package tests drives the real sluice binary from the outside: built
// once per run into a temporary directory, started on a free loopback
// port, on the in-memory store or against a real redis-server, and talked
// to by real clients: go-redis, redis-cli, redis-py and ioredis.
package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	args := []string{"build", "-o", sluiceBin}
	if raceBuild {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/sluice")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "tests: building the sluice binary:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sluice is one running binary.
type sluice struct {
	Net   string // "tcp", or "unix" for a Unix socket
	Addr  string // host:port, or the socket's path
	Port  int    // 0 on a Unix socket
	Admin string // the admin HTTP server's address: /metrics, /healthz, /readyz
	cmd   *exec.Cmd
	logs  *syncBuffer
	done  chan error
}

// startSluice runs the binary on a free loopback port with args, waits
// until it answers, and stops it with SIGTERM when the test ends, failing
// the test if it then does not exit cleanly.
func startSluice(t *testing.T, args ...string) *sluice {
	t.Helper()
	return startSluiceIn(t, "", args...)
}

// startSluiceIn is startSluice run in dir, for paths given as a user in
// that directory gives them ("" is this one).
func startSluiceIn(t *testing.T, dir string, args ...string) *sluice {
	t.Helper()
	port := redistest.FreePort(t)
	return launch(t, dir, "tcp", fmt.Sprintf("127.0.0.1:%d", port), port, args...)
}

// startSluiceUnix is startSluice listening on a Unix socket at path.
func startSluiceUnix(t *testing.T, path string, args ...string) *sluice {
	t.Helper()
	return launch(t, "", "unix", path, 0, args...)
}

// launch runs the binary serving RESP on addr of network net.
func launch(t *testing.T, dir, network, addr string, port int, args ...string) *sluice {
	t.Helper()
	return launchUnder(t, nil, dir, network, addr, port, args...)
}

// launchUnder is launch with the binary run by the command prefix (a
// prlimit, say); nil runs it directly.
func launchUnder(t *testing.T, prefix []string, dir, network, addr string, port int, args ...string) *sluice {
	t.Helper()
	s := &sluice{Net: network, Addr: addr, Port: port, logs: &syncBuffer{}, done: make(chan error, 1)}
	listen := addr
	if network == "unix" {
		listen = "unix:" + addr
	}
	s.Admin = fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	argv := append(append(prefix[:len(prefix):len(prefix)], sluiceBin, "--listen", listen, "--admin-listen", s.Admin, "--log-level", "debug"), args...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = cleanEnv()
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(10 * time.Second)
	// The admin port is bound after the RESP one: a test that asks it
	// straight after start must find it there.
	for listening := false; ; {
		if !listening {
			if c, err := net.DialTimeout(s.Net, s.Addr, time.Second); err == nil {
				c.Close()
				listening = true
			}
		}
		if listening {
			if c, err := net.DialTimeout("tcp", s.Admin, time.Second); err == nil {
				c.Close()
				return s
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("sluice exited at start: %v\n%s", err, s.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice did not listen on %s within 10s:\n%s", s.Addr, s.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *sluice) stop(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Errorf("sluice exited with %v after SIGTERM; its log:\n%s", err, s.logs)
		}
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Errorf("sluice did not stop within 15s of SIGTERM; its log:\n%s", s.logs)
	}
}

// cleanEnv is this process's environment without SLUICE_* settings, so a
// developer's shell cannot change what a test runs.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return env
}

// backend is a store for the binary: the in-memory one, or a fresh
// redis-server through --upstream.
type backend struct {
	name string
	args func(t *testing.T) []string
}

var backends = []backend{
	{"memory", func(*testing.T) []string { return nil }},
	{"upstream", func(t *testing.T) []string {
		r := redistest.Start(t)
		return []string{"--upstream", "redis://" + r.Addr, "--upstream-timeout", decidingTimeout}
	}},
}

// decidingTimeout is the --upstream-timeout of tests that check what Redis
// decides, not how fast: with the default 100ms a loaded machine lets a
// round trip time out now and then, and the failure mode (local by
// default) then decides from the sidecar's own memory, which such a test
// reads as a wrong count. Tests of the deadline itself set their own.
const decidingTimeout = "2s"

// writePolicies writes the policies file the tests use.
func writePolicies(t *testing.T) string {
	return policiesFile(t, `policies:
  api:
    algorithm: gcra
    rate: 10
    period: 1s
    burst: 4
  uploads:
    algorithm: leaky_bucket
    rate: 2
    period: 1s
    capacity: 4
`)
}

// policiesFile writes yaml to a policies file in a temporary directory
// and returns its path, for --policies.
func policiesFile(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
