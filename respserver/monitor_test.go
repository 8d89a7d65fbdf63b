package respserver

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/internal/monitor"
	"github.com/sluice-rl/sluice/policy"
)

// monitorConn opens a connection and puts it in MONITOR mode.
func monitorConn(t *testing.T, addr string) *testConn {
	t.Helper()
	return dialAnswered(t, addr, "+OK", "MONITOR")
}

// dialAnswered opens a connection and sends it a command that must get
// want: once answered, the server has registered the connection, which
// it does after the dialer's connect returns.
func dialAnswered(t *testing.T, addr, want string, args ...string) *testConn {
	t.Helper()
	c := dialTest(t, addr)
	c.send(t, encodeCommand(bytesArgs(args...)))
	if got, err := c.reply(t); err != nil || got != want {
		t.Fatalf("%q = %q, %v; want %q", args, got, err, want)
	}
	return c
}

// monitorLine reads one raw MONITOR line, its "+" and CRLF included.
func (c *testConn) monitorLine(t *testing.T) string {
	t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a MONITOR line: %v (read %q)", err, line)
	}
	return line
}

// stamp is a MONITOR line's start for a client at addr: the time in
// seconds and microseconds, database 0 and the address.
func stamp(addr string) string {
	return `^\+[0-9]{10}\.[0-9]{6} \[0 ` + regexp.QuoteMeta(addr) + `\] `
}

// MONITOR shows what other clients run, in Redis's line format, each
// decision followed by what it got and what decided it, errors as the
// client read them, secrets redacted, and the administrative commands
// and those refused before they ran not at all.
func TestMonitor(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), testPolicies(t))})
	m := monitorConn(t, addr)
	c := dialTest(t, addr)
	from := stamp(c.nc.LocalAddr().String())
	for _, step := range []struct {
		args []string
		line string // a regular expression after the stamp; "" for no line
	}{
		{[]string{"RL.FIXED", "k", "1", "1m"}, `"RL.FIXED" "k" "1" "1m" -> allowed=1 remaining=0 retry_after_ms=0 path=memory limit=fixed_window algorithm=fixed_window state="used 1 of 1, back to full in 60000ms"\r\n$`},
		{[]string{"RL.FIXED", "k", "1", "1m"}, `"RL.FIXED" "k" "1" "1m" -> allowed=0 remaining=0 retry_after_ms=60000 path=memory limit=fixed_window algorithm=fixed_window state="used 1 of 1, back to full in 60000ms"\r\n$`},
		{[]string{"CL.THROTTLE", "q", "1", "1", "10", "5"}, `"CL.THROTTLE" "q" "1" "1" "10" "5" -> allowed=0 remaining=2 retry_after_ms=-1 path=memory limit=gcra algorithm=gcra state="TAT now\+0ms"\r\n$`},
		// A policy: its name, and the limit of its several that refused.
		{[]string{"RL.ALLOW", "api", "m"}, `"RL.ALLOW" "api" "m" -> allowed=1 remaining=4 retry_after_ms=0 path=memory policy=api limit=api algorithm=gcra state="TAT now\+100ms"\r\n$`},
		{[]string{"RL.ALLOW", "search", "m"}, `"RL.ALLOW" "search" "m" -> allowed=1 remaining=2 retry_after_ms=0 path=memory policy=search limit=daily algorithm=fixed_window state="used 1 of 3, back to full in [0-9]+ms"\r\n$`},
		{[]string{"RL.ALLOW", "search", "m", "3"}, `"RL.ALLOW" "search" "m" "3" -> allowed=0 remaining=2 retry_after_ms=[0-9]+ path=memory policy=search limit=daily algorithm=fixed_window state="used 1 of 3, back to full in [0-9]+ms"\r\n$`},
		{[]string{"RL.FIXED", "k", "x", "1m"}, `"RL.FIXED" "k" "x" "1m" -> \(error\) ERR invalid limit 'x': must be an integer\r\n$`},
		{[]string{"RL.ALLOW", "nosuch", "u"}, `"RL.ALLOW" "nosuch" "u" -> \(error\) ERR invalid policy 'nosuch': no such policy\r\n$`},
		{[]string{"PING", "a\"b\\\n\x01é"}, `"PING" "a\\"b\\\\\\n\\x01\\xc3\\xa9"\r\n$`},
		{[]string{"AUTH", "secret"}, `"AUTH" "\(redacted\)"\r\n$`},
		{[]string{"AUTH", "default", "secret"}, `"AUTH" "\(redacted\)" "\(redacted\)"\r\n$`},
		{[]string{"HELLO", "2", "SETNAME", "auth", "AUTH", "default", "secret"}, `"HELLO" "2" "SETNAME" "auth" "AUTH" "\(redacted\)" "\(redacted\)"\r\n$`},
		{[]string{"CLIENT", "LIST"}, ""},
		{[]string{"CLIENT", "KILL", "ID", "999"}, ""},
		{[]string{"MONITOR"}, ""},
		{[]string{"NOSUCH"}, ""},
		{[]string{"PING", "x", "y"}, ""},
		{[]string{"CLIENT", "ID"}, `"CLIENT" "ID"\r\n$`},
	} {
		c.send(t, encodeCommand(bytesArgs(step.args...)))
		if _, err := c.reply(t); err != nil {
			t.Fatalf("%q: %v", step.args, err)
		}
		if step.line == "" {
			continue
		}
		if got := m.monitorLine(t); !regexp.MustCompile(from + step.line).MatchString(got) {
			t.Errorf("%q: MONITOR printed %q, want %s", step.args, got, step.line)
		}
	}
	// The commands without a line printed none: the next line is the
	// next command's.
	c.send(t, encodeCommand(bytesArgs("ECHO", "end")))
	if _, err := c.reply(t); err != nil {
		t.Fatal(err)
	}
	if got := m.monitorLine(t); !strings.HasSuffix(got, `"ECHO" "end"`+"\r\n") {
		t.Errorf("after the hidden commands: %q", got)
	}
}

