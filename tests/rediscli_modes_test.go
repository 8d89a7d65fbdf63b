package tests

import (
	"bytes"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// underPTY runs redis-cli against s on a pseudo-terminal, as a user at a
// terminal runs it: some modes write line by line only to a terminal, and
// run until interrupted. It reads what redis-cli prints until done says
// it has seen enough, or for at most limit, then ends redis-cli (and the
// script(1) that holds its terminal) and returns the output, carriage
// returns and terminal escapes removed.
func underPTY(t *testing.T, s *sluice, limit time.Duration, done func(string) bool, args ...string) string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found in PATH: install redis-tools (scripts/test does)")
	}
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatal("script(1) not found in PATH: install bsdutils (util-linux), which gives redis-cli a terminal")
	}
	line := []string{cli, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}
	for _, a := range args {
		line = append(line, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	cmd := exec.Command(script, "-qefc", strings.Join(line, " "), "/dev/null")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // redis-cli with it, ended as one
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	clean := func() string {
		return strings.ReplaceAll(regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`).ReplaceAllString(out.String(), ""), "\r", "")
	}
	for deadline := time.Now().Add(limit); time.Now().Before(deadline) && !done(clean()); {
		select {
		case <-exited:
			return clean()
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	return clean()
}

// statLine is one line of figures from redis-cli --stat.
var statLine = regexp.MustCompile(`(?m)^(\S+) +(\S+) +(\S+) +(\S+) +(\S+) \(\+(\S+)\) +(\S+) *$`)

// TestRedisCLIModes: the modes of redis-cli a user debugging Sluice
// reaches for, with the real redis-cli: --stat shows the keys this
// sidecar holds, its heap and no blocked clients; --latency measures;
// --bigkeys and --memkeys say plainly why they cannot run; DBSIZE and
// INFO keyspace count the in-memory store's keys, none while an upstream
// Redis holds the counts.
func TestRedisCLIModes(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			s := startSluice(t, be.args(t)...)
			for _, k := range []string{"a", "b", "c"} {
				if got := redisCLI(t, s, "", "RL.GCRA", "modes:"+k, "5", "10", "1m"); !strings.HasPrefix(got, "1\n") {
					t.Fatalf("RL.GCRA modes:%s: %q", k, got)
				}
			}
			keys := "3"
			if be.name == "upstream" {
				keys = "0"
			}

			if got := redisCLI(t, s, "", "DBSIZE"); got != keys+"\n" {
				t.Errorf("DBSIZE: %q, want %s", got, keys)
			}
			info := redisCLI(t, s, "", "INFO")
			for _, want := range []string{"\r\nblocked_clients:0\r\n", "\r\n# Keyspace\r\n", "\r\nmem_allocator:go\r\n"} {
				if !strings.Contains(info, want) {
					t.Errorf("INFO lacks %q:\n%s", want, info)
				}
			}
			if m := regexp.MustCompile(`\r\nused_memory:([0-9]+)\r\n`).FindStringSubmatch(info); m == nil || m[1] == "0" {
				t.Errorf("INFO has no used_memory above 0:\n%s", info)
			}
			wantKeyspace := "# Keyspace\r\n"
			if keys != "0" {
				wantKeyspace += "db0:keys=3,expires=3,avg_ttl=0\r\n"
			}
			if got := redisCLI(t, s, "", "INFO", "keyspace"); got != wantKeyspace && got != wantKeyspace+"\n" {
				t.Errorf("INFO keyspace: %q, want %q", got, wantKeyspace)
			}

			stat := underPTY(t, s, 10*time.Second, func(out string) bool { return len(statLine.FindAllString(out, -1)) >= 3 },
				"--stat", "-i", "0.1")
			lines := statLine.FindAllStringSubmatch(stat, -1)
			if !strings.Contains(stat, "keys       mem      clients blocked requests") || len(lines) < 3 {
				t.Fatalf("redis-cli --stat printed:\n%s", stat)
			}
			for _, f := range lines[1:] { // the header's own words match too
				if f[1] != keys || !regexp.MustCompile(`^([0-9]+B|[0-9]+\.[0-9]{2}[KMG])$`).MatchString(f[2]) || f[3] != "1" || f[4] != "0" {
					t.Errorf("redis-cli --stat: keys %s, mem %s, clients %s, blocked %s; want %s keys, a size, 1 client, 0 blocked:\n%s",
						f[1], f[2], f[3], f[4], keys, stat)
					break
				}
			}
			t.Logf("redis-cli --stat:\n%s", stat)

			// --latency: at a terminal it samples until interrupted; else
			// it prints one summary (min max avg samples) and exits.
			lat := underPTY(t, s, 10*time.Second, func(out string) bool { return strings.Contains(out, "samples)") }, "--latency")
			if !regexp.MustCompile(`min: [0-9]+, max: [0-9]+, avg: [0-9.]+ \([0-9]+ samples\)`).MatchString(lat) {
				t.Errorf("redis-cli --latency at a terminal printed %q", lat)
			}
			if got := redisCLI(t, s, "", "--latency", "-i", "0.2"); !regexp.MustCompile(`^[0-9]+ [0-9]+ [0-9.]+ [0-9]+\n$`).MatchString(got) {
				t.Errorf("redis-cli --latency, no terminal: %q", got)
			}

			for _, mode := range []string{"--bigkeys", "--memkeys"} {
				cmd := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), mode)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				if err == nil || !strings.Contains(out.String(), "SCAN error: "+scanRefusal) {
					t.Errorf("redis-cli %s: %v, printed:\n%s", mode, err, out.String())
				}
			}
		})
	}
}

// scanRefusal is what SCAN answers, and so what --bigkeys and --memkeys
// print.
const scanRefusal = "ERR SCAN is not supported: Sluice's keys are rate-limit states, not data to browse; DBSIZE and INFO keyspace count them"
