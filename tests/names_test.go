package tests

import (
	"strconv"
	"strings"
	"testing"
)

// An empty or unknown policy name, typed with redis-cli against the
// binary, is the same error for every command that takes a policy, and
// never reaches the inline key of that name (issue 28 item 2: RL.RESET
// POLICY "" victim answered 1 and reset the inline key victim).
func TestPolicyNamesThroughRedisCLI(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			s := startSluice(t, append(be.args(t), "--policies", writePolicies(t))...)
			cli := func(args ...string) string { return redisCLI(t, s, "", args...) }
			if got := cli("RL.FIXED", "victim", "1", "1h"); !strings.HasPrefix(got, "1\n1\n0\n") {
				t.Fatalf("the inline victim's first decision: %q", got)
			}
			for _, name := range []string{"", "nosuch"} {
				want := "ERR invalid policy '" + name + "': no such policy\n\n"
				for _, args := range [][]string{
					{"RL.ALLOW", name, "victim"},
					{"RL.RESET", "POLICY", name, "victim"},
					{"RL.ACQUIRE", "POLICY", name, "victim"},
					{"RL.RELEASE", "POLICY", name, "victim", "id"},
				} {
					if got := cli(args...); got != want {
						t.Errorf("redis-cli %q:\n got %q\nwant %q", args, got, want)
					}
				}
			}
			if got := cli("RL.FIXED", "victim", "1", "1h", "PEEK"); !strings.HasPrefix(got, "0\n1\n0\n") {
				t.Errorf("the inline victim after the resets by empty and unknown names: %q; want still refused", got)
			}
		})
	}
}

// RL.RESET of more keys than a command takes, from redis-cli against the
// binary: refused whole with an error that says what to do, and the
// connection (redis-cli's, which sends the next command on it) goes on
// (issue 28: a protocol error and a disconnect).
func TestResetOfTooManyKeysThroughRedisCLI(t *testing.T) {
	s := startSluice(t)
	args := []string{"RL.RESET"}
	for i := range 5000 {
		args = append(args, "k"+strconv.Itoa(i))
	}
	stdin := strings.Join(args, " ") + "\n" + strings.Join(args[:4096], " ") + "\nPING\n"
	want := "ERR too many arguments for 'rl.reset' command: at most 4096, its name included; send them in several commands\n\n4095\nPONG\n"
	if got := redisCLI(t, s, stdin); got != want {
		t.Errorf("redis-cli:\n got %q\nwant %q", got, want)
	}
}
