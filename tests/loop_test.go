package tests

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// commands sends cmds, each a command with space-separated arguments.
func (c *raw) commands(t *testing.T, cmds ...string) {
	t.Helper()
	var b strings.Builder
	for _, cmd := range cmds {
		args := strings.Fields(cmd)
		b.WriteString("*" + itoa(len(args)) + "\r\n")
		for _, a := range args {
			b.WriteString("$" + itoa(len(a)) + "\r\n" + a + "\r\n")
		}
	}
	c.send(t, []byte(b.String()))
}

// reply reads one reply, an array flattened onto one line.
func (c *raw) reply(t *testing.T, within time.Duration) string {
	t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(within))
	line, err := c.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("no reply within %v: %v", within, err)
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "*") {
		return line
	}
	n := atoi(line[1:])
	parts := []string{}
	for range n {
		parts = append(parts, c.reply(t, within))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// pending tells whether a reply is waiting, without waiting for one.
func (c *raw) pending() bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.rd.Peek(1)
	_ = c.nc.SetReadDeadline(time.Time{})
	return err == nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestLoopServesOthersWhileRedisIsPaused: with Redis paused (SIGSTOP), one
// connection's RL.RESET and another's decision wait at Redis; meanwhile
// other connections get their PING, their errors and their deny-cache
// refusals, before either held request is answered. The upstream timeout
// outlasts the test, so that only Redis resuming can answer a held request
// and the order holds however slowly a loaded machine runs it.
func TestLoopServesOthersWhileRedisIsPaused(t *testing.T) {
	r := redistest.Start(t)
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--upstream-timeout", "1m", "--on-upstream-failure", "deny")
	setup := dialRaw(t, s.Addr)
	setup.commands(t, "RL.FIXED cached 1 1h", "RL.FIXED cached 1 1h")
	if got := setup.reply(t, 5*time.Second); !strings.HasPrefix(got, "[:1 ") {
		t.Fatalf("first request: %s", got)
	}
	if got := setup.reply(t, 5*time.Second); !strings.HasPrefix(got, "[:0 ") {
		t.Fatalf("second request: %s; want the refusal the deny cache then remembers", got)
	}
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = r.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	reset, decision, other := dialRaw(t, s.Addr), dialRaw(t, s.Addr), dialRaw(t, s.Addr)
	reset.commands(t, "RL.RESET somekey")
	decision.commands(t, "RL.FIXED fresh 5 1m")
	time.Sleep(50 * time.Millisecond) // both are read and at Redis
	other.commands(t, "PING", "NOSUCH", "RL.FIXED cached 1 1h")
	for _, want := range []string{"+PONG", "-ERR unknown command 'NOSUCH'", "[:0 :1 :0 "} {
		if got := other.reply(t, callerDeadline); !strings.HasPrefix(got, want) {
			t.Fatalf("another connection while Redis is paused: %q; want %q…", got, want)
		}
	}
	if reset.pending() || decision.pending() {
		t.Fatal("a request held at the paused Redis was answered before the other connection's")
	}
	resume()
	if got := reset.reply(t, 5*time.Second); got != ":1" && !strings.HasPrefix(got, "-ERR") {
		t.Errorf("RL.RESET after Redis resumed: %q", got)
	}
	if got := decision.reply(t, 5*time.Second); !strings.HasPrefix(got, "[:") {
		t.Errorf("the held decision: %q", got)
	}
}

// TestSIGTERMAnswersWhatWasSent: with Redis paused and one connection's
// RL.RESET waiting at it, a decision sent just before SIGTERM, and one
// still in the socket when draining starts, are answered before the
// connections close, and the process exits cleanly.
func TestSIGTERMAnswersWhatWasSent(t *testing.T) {
	r := redistest.Start(t)
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--upstream-timeout", "500ms", "--on-upstream-failure", "deny")
	warm := dialRaw(t, s.Addr)
	warm.commands(t, "RL.FIXED warm 5 1m")
	if got := warm.reply(t, 5*time.Second); !strings.HasPrefix(got, "[:1 ") {
		t.Fatalf("warm-up: %s", got)
	}
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Signal(syscall.SIGCONT) })
	reset, before, during := dialRaw(t, s.Addr), dialRaw(t, s.Addr), dialRaw(t, s.Addr)
	reset.commands(t, "RL.RESET somekey")
	before.commands(t, "RL.FIXED k1 5 1m")
	time.Sleep(100 * time.Millisecond)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	during.commands(t, "RL.FIXED k2 5 1m")
	for name, c := range map[string]*raw{"sent before SIGTERM": before, "sent as draining began": during} {
		// Redis is paused: the failure mode (deny) answers at the deadline.
		if got := c.reply(t, 5*time.Second); !strings.HasPrefix(got, "[:0 ") {
			t.Errorf("the decision %s: %q; want the deny failure mode's refusal", name, got)
		}
	}
	if got := reset.reply(t, 5*time.Second); !strings.HasPrefix(got, "-ERR") {
		t.Errorf("RL.RESET against a paused Redis during shutdown: %q; want an error", got)
	}
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Fatalf("sluice exited with %v after SIGTERM:\n%s", err, s.logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("sluice did not exit within 10s of SIGTERM:\n%s", s.logs)
	}
}

