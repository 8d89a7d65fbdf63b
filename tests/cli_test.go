package tests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// runCLI runs the binary to its end with args and the variables env
// (besides a clean environment), and returns its exit status and output.
func runCLI(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(sluiceBin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			code = exit.ExitCode()
		default:
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("sluice %s did not exit within 10s:\n%s", strings.Join(args, " "), errb.String())
	}
	return code, out.String(), errb.String()
}

// TestCLIFlagErrors: a wrong setting exits 2 before anything starts, with
// one line that names where the value came from and how to fix it.
func TestCLIFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--upstream", "localhost:6379"}, nil,
			`sluice: invalid --upstream "localhost:6379": an address starts with its scheme: did you mean redis://localhost:6379?`},
		{[]string{"--upstream-timeout", "100"}, nil, `sluice: invalid --upstream-timeout "100": durations need a unit: 100ms`},
		{nil, []string{"SLUICE_UPSTREAM_TIMEOUT=0s"},
			`sluice: invalid SLUICE_UPSTREAM_TIMEOUT "0s": must be a positive duration such as 100ms`},
		{[]string{"--listen", "127.0.0.1:99999"}, nil,
			`sluice: invalid --listen "127.0.0.1:99999": the port must be a number from 0 to 65535`},
		{[]string{"--max-keys", "many"}, nil, `sluice: invalid --max-keys "many": must be a whole number`},
		{[]string{"--listen"}, nil, `sluice: flag needs an argument: -listen`},
		{[]string{"--nosuch"}, nil, `sluice: flag provided but not defined: -nosuch; sluice --help lists the flags`},
	} {
		t.Run(strings.Join(append(tc.env, tc.args...), " "), func(t *testing.T) {
			code, out, errs := runCLI(t, tc.env, tc.args...)
			if code != 2 || out != "" || errs != tc.want+"\n" {
				t.Errorf("exit %d, stdout %q, stderr %q;\nwant exit 2 and the one line %q", code, out, errs, tc.want)
			}
		})
	}
}

// TestHelpListsCommands: sluice --help and sluice help name the commands,
// and each command's help lists only the flags it takes, spelt as the
// docs spell them.
func TestHelpListsCommands(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}} {
		code, out, errs := runCLI(t, nil, args...)
		if code != 0 || !strings.Contains(out, "\n  inject ") || !strings.Contains(out, "\n  webhook ") || !strings.Contains(out, "--listen") {
			t.Errorf("sluice %s: exit %d, %s%s; want the commands inject and webhook and the flags", args[0], code, out, errs)
		}
	}
	for _, args := range [][]string{{"inject", "--help"}, {"help", "inject"}} {
		code, out, errs := runCLI(t, nil, args...)
		if code != 0 || !strings.Contains(out, "\n  -f file\n") || !strings.Contains(out, "\n  -o file\n") ||
			!strings.Contains(out, "\n  --upstream-secret ") {
			t.Errorf("sluice %s: exit %d, %s%s; want -f, -o and --upstream-secret", strings.Join(args, " "), code, out, errs)
		}
		for _, refused := range []string{"--upstream ", "--requirepass ", "--policies ", "--f ", "--o "} {
			if strings.Contains(out, "\n  "+refused) {
				t.Errorf("sluice %s lists %s, which it does not take:\n%s", strings.Join(args, " "), refused, out)
			}
		}
	}
	if code, _, errs := runCLI(t, nil, "help", "nosuch"); code != 2 || !strings.Contains(errs, "the commands are envoy-ratelimit, inject, simulate and webhook") {
		t.Errorf("sluice help nosuch: exit %d, %q; want 2 and the commands", code, errs)
	}
	code, out, errs := runCLI(t, nil, "webhook", "--help")
	if code != 0 || !strings.Contains(out, "\n  --sidecar-grpc-tls-key ") {
		t.Fatalf("sluice webhook --help: exit %d, %s%s", code, out, errs)
	}
	for _, l := range strings.Split(out, "\n") {
		for _, own := range []string{"--grpc-tls-key", "--upstream-secret-key", "--rls-config"} {
			if strings.Contains(strings.ReplaceAll(l, "--sidecar-", ""), own) {
				t.Errorf("sluice webhook --help names %s, a flag it does not have: %q", own, l)
			}
		}
	}
	if strings.Contains(out, "\n  --sidecar-upstream ") || strings.Contains(out, "\n  --sidecar-requirepass ") {
		t.Errorf("sluice webhook --help lists sidecar settings it refuses:\n%s", out)
	}
}

