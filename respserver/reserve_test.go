package respserver

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/service"
)

// TestSettle: RL.SETTLE gives back what the work did not use or charges
// what it used over, answers the decision, and ends the record: a second
// settle, and a settle after the TTL, are errors that say the reservation
// stays charged at its estimate.
func TestSettle(t *testing.T) {
	clock := newPinnedClock()
	mem, err := memstore.New(memstore.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: mem, Policies: testPolicies(t), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	c := offlineClient(srv)
	idOf := regexp.MustCompile(`"([0-9a-f]{16})"\]$`)
	reserve := func(args ...string) string {
		t.Helper()
		r := run(t, c, [][][]byte{bargs(append([]string{"RL.RESERVE"}, args...)...)})
		m := idOf.FindStringSubmatch(r[0])
		if m == nil {
			t.Fatalf("RL.RESERVE %s: %s", strings.Join(args, " "), r[0])
		}
		return m[1]
	}
	steps := func(cmds ...[]string) []string {
		t.Helper()
		var in [][][]byte
		for _, a := range cmds {
			in = append(in, bargs(a...))
		}
		return run(t, c, in)
	}
	gone := "-ERR unknown or expired reservation '"

	a := reserve("RL.TOKEN", "llm", "1000", "1000", "1m", "400")
	b := reserve("RL.TOKEN", "llm", "1000", "1000", "1m", "300")
	got := steps(
		[]string{"RL.SETTLE", a, "100"},  // 300 back: 300 + 100 used
		[]string{"RL.SETTLE", a, "100"},  // gone
		[]string{"RL.SETTLE", b, "1000"}, // 700 more: 1,100 used, 100 over
		[]string{"RL.TOKEN", "llm", "1000", "1000", "1m", "0"},
	)
	want := []string{"[1, 1000, 600, 0, 24000]", gone + a + "'", "[0, 1000, -100, 6060, 66000]", "[0, 1000, 0, 6000, 66000]"}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("step %d: %s; want %s", i, got[i], want[i])
		}
	}
	// An exact estimate sends nothing that changes the key: its settle
	// answers a look.
	e := reserve("RL.FIXED", "f", "100", "1m", "30")
	if got := steps([]string{"RL.SETTLE", e, "30"}, []string{"RL.FIXED", "f", "100", "1m", "0"}); got[0] != "[1, 100, 70, 0, 60000]" || got[1] != got[0] {
		t.Errorf("exact settle: %q", got)
	}
	// Past its TTL the record is gone, the estimate kept.
	x := reserve("RL.FIXED", "x", "100", "1m", "30", "TTL", "10s")
	clock.Advance(10 * time.Second)
	if got := steps([]string{"RL.SETTLE", x, "0"}, []string{"RL.FIXED", "x", "100", "1m", "0"}); !strings.HasPrefix(got[0], gone) || got[1] != "[1, 100, 70, 0, 50000]" {
		t.Errorf("settle after the TTL: %q", got)
	}
	// By a policy with two limits: given back to both.
	p := reserve("POLICY", "search", "carol", "3")
	if got := steps([]string{"RL.SETTLE", p, "1"}, []string{"RL.ALLOW", "search", "carol", "0", "DETAIL"}); got[0] != "[1, 3, 2, 0, 86390000]" || !strings.Contains(got[1], `"burst", [1, 5, 4,`) {
		t.Errorf("settle by a policy: %q", got)
	}
	if info := svc.InfoReservations()[0]; info != [2]string{"reservations_open", "0"} {
		t.Errorf("INFO: %s", info)
	}
}

func bargs(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, a := range s {
		out[i] = []byte(a)
	}
	return out
}

// FuzzReserveArgs: RL.RESERVE's and RL.SETTLE's parsers never panic,
// answer a bad input with one line, and what RL.SETTLE keeps is a copy:
// it runs off the loop, after the read buffer is reused.
func FuzzReserveArgs(f *testing.F) {
	for _, s := range []string{"RL.TOKEN k 10 10 1m 5", "RL.TOKEN k 10 10 1m 5 TTL 1m", "POLICY search bob 2",
		"POLICY search bob 2 TTL 10s", "RL.SLIDING s 10 1m 3 PRECISION 2 TTL 1s", "RL.SLIDING s 10 1m PRECISION 2",
		"RL.FIXED ttl 10 1m TTL 1m", "RL.FIXED k 10 1m 5 PEEK", "RL.ALLOW a b 1", "RL.RESERVE RL.FIXED k 1 1m 1",
		"RL.EXPLAIN RL.FIXED k 1 1m", "CL.THROTTLE k 1 2 3 4", "POLICY ttl ttl ttl TTL ttl", "RL.GCRA g 0 1 1s 1 TTL 1h0m0.000001s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := [][]byte{[]byte("RL.RESERVE")}
		for _, a := range strings.Fields(line) {
			args = append(args, []byte(a))
		}
		if len(args) >= 5 && len(args) <= 10 {
			req, sh, msg := parseReserve(nil, args)
			if strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("%q: a reply of more than one line: %q", line, msg)
			}
			if msg == "" && (!req.Reserve || sh != shapeReserve || req.Peek || req.Charge) {
				t.Fatalf("%q: parsed as %+v, shape %d", line, req, sh)
			}
		}
		if len(args) == 3 {
			args[0] = []byte("RL.SETTLE")
			id, _, msg := parseSettle(args)
			if strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("%q: a reply of more than one line: %q", line, msg)
			}
			before := strings.Clone(id)
			for _, a := range args {
				for i := range a {
					a[i] = 'X'
				}
			}
			if msg == "" && id != before {
				t.Fatalf("%q: the id changed with the buffer", line)
			}
		}
	})
}
