package tests

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// socketDir is a short directory for Unix sockets, whose paths may not
// be longer than 107 bytes: t.TempDir's, named after the test, can be.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// --listen unix:PATH serves RESP on a Unix socket, to go-redis and
// redis-cli as they connect to Redis's own, through the event loop and a
// goroutine per connection alike; decisions reach the upstream Redis as
// over TCP. The socket takes --listen-perm and is gone once Sluice stops.
func TestUnixSocket(t *testing.T) {
	r := redistest.Start(t)
	for _, loops := range []string{"1", "0"} {
		t.Run("io-loops="+loops, func(t *testing.T) {
			path := filepath.Join(socketDir(t), "sluice.sock")
			s := startSluiceUnix(t, path, "--upstream", "redis://"+r.Addr, "--io-loops", loops, "--listen-perm", "600")
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
				t.Errorf("the socket's mode is %v, want a socket with -rw-------", fi.Mode())
			}

			ctx := ctxT(t)
			rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: path})
			defer rdb.Close()
			key := "unix:" + loops
			for i := range 6 {
				res, err := rdb.Do(ctx, "CL.THROTTLE", key, "4", "1", "60").Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				limited := int64(0) // CL.THROTTLE's first field: 0 allowed, 1 limited
				if i == 5 {
					limited = 1
				}
				if res[0] != limited {
					t.Errorf("request %d: %v (burst 4: the first five are allowed, the sixth refused)", i+1, res)
				}
			}
			// The count is the upstream's: a TCP client of the same
			// upstream sees it too.
			up := redis.NewClient(&redis.Options{Addr: r.Addr})
			defer up.Close()
			if n, err := up.Keys(ctx, "sluice:*"+key+"*").Result(); err != nil || len(n) != 1 {
				t.Errorf("upstream keys for %s: %v, %v", key, n, err)
			}
			list, err := rdb.ClientList(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := "addr=" + path + ":0 laddr=" + path + ":0"; !strings.Contains(list, want) {
				t.Errorf("CLIENT LIST = %q, want %q as Redis shows a Unix socket's client", list, want)
			}

			// A MONITOR line names a socket's client as Redis does.
			mon, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer mon.Close()
			_ = mon.SetDeadline(time.Now().Add(10 * time.Second))
			monRd := bufio.NewReader(mon)
			if _, err := mon.Write([]byte("MONITOR\r\n")); err != nil {
				t.Fatal(err)
			}
			if line, err := monRd.ReadString('\n'); err != nil || line != "+OK\r\n" {
				t.Fatalf("MONITOR: %q, %v", line, err)
			}
			if err := rdb.Echo(ctx, "seen").Err(); err != nil {
				t.Fatal(err)
			}
			if line, err := monRd.ReadString('\n'); err != nil || !strings.Contains(line, " [0 unix:"+path+`] "echo" "seen"`) {
				t.Errorf("MONITOR line %q, %v; want the client as [0 unix:%s]", line, err, path)
			}

			out, err := exec.Command("redis-cli", "-s", path, "RL.GCRA", key+":cli", "2", "10", "1m").CombinedOutput()
			if err != nil || string(out) != "1\n3\n2\n0\n6000\n" {
				t.Errorf("redis-cli -s: %q, %v", out, err)
			}

			s.stop(t)
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("the socket is still there once Sluice stopped: %v", err)
			}
		})
	}
}

// A socket file that no process serves, as a killed sidecar leaves, is
// replaced; one that a live process serves is not taken over.
func TestUnixSocketLeftBehind(t *testing.T) {
	dir := socketDir(t)
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(stale); err != nil {
		t.Fatalf("the stale socket should be left: %v", err)
	}
	s := startSluiceUnix(t, stale)
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: s.Addr})
	defer rdb.Close()
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Errorf("PING over the replaced socket: %v", err)
	}

	live := filepath.Join(dir, "live.sock")
	other, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var logs bytes.Buffer
	cmd := exec.Command(sluiceBin, "--listen", "unix:"+live, "--admin-listen", "off")
	cmd.Env, cmd.Stdout, cmd.Stderr = cleanEnv(), &logs, &logs
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(logs.String(), "another process serves this socket") {
			t.Errorf("exit %d (%v), log %q; want 1 and the socket named as in use", code, err, logs.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		t.Fatalf("sluice started on a socket another process serves:\n%s", logs.String())
	}
	if _, err := os.Lstat(live); err != nil {
		t.Errorf("the live process's socket was removed: %v", err)
	}
}
