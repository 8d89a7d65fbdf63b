package tests

import (
	"bufio"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// transports are the binary's two ways of serving connections: the event
// loop (the default) and a goroutine per connection.
var transports = []struct {
	name string
	args []string
}{
	{"loop", nil},
	{"goroutines", []string{"--io-loops", "0"}},
}

// cliMonitor runs `redis-cli MONITOR` against s and returns its lines as
// they come, the first being OK. redis-cli is ended with the test.
func cliMonitor(t *testing.T, s *sluice) <-chan string {
	t.Helper()
	cmd := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "MONITOR")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal("redis-cli MONITOR: ", err, " (install redis-tools: scripts/test does)")
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if first := nextLine(t, lines); first != "OK" {
		t.Fatalf("redis-cli MONITOR printed %q first, want OK", first)
	}
	return lines
}

func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("redis-cli MONITOR ended")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no MONITOR line within 10s")
	}
	return ""
}

// TestRedisCLIMonitor: `redis-cli MONITOR` shows what a go-redis client
// sends, each decision with what it got, what decided it (the store,
// then the deny cache once Redis has refused the key), on both stores
// and both transports, and why (the explanation's limit, algorithm and
// state); the monitor itself is listed by CLIENT LIST with
// flag O and is closed by CLIENT KILL.
func TestRedisCLIMonitor(t *testing.T) {
	for _, be := range backends {
		for _, tr := range transports {
			t.Run(be.name+"/"+tr.name, func(t *testing.T) {
				s := startSluice(t, append(be.args(t), tr.args...)...)
				lines := cliMonitor(t, s)
				ctx := ctxT(t)
				rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true})
				defer rdb.Close()
				// What go-redis sends on connect (HELLO, which it may send
				// before the pool's first command) comes first.
				if err := rdb.Ping(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				for !strings.HasSuffix(nextLine(t, lines), `"ping"`) {
				}
				store, then := "memory", "memory"
				if be.name == "upstream" {
					store, then = "redis", "deny_cache"
				}
				// Why, as the explanation says it: the limit, its
				// algorithm and the key's state in its terms.
				why := ` limit=gcra algorithm=gcra state="TAT now\+[0-9]+ms"`
				stamp := `^[0-9]{10}\.[0-9]{6} \[0 127\.0\.0\.1:[0-9]+\] `
				for _, step := range []struct {
					args []any
					want string
				}{
					{[]any{"RL.GCRA", "mon:1", "0", "1", "1m"}, `"RL.GCRA" "mon:1" "0" "1" "1m" -> allowed=1 remaining=0 retry_after_ms=0 path=` + store + why + `$`},
					{[]any{"RL.GCRA", "mon:1", "0", "1", "1m"}, `"RL.GCRA" "mon:1" "0" "1" "1m" -> allowed=0 remaining=0 retry_after_ms=[0-9]+ path=` + store + why + `$`},
					{[]any{"RL.GCRA", "mon:1", "0", "1", "1m"}, `"RL.GCRA" "mon:1" "0" "1" "1m" -> allowed=0 remaining=0 retry_after_ms=[0-9]+ path=` + then + why + `$`},
					{[]any{"RL.GCRA", "mon:1", "-1", "1", "1m"}, `"RL.GCRA" "mon:1" "-1" "1" "1m" -> \(error\) ERR invalid burst -1: must be between 0 and [0-9]+$`},
					{[]any{"ECHO", "a b\n"}, `"ECHO" "a b\\n"$`},
				} {
					_ = rdb.Do(ctx, step.args...).Err()
					if got := nextLine(t, lines); !regexp.MustCompile(stamp + step.want).MatchString(got) {
						t.Errorf("%v: MONITOR printed %q, want %s", step.args, got, step.want)
					}
				}

				list := redisCLI(t, s, "", "CLIENT", "LIST")
				mon := regexp.MustCompile(`(?m)^id=([0-9]+) addr=\S+ .* flags=O .* cmd=monitor `).FindStringSubmatch(list)
				if mon == nil {
					t.Fatalf("CLIENT LIST shows no monitor:\n%s", list)
				}
				if got := redisCLI(t, s, "", "CLIENT", "KILL", "ID", mon[1]); got != "1\n" {
					t.Errorf("CLIENT KILL ID %s: %q", mon[1], got)
				}
				select {
				case _, open := <-drain(lines):
					if open {
						t.Error("redis-cli MONITOR printed more after its kill")
					}
				case <-time.After(10 * time.Second):
					t.Error("redis-cli MONITOR still runs 10s after CLIENT KILL")
				}
			})
		}
	}
}