// A pipeline's lines come in its order, with each decision's outcome,
// the errors in their places and the commands that waited for the
// decisions after them.
func TestMonitorPipelineOrder(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), testPolicies(t))})
	m := monitorConn(t, addr)
	c := dialTest(t, addr)
	var pipe []byte
	want := []string{
		`"RL.FIXED" "p" "2" "1m" -> allowed=1 remaining=1 `,
		`"RL.FIXED" "p" "bad" "1m" -> (error) ERR invalid limit 'bad'`,
		`"RL.FIXED" "p" "2" "1m" -> allowed=1 remaining=0 `,
		`"PING"`,
		`"RL.FIXED" "p" "2" "1m" -> allowed=0 remaining=0 `,
		`"RL.ALLOW" "api" "u" -> allowed=1 remaining=4 retry_after_ms=0 path=memory`,
	}
	for _, args := range [][]string{{"RL.FIXED", "p", "2", "1m"}, {"RL.FIXED", "p", "bad", "1m"}, {"RL.FIXED", "p", "2", "1m"},
		{"PING"}, {"RL.FIXED", "p", "2", "1m"}, {"RL.ALLOW", "api", "u"}} {
		pipe = append(pipe, encodeCommand(bytesArgs(args...))...)
	}
	c.send(t, pipe)
	for range want {
		if _, err := c.reply(t); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range want {
		if got := m.monitorLine(t); !strings.Contains(got, "] "+w) {
			t.Errorf("line %d: %q, want it to contain %q", i, got, w)
		}
	}
}

