package tests

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// redisCLI runs redis-cli against s and returns what it printed.
func redisCLI(t *testing.T, s *sluice, stdin string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found in PATH: install redis-tools (scripts/test does)")
	}
	cmd := exec.Command(bin, append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // redis-cli exits 1 after an error reply, which it follows with a blank line
	return out.String()
}

// Every command through redis-cli, as a user would type it. Windowed
// algorithms' reset times depend on the wall clock, so for them only the
// leading lines are compared.
func TestRedisCLI(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			s := startSluice(t, append(be.args(t), "--policies", writePolicies(t))...)
			for _, tc := range []struct {
				args   string
				want   string
				prefix bool
			}{
				{"RL.FIXED cli:f 10 1m", "1\n10\n9\n0\n", true},
				{"RL.SLIDING cli:s 10 1m 3", "1\n10\n7\n0\n", true},
				{"RL.LOG cli:l 10 1m 10", "1\n10\n0\n0\n60000\n", false},
				{"RL.LOG cli:l 10 1m", "0\n10\n0\n", true},
				{"RL.TOKEN cli:t 10 1 1s", "1\n10\n9\n0\n1000\n", false},
				{"RL.TOKEN cli:t 10 1 1s 1 PEEK", "1\n10\n8\n0\n", true},
				{"RL.LEAKY cli:q 2 1 1s", "1\n2\n1\n0\n1000\n0\n", false},
				{"RL.GCRA cli:g 0 1 1s", "1\n1\n0\n0\n1000\n", false},
				{"RL.ALLOW api cli:a", "1\n5\n4\n0\n100\n", false},
				{"RL.RESET cli:f cli:s", "2\n", false},
				{"CL.THROTTLE cli:user123 15 30 60 1", "0\n16\n15\n-1\n2\n", false},
				{"RL.FIXED cli:f abc 1s", "ERR invalid limit 'abc': must be an integer\n\n", false},
				{"RL.GCRA cli:g 1 1", "ERR wrong number of arguments for 'rl.gcra' command\n\n", false},
				{"FOO bar", "ERR unknown command 'FOO', with args beginning with: 'bar' \n\n", false},
				{"PING", "PONG\n", false},
				{"PING hi", "hi\n", false},
				{"ECHO hello", "hello\n", false},
				{"HELLO 2", "server\nsluice\nversion\n", true},
				{"SELECT 0", "OK\n", false},
				{"SELECT 1", "ERR DB index is out of range\n\n", false},
				{"RL.TRACE OFF", "OK\n", false},
				{"CLIENT ID", "", true},
				{"CLIENT SETINFO lib-name cli", "OK\n", false},
				{"CLIENT SETNAME me", "OK\n", false},
				{"CLIENT GETNAME", "\n", false},
				{"COMMAND COUNT", "32\n", false},
				{"COMMAND INFO cl.throttle", "cl.throttle\n-5\nwrite\nfast\n1\n1\n1\n@sluice\n", true},
				{"COMMAND DOCS rl.gcra", "rl.gcra\nsummary\n", true},
				{"COMMAND", "rl.fixed\n-4\n", true},
				{"INFO server", "# Server\r\nredis_version:7.0.0\r\nsluice_version:", true},
				{"AUTH pw", "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\n\n", false},
				{"RESET", "RESET\n", false},
				{"QUIT", "OK\n", false},
			} {
				got := redisCLI(t, s, "", strings.Fields(tc.args)...)
				if tc.prefix && !strings.HasPrefix(got, tc.want) || !tc.prefix && got != tc.want {
					t.Errorf("redis-cli %s:\n got %q\nwant %q", tc.args, got, tc.want)
				}
			}
			// RESP3: the decision is the array too.
			if got := redisCLI(t, s, "", "-3", "RL.LEAKY", "cli3:q", "5", "1", "1s"); got != "1\n5\n4\n0\n1000\n0\n" {
				t.Errorf("redis-cli -3 RL.LEAKY: %q", got)
			}
			// A session on stdin shares one connection: the name sticks.
			// The refusal's retry and reset count down from 60000 ms by
			// however long the two requests were apart, which is at most
			// how long the whole session took here.
			start := time.Now()
			got := redisCLI(t, s, "CLIENT SETNAME me\nCLIENT GETNAME\nRL.GCRA cli:session 0 1 1m\nRL.GCRA cli:session 0 1 1m\n")
			eaten := time.Since(start)
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			if len(lines) != 12 || strings.Join(lines[:10], "\n") != "OK\nme\n1\n1\n0\n0\n60000\n0\n1\n0" ||
				!countsDownFromMinute(lines[10], eaten) || !countsDownFromMinute(lines[11], eaten) {
				t.Errorf("redis-cli session of %v: %q", eaten, got)
			}
		})
	}
}

// countsDownFromMinute: a count-down from 60000 ms that at most eaten has
// eaten (and a millisecond of rounding). The bound is what the test saw
// pass, not a fixed margin that a loaded machine can outlast.
func countsDownFromMinute(ms string, eaten time.Duration) bool {
	n, err := strconv.Atoi(ms)
	return err == nil && int64(n) >= 60000-eaten.Milliseconds()-1 && n <= 60000
}

func TestRedisCLIAuth(t *testing.T) {
	s := startSluice(t, "--requirepass", "s3cret")
	if got := redisCLI(t, s, "", "PING"); got != "NOAUTH Authentication required.\n\n" {
		t.Errorf("without -a: %q", got)
	}
	if got := redisCLI(t, s, "", "--no-auth-warning", "-a", "s3cret", "RL.GCRA", "k", "0", "1", "1s"); got != "1\n1\n0\n0\n1000\n" {
		t.Errorf("with -a: %q", got)
	}
	if got := redisCLI(t, s, "", "--no-auth-warning", "-a", "wrong", "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Errorf("with a wrong -a: %q", got)
	}
	if got := redisCLI(t, s, "", "--no-auth-warning", "--user", "default", "--pass", "s3cret", "-3", "HELLO"); !strings.HasPrefix(got, "server sluice\n") {
		t.Errorf("--user/--pass with HELLO: %q", got)
	}
}

// redis-cli --pipe: 10,000 commands, a tenth of them bad, in one stream.
func TestRedisCLIPipe(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			s := startSluice(t, be.args(t)...)
			var in strings.Builder
			for i := range 10_000 {
				args := []string{"RL.FIXED", fmt.Sprint("pipe:", i%100), "1000", "1h"}
				if i%10 == 0 {
					args[2] = "x"
				}
				fmt.Fprintf(&in, "*%d\r\n", len(args))
				for _, a := range args {
					fmt.Fprintf(&in, "$%d\r\n%s\r\n", len(a), a)
				}
			}
			got := redisCLI(t, s, in.String(), "--pipe")
			if !strings.Contains(got, "errors: 1000, replies: 10000") {
				t.Errorf("redis-cli --pipe: %q", got)
			}
			// The counts landed: pipe:1 took 100, pipe:0 got only errors.
			if got := redisCLI(t, s, "", "RL.FIXED", "pipe:1", "1000", "1h", "0"); !strings.HasPrefix(got, "1\n1000\n900\n") {
				t.Errorf("after --pipe, pipe:1: %q", got)
			}
			if got := redisCLI(t, s, "", "RL.FIXED", "pipe:0", "1000", "1h", "0"); !strings.HasPrefix(got, "1\n1000\n1000\n") {
				t.Errorf("after --pipe, pipe:0: %q", got)
			}
		})
	}
}