// TestAdminDefaultTaken: a second sidecar with default flags starts
// although the default admin address is taken; its admin endpoints are
// off, which its log and INFO say. An admin address asked for must be
// had.
func TestAdminDefaultTaken(t *testing.T) {
	const defaultAdmin = "127.0.0.1:9380"
	// Hold the default address, unless another process already does:
	// either way it is taken.
	if ln, err := net.Listen("tcp", defaultAdmin); err == nil {
		t.Cleanup(func() { ln.Close() })
	}
	port := redistest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s := &sluice{Net: "tcp", Addr: addr, Port: port, logs: &syncBuffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(sluiceBin, "--listen", addr)
	s.cmd.Env = cleanEnv()
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	var c net.Conn
	waitFor(t, 10*time.Second, func() bool {
		var err error
		c, err = net.DialTimeout("tcp", addr, time.Second)
		return err == nil
	}, s.logs)
	defer c.Close()
	if !strings.Contains(s.logs.String(), "/metrics, /healthz and /readyz are not served") {
		t.Errorf("no warning that the admin endpoints are off:\n%s", s.logs)
	}
	if _, err := c.Write([]byte("INFO admin\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	var info strings.Builder
	for !strings.Contains(info.String(), "admin_serving:") {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("INFO admin: %v after %q", err, info.String())
		}
		info.WriteString(l)
	}
	if !strings.Contains(info.String(), "admin_serving:0") || !strings.Contains(info.String(), "admin_listen:"+defaultAdmin) {
		t.Errorf("INFO admin = %q; want admin_listen:%s and admin_serving:0", info.String(), defaultAdmin)
	}

	// Asked for, the same taken address is a failure to start.
	code, _, errs := runCLI(t, nil, "--listen", fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t)), "--admin-listen", defaultAdmin)
	if code != 1 || !strings.Contains(errs, "admin listener") {
		t.Errorf("--admin-listen %s taken: exit %d, %s; want exit 1 and the admin listener's error", defaultAdmin, code, errs)
	}
	code, _, errs = runCLI(t, []string{"SLUICE_ADMIN_LISTEN=" + defaultAdmin}, "--listen", fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t)))
	if code != 1 || !strings.Contains(errs, "admin listener") {
		t.Errorf("SLUICE_ADMIN_LISTEN=%s taken: exit %d, %s; want exit 1", defaultAdmin, code, errs)
	}
}

// TestSettingsStandAlone: the injector reads the settings table without
// the sidecar it configures: no RESP server, HTTP check or telemetry.
func TestSettingsStandAlone(t *testing.T) {
	for _, pkg := range []string{"../inject", "../internal/settings"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			switch strings.TrimPrefix(dep, "github.com/sluice-rl/sluice/") {
			case "app", "respserver", "httpcheck", "telemetry":
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}

// TestPoliciesThatMeetRefused: two policies whose prefixes start one
// another ("t:" and "t:u:") would share counts (issue 28: a user named
// u:alice spent another policy's budget); the binary does not start, and
// says which two, where, and the fix.
func TestPoliciesThatMeetRefused(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pol, []byte("policies:\n  t:\n    algorithm: fixed_window\n    limit: 2\n    period: 1h\n"+
		"  \"t:u\":\n    algorithm: fixed_window\n    limit: 2\n    period: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, nil, "--listen", "127.0.0.1:0", "--admin-listen", "off", "--policies", pol)
	want := pol + `:6: policy \"t:u\": field prefix: \"t:u:\" and \"t:\", the prefix of policy \"t\" (line 2), could address the same state`
	if code == 0 || !strings.Contains(errs, want) || !strings.Contains(errs, "give one a prefix that does not start the other") {
		t.Errorf("exit %d, stderr:\n%s\nwant a failure naming both policies: %s", code, errs, want)
	}
}

// TestCLIPortTaken: a port another process holds stops start-up with exit
// status 1 and one error that names the listener, and nothing else logged
// as failing (the event loops, closed before they ran, are not).
func TestCLIPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", addr, "--admin-listen", "off"}, "RESP listener: listen tcp " + addr + ": bind: address already in use"},
		{[]string{"--listen", "127.0.0.1:0", "--admin-listen", addr}, "admin listener: listen tcp " + addr + ": bind: address already in use"},
	} {
		code, _, stderr := runCLI(t, nil, tc.args...)
		if code != 1 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "level=ERROR") != 1 {
			t.Errorf("sluice %s: exit %d, log:\n%s\nwant exit 1 and one error, %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}