// A decision answered as allowed only because its policy runs in shadow
// mode says so.
func TestMonitorShadow(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte("policies:\n  trial:\n    algorithm: fixed_window\n    limit: 1\n    period: 1m\n    shadow: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), set)})
	m := monitorConn(t, addr)
	c := dialTest(t, addr)
	for range 2 {
		c.send(t, encodeCommand(bytesArgs("RL.ALLOW", "trial", "u")))
		if _, err := c.reply(t); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.monitorLine(t); strings.Contains(got, "shadow") {
		t.Errorf("an admission within the limit: %q", got)
	}
	if got := m.monitorLine(t); !strings.HasSuffix(got, " -> allowed=1 remaining=0 retry_after_ms=0 path=memory shadow=refused policy=trial limit=trial algorithm=fixed_window state=\"used 1 of 1, back to full in 60000ms\"\r\n") {
		t.Errorf("a refusal answered as allowed: %q", got)
	}
}

// RESET ends MONITOR mode, and a monitor that goes costs the others
// nothing: the count the hot path reads is back to 0.
func TestMonitorEnds(t *testing.T) {
	srv, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	m := monitorConn(t, addr)
	gone := monitorConn(t, addr)
	if n := srv.monitors.Len(); n != 2 {
		t.Fatalf("monitoring = %d with two monitors", n)
	}
	m.send(t, encodeCommand(bytesArgs("RESET")))
	if got := m.monitorLine(t); got != "+RESET\r\n" {
		t.Fatalf("RESET = %q", got)
	}
	gone.nc.Close()
	waitFor(t, func() bool { return !srv.monitors.On() }, "the monitors to go")
	m.send(t, encodeCommand(bytesArgs("PING")))
	if got := m.monitorLine(t); got != "+PONG\r\n" {
		t.Errorf("after RESET, PING = %q: a monitor line came first?", got)
	}
}

// A monitor that does not read is closed once its lines pass the bound,
// and the client it watches is served all along.
func TestMonitorFallsBehind(t *testing.T) {
	srv, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	m := monitorConn(t, addr)
	c := dialTest(t, addr)
	// A line is at most monitor.MaxLine and an argument: RL.RESET of
	// twelve keys of 1 KiB of NULs, 4 KiB each escaped, makes lines of
	// about 36 KiB, so that the kernel's socket buffers and the bound
	// fill in a few hundred commands (with 4 KiB lines it took thousands,
	// minutes under -race on a loaded machine).
	cmd := []string{"RL.RESET"}
	for i := range 12 {
		cmd = append(cmd, strings.Repeat("\x00", monitor.MaxArgShown-2)+strconv.Itoa(10+i))
	}
	// The watched client is served all along: each command answered
	// (within reply's read deadline, a guard against a server that waits
	// for the monitor, not a measure of speed), until the monitor is
	// dropped after a bounded number of lines.
	for i := 0; srv.monitors.On(); i++ {
		if i == 2000 {
			t.Fatal("2000 lines of 36 KiB and the monitor that reads none is still fed")
		}
		c.send(t, encodeCommand(bytesArgs(cmd...)))
		if _, err := c.reply(t); err != nil {
			t.Fatalf("the watched client, after %d commands: %v", i, err)
		}
	}
	_ = m.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, m.nc); err != nil && !isClosedErr(err) {
		t.Errorf("the monitor that fell behind: %v; want it closed", err)
	}
}

// A monitor that keeps up is never closed by one command, however long
// (issue: one RL.GCRA with a 2,000,000-byte key closed every MONITOR at
// once, and its client acted unseen): the line shows the key's first
// bytes and its length, and the monitor sees what comes next.
func TestMonitorLongCommand(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	m := monitorConn(t, addr)
	c := dialTest(t, addr)
	key := strings.Repeat("k", 2_000_000)
	for _, args := range [][]string{
		{"RL.GCRA", key, "0", "1", "1m"},      // a decision
		{"RL.GCRA", key, "0", "1", "1m", "x"}, // refused: a bad cost
		{"ECHO", key},                         // not a decision
	} {
		c.send(t, encodeCommand(bytesArgs(args...)))
		if _, err := c.reply(t); err != nil {
			t.Fatalf("%s: %v", args[0], err)
		}
		line := m.monitorLine(t)
		if want := `"` + args[0] + `" "` + key[:monitor.MaxArgShown] + `"... (2000000 bytes)`; !strings.Contains(line, want) || len(line) > 2*monitor.MaxArgShown {
			t.Errorf("%s: a line of %d bytes: %.120q…", args[0], len(line), line)
		}
	}
	c.send(t, encodeCommand(bytesArgs("PING")))
	if _, err := c.reply(t); err != nil {
		t.Fatal(err)
	}
	if line := m.monitorLine(t); !strings.HasSuffix(line, `"PING"`+"\r\n") {
		t.Errorf("after the long commands, the monitor read %q", line)
	}
}

func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset")
}