// drain passes on nothing but the end of lines.
func drain(lines <-chan string) <-chan string {
	end := make(chan string)
	go func() {
		for range lines {
		}
		close(end)
	}()
	return end
}

// TestClientListAndKill: CLIENT LIST through redis-cli and go-redis (whose
// parser reads every field), showing what each client said of itself,
// and CLIENT KILL in its old and filter forms closing go-redis
// connections, on both transports.
func TestClientListAndKill(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			s := startSluice(t, tr.args...)
			ctx := ctxT(t)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ClientName: "billing", PoolSize: 1, MaxRetries: -1})
			defer rdb.Close()
			info, err := rdb.ClientInfo(ctx).Result()
			if err != nil {
				t.Fatalf("go-redis CLIENT INFO: %v", err)
			}
			if info.Name != "billing" || info.Resp != 3 || info.LibName == "" || info.LAddr != s.Addr || info.FD < 0 || info.Flags != 0 {
				t.Errorf("go-redis's own CLIENT INFO: %+v", info)
			}

			list := redisCLI(t, s, "", "CLIENT", "LIST")
			line := regexp.MustCompile(`(?m)^id=` + strconv.FormatInt(info.ID, 10) + ` .*$`).FindString(list)
			for _, want := range []string{" addr=" + info.Addr + " ", " laddr=" + s.Addr + " ", " name=billing ", " flags=N ", " db=0 ",
				" cmd=client|info ", " user=default ", " resp=3 ", " lib-name=go-redis("} {
				if !strings.Contains(line, want) {
					t.Errorf("CLIENT LIST line of the go-redis client lacks %q:\n%s", want, list)
				}
			}
			if n := strings.Count(list, "\n"); n != 2 {
				t.Errorf("CLIENT LIST: %d lines, want go-redis's and redis-cli's own:\n%s", n, list)
			}
			if got, err := rdb.ClientList(ctx).Result(); err != nil || !strings.Contains(got, " name=billing ") {
				t.Errorf("go-redis CLIENT LIST: %q, %v", got, err)
			}

			// The filter form answers a count and closes the connection
			// go-redis holds: its pool finds it closed and dials anew.
			admin := redis.NewClient(&redis.Options{Addr: s.Addr})
			killed, err := admin.ClientKillByFilter(ctx, "ID", strconv.FormatInt(info.ID, 10)).Result()
			admin.Close()
			if err != nil || killed != 1 {
				t.Errorf("CLIENT KILL ID %d: %d, %v", info.ID, killed, err)
			}
			info = reconnected(t, rdb, info)

			// The old form names an address: OK, then no such client.
			if got := redisCLI(t, s, "", "CLIENT", "KILL", info.Addr); got != "OK\n" {
				t.Errorf("redis-cli CLIENT KILL %s: %q", info.Addr, got)
			}
			if got := redisCLI(t, s, "", "CLIENT", "KILL", info.Addr); got != "ERR No such client\n\n" && got != "ERR No such client\n" {
				t.Errorf("redis-cli CLIENT KILL of a closed address: %q", got)
			}
			reconnected(t, rdb, info)

			// TYPE normal closes every connection but the caller's; with
			// SKIPME no the caller's too, once its reply is out.
			if got := redisCLI(t, s, "", "CLIENT", "KILL", "TYPE", "normal"); got != "1\n" {
				t.Errorf("CLIENT KILL TYPE normal: %q; want 1, go-redis's connection and not redis-cli's own", got)
			}
			if got := redisCLI(t, s, "", "CLIENT", "KILL", "LADDR", s.Addr, "SKIPME", "no"); got != "1\n" {
				t.Errorf("CLIENT KILL LADDR … SKIPME no, redis-cli alone connected: %q; want 1, itself", got)
			}
		})
	}
}

// reconnected checks that go-redis's connection described by was is
// gone: the pool's next command runs on a new one, which it describes.
func reconnected(t *testing.T, rdb *redis.Client, was *redis.ClientInfo) *redis.ClientInfo {
	t.Helper()
	var now *redis.ClientInfo
	var err error
	for range 3 { // a command may meet the closed connection first
		if now, err = rdb.ClientInfo(ctxT(t)).Result(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("go-redis after its connection was killed: %v", err)
	}
	if now.ID == was.ID {
		t.Errorf("go-redis still talks on connection %d, which was killed", was.ID)
	}
	return now
}