// TestReadinessFollowsRedisWithoutTraffic: /readyz and breaker_open follow
// the upstream with no request sent: not ready while nothing answers at
// the upstream's address (deny mode), ready once a Redis is there, and not
// ready again once it is killed; the start-up log warns.
func TestReadinessFollowsRedisWithoutTraffic(t *testing.T) {
	port := redistest.FreePort(t)
	s := startSluice(t, "--upstream", "redis://127.0.0.1:"+strconv.Itoa(port), "--on-upstream-failure", "deny")
	readyz := func() int {
		resp, err := http.Get("http://" + s.Admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := readyz(); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d with nothing at the upstream's address; want 503", got)
	}
	if !strings.Contains(s.logs.String(), "the upstream Redis cannot be used") {
		t.Errorf("no start-up warning in the log:\n%s", s.logs)
	}
	r := redistest.StartAt(t, port)
	within(t, 5*time.Second, "/readyz 200 once Redis answers, with no traffic", func() bool { return readyz() == http.StatusOK })
	rdb := client(t, s)
	if open := info(t, rdb, "upstream")["breaker_open"]; open != 0 {
		t.Errorf("breaker_open %d once Redis answers", open)
	}
	r.Kill()
	within(t, 5*time.Second, "/readyz 503 once Redis is killed, with no traffic", func() bool { return readyz() == http.StatusServiceUnavailable })
}

// With two event loops, the first reads every batch's reply from Redis,
// the second's included (the log says so at debug level), and each
// connection gets exactly its own decisions, in order: a failed or
// misdelivered batch would be refused (--on-upstream-failure deny) or
// counted against the wrong key.
func TestTwoLoopsShareTheStoresReplies(t *testing.T) {
	r := redistest.Start(t)
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--io-loops", "2", "--on-upstream-failure", "deny")
	if logs := s.logs.String(); !strings.Contains(logs, "the upstream's connection is read on the first event loop") ||
		!strings.Contains(logs, "io_loops=2") {
		t.Errorf("the log does not say which loop reads Redis's replies:\n%s", logs)
	}
	ctx := ctxT(t)
	const conns, pipeline, rounds = 8, 30, 4
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1, Protocol: 2, DisableIdentity: true})
			defer rdb.Close()
			key := "two-loops:" + itoa(c)
			for round := range rounds {
				p := rdb.Pipeline()
				cmds := make([]*redis.Cmd, pipeline)
				for i := range cmds {
					cmds[i] = p.Do(ctx, "RL.FIXED", key, "1000", "1m")
				}
				if _, err := p.Exec(ctx); err != nil {
					t.Errorf("%s round %d: %v", key, round, err)
					return
				}
				for i, cmd := range cmds {
					v, _ := cmd.Slice()
					want := int64(1000 - (round*pipeline + i + 1))
					if len(v) != 5 || v[0] != int64(1) || v[2] != want {
						t.Errorf("%s round %d request %d: %v; want allowed with %d remaining", key, round, i, v, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