// waitFor polls cond, which another goroutine makes true, for 5 seconds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// CLIENT KILL from one connection closes another through whatever serves
// it: by ADDR, by LADDR, by the old form, and one whose decision is at
// the store when it is killed, which then lands on a closed connection.
func TestClientKill(t *testing.T) {
	slow := &slowKeyStore{Store: memStore(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: slow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	srv, addr := startServer(t, Config{Service: testService(t, b, nil)})
	admin := dialTest(t, addr)
	ask := func(args ...string) string {
		t.Helper()
		admin.send(t, encodeCommand(bytesArgs(args...)))
		got, err := admin.reply(t)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return got
	}
	dial := func() *testConn { return dialAnswered(t, addr, "+PONG", "PING") }
	closed := func(c *testConn, what string) {
		t.Helper()
		_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := c.rd.ReadByte(); err == nil || !isClosedErr(err) {
			t.Errorf("%s: read %q, %v; want the connection closed", what, b, err)
		}
	}

	a := dial()
	if got := ask("CLIENT", "KILL", "ADDR", a.nc.LocalAddr().String()); got != "1" {
		t.Errorf("CLIENT KILL ADDR = %s", got)
	}
	closed(a, "killed by ADDR")

	old := dial()
	if got := ask("CLIENT", "KILL", old.nc.LocalAddr().String()); got != "+OK" {
		t.Errorf("CLIENT KILL addr = %s", got)
	}
	closed(old, "killed by the old form")
	if got := ask("CLIENT", "KILL", old.nc.LocalAddr().String()); got != "-ERR No such client" {
		t.Errorf("CLIENT KILL of a closed address = %s", got)
	}

	busy := dial()
	busy.send(t, encodeCommand(bytesArgs("RL.FIXED", "slow", "1", "1m")))
	<-slow.entered // its batch is at the store
	if got := ask("CLIENT", "KILL", "LADDR", addr, "SKIPME", "yes"); got != "1" {
		t.Errorf("CLIENT KILL LADDR = %s", got)
	}
	closed(busy, "killed with a decision in flight")
	close(slow.release)
	if got := ask("PING"); got != "+PONG" {
		t.Errorf("after the landing on a killed connection, PING = %s", got)
	}
	waitFor(t, func() bool { return srv.Clients() == 1 }, "the killed connections to be counted out")
}

// A monitor killed by CLIENT KILL stops being fed.
func TestClientKillMonitor(t *testing.T) {
	srv, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	m := monitorConn(t, addr)
	c := dialTest(t, addr)
	c.send(t, encodeCommand(bytesArgs("CLIENT", "KILL", "TYPE", "normal")))
	if got, err := c.reply(t); err != nil || got != "1" {
		t.Fatalf("CLIENT KILL TYPE normal = %q, %v", got, err)
	}
	_ = m.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, m.nc); err != nil && !isClosedErr(err) {
		t.Errorf("the killed monitor: %v", err)
	}
	waitFor(t, func() bool { return !srv.monitors.On() }, "the killed monitor to stop being fed")
}
