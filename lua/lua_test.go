package lua_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/lua"
)

// TestScripts: every script compiles on Redis 7, under the digest computed
// here, and declares itself with a shebang.
func TestScripts(t *testing.T) {
	srv := redistest.Start(t)
	names := map[string]bool{}
	for _, s := range []*lua.Script{lua.Batch, lua.Lease} {
		names[s.Name] = true
		if !strings.HasPrefix(s.Source, "#!lua\n") && !strings.HasPrefix(s.Source, "#!lua flags=") {
			t.Errorf("%s: no shebang", s.Name)
		}
		sha, err := srv.Do("SCRIPT", "LOAD", s.Source)
		if err != nil {
			t.Fatalf("%s: SCRIPT LOAD: %v", s.Name, err)
		}
		if sha != s.SHA {
			t.Errorf("%s: Redis says SHA %s, we say %s", s.Name, sha, s.SHA)
		}
	}
	for _, n := range []string{"batch", "lease"} {
		if !names[n] {
			t.Errorf("no script %q", n)
		}
	}
}

// one is the batch script's arguments for a batch of one request: one
// limit, one run, one key; no deadline (see noDeadline).
func one(alg, rate, period, burst, cost, peek string, now ...string) []string {
	return append([]string{"1", alg, rate, period, burst, "1", "1", "1", cost, peek, "1", "1", "1", "0"}, now...)
}

// noDeadline is a batch call's arguments args, then the deadline 0: none.
func noDeadline(args ...string) []string {
	return append(args[:len(args):len(args)], "0")
}

// body is a batch reply, as redistest prints it (one element a line),
// without its header (Redis's time and late), which it checks: not late.
func body(t testing.TB, reply string) string {
	t.Helper()
	lines := strings.SplitN(reply, "\n", 3)
	if len(lines) < 2 || lines[1] != "0" {
		t.Fatalf("reply %q: want a header of Redis's time and late 0", reply)
	}
	if len(lines) == 2 {
		return ""
	}
	return lines[2]
}

// TestCalls pins the argument and reply layouts documented in batch.lua, and the errors for bad arguments.
func TestCalls(t *testing.T) {
	srv := redistest.Start(t)
	const now = "1767225600000000" // 2026-01-01, a whole second
	// A batch call's raw arguments here end before the deadline: none.
	eval := func(s *lua.Script, keys []string, args ...string) (string, error) {
		cmd := append([]string{"EVAL", s.Source, strconv.Itoa(len(keys))}, keys...)
		if s != lua.Batch {
			return srv.Do(append(cmd, args...)...)
		}
		got, err := srv.Do(append(cmd, noDeadline(args...)...)...)
		if err != nil {
			return "", err
		}
		return body(t, got), nil
	}
	for _, c := range []struct {
		name    string
		script  *lua.Script
		keys    []string
		args    []string
		want    string // the reply's elements, one a line
		wantErr string
	}{
		{"gcra", lua.Batch, []string{"g"}, one("gcra", "1", "1000000", "4", "1", "0", now),
			"1\n4\n0\n1000000\n0", ""},
		{"gcra again", lua.Batch, []string{"g"}, one("gcra", "1", "1000000", "4", "1", "0", now),
			"1\n3\n0\n2000000\n0", ""},
		{"leaky delay", lua.Batch, []string{"l"}, one("leaky", "10", "1000000", "2", "2", "0", now),
			"1\n0\n0\n200000\n0", ""},
		{"leaky delayed", lua.Batch, []string{"l2"}, one("leaky", "10", "1000000", "3", "1", "0", now),
			"1\n2\n0\n100000\n0", ""},
		{"leaky second waits", lua.Batch, []string{"l2"}, one("leaky", "10", "1000000", "3", "1", "0", now),
			"1\n1\n0\n200000\n100000", ""},
		// Mode 2 in the peek field: a charge, taken past what is left
		// (capacity 5; 7 owes 2), never refused, by a multi-limit
		// request's limits too; a sliding log has none.
		{"charge", lua.Batch, []string{"ch"}, one("gcra", "1", "1000000", "4", "7", "2", now),
			"0\n-2\n3000000\n7000000\n0", ""},
		{"log takes no charge", lua.Batch, []string{"chl"}, one("log", "10", "1000000", "0", "1", "2", now),
			"-1\n0\n0\n0\n0\nERR sluice: the sliding log takes no charge", ""},
		{"multi-limit charge", lua.Batch, []string{"chm"},
			[]string{"1", "gcra", "1", "1000000", "4", "0", "0", "1", "1", "1", "7", "2", "1", now},
			"0\n-2\n3000000\n7000000\n0", ""},
		{"multi-limit log takes no charge", lua.Batch, []string{"chm2"},
			[]string{"1", "log", "10", "1000000", "0", "0", "0", "1", "1", "1", "1", "2", "1", now},
			"-1\n0\n0\n0\n0\nERR sluice: the sliding log takes no charge", ""},
		{"batch with a bad request", lua.Batch, []string{"f", "f2"},
			[]string{"2",
				"fixed", "2", "1000000", "0",
				"nope", "1", "1", "0",
				"3", "1", "1", "1", "0", "1", "1", "1", "1", "1", "2", "1", "0",
				"2", "1", "2", "1", "1", "0", now},
			"1\n1\n0\n1000000\n0\n2\n-1\n0\n0\n0\n-1\n0\n0\n0\n0\nERR sluice: unknown algorithm \"nope\"", ""}, // the second counts down from the first
		{"batch of two errors", lua.Batch, []string{"a", "b"},
			[]string{"2", "gcra", "x", "1", "0", "token", "2", "1", "1", "2", "1", "1", "1", "0", "1", "2", "1", "0", "1", "2", "1", "0", now},
			"-1\n0\n0\n0\n0\n-2\n0\n0\n0\n0\n" +
				"ERR sluice: invalid rate \"x\": want an integer in [0, 2^53)\n" +
				"ERR sluice: rate is more than one per microsecond", ""},
		{"batch decides a key's requests in turn", lua.Batch, []string{"s1", "s2"},
			// s1 twice at cost 1, then s2 at cost 2
			[]string{"1", "gcra", "1", "1000000", "1", "2", "2", "1", "1", "0", "1", "1", "2", "0", "2", "1", "2", "1", "1", "0", now},
			"1\n1\n0\n1000000\n0\n2\n-1\n0\n1000000\n0\n1\n0\n0\n2000000\n0", ""}, // s1's second steps from its first; s2's repeats it, but by other steps
		{"batch runs", lua.Batch, []string{"r1", "r2", "r3"},
			// r1 at cost 1 then 2, r2 at cost 1, r3 at cost 0
			[]string{"1", "gcra", "1", "1000000", "1", "4", "1", "1", "1", "0", "1", "1", "2", "0", "1", "1", "1", "0", "1", "1", "0", "0",
				"2", "1", "2", "2", "1", "0", now},
			"1\n1\n0\n1000000\n0\n0\n1\n1000000\n1000000\n0\n1\n1\n0\n1000000\n0\n2\n1\n0\n-1000000\n0", ""}, // r3's steps from r2's
		{"batch peeks in a key's run", lua.Batch, []string{"p"},
			// a peek, an admission, a peek, a refusal: only the admission writes
			[]string{"1", "gcra", "1", "1000000", "0", "4", "1", "1", "1", "1", "1", "1", "1", "0", "1", "1", "1", "1", "1", "1", "1", "0",
				"1", "1", "4", "0", now},
			"1\n0\n0\n1000000\n0\n2\n0\n0\n0\n0\n0\n0\n1000000\n1000000\n0\n2\n0\n0\n0\n0", ""}, // each reply twice
		{"batch of empty keys replies once", lua.Batch, []string{"e1", "e2", "e3", "e4"},
			[]string{"1", "gcra", "1", "1000000", "1", "1", "4", "1", "1", "0", "1", "4", "1", "0", now},
			"1\n1\n0\n1000000\n0\n4\n0\n0\n0\n0", ""},
		{"batch run with a bad cost", lua.Batch, []string{"c1", "c2", "c3"},
			[]string{"1", "gcra", "1", "1000000", "1", "2", "1", "1", "1", "0", "2", "1", "-1", "0", "1", "3", "1", "0", now},
			"1\n1\n0\n1000000\n0\n-1\n0\n0\n0\n0\n2\n0\n0\n0\n0\n" + // one message for both, one reply twice
				"ERR sluice: invalid cost \"-1\": want an integer in [0, 2^53)", ""},
		{"batch runs short of the keys", lua.Batch, []string{"a", "b"},
			[]string{"1", "gcra", "1", "1000000", "1", "1", "1", "1", "1", "0", "1", "1", "1", "0"}, "",
			"ERR sluice: the runs hold 1 requests and the key runs 1 requests of 1 keys, and the multi-limit requests 0 keys, for 2 keys"},
		{"batch run size", lua.Batch, []string{"a"},
			[]string{"1", "gcra", "1", "1000000", "1", "1", "one", "1", "1", "0", "1", "1", "1", "0"}, "",
			`ERR sluice: invalid run size "one"`},
		{"batch names a missing limit", lua.Batch, []string{"a"},
			[]string{"1", "gcra", "1", "1000000", "0", "1", "1", "2", "1", "0", "1", "1", "1", "0"},
			"-1\n0\n0\n0\n0\nERR sluice: no limit \"2\"", ""},
		{"batch arity", lua.Batch, []string{"a"}, []string{"1", "gcra", "1", "1"}, "",
			"ERR sluice: want 1 limits of 4 arguments and a number of runs, got 5 arguments"},
		{"batch run arity", lua.Batch, []string{"a"}, []string{"1", "gcra", "1", "1", "0", "1", "1", "1"}, "",
			"ERR sluice: want 1 limits of 4 arguments, 1 runs of 4 and a number of key runs, got 9 arguments"},
		{"batch key run arity", lua.Batch, []string{"a"},
			[]string{"1", "gcra", "1", "1000000", "0", "1", "1", "1", "1", "0", "2", "1", "1"}, "",
			"ERR sluice: want 1 limits of 4 arguments, 1 runs of 4, 2 key runs of 2 and a number of multi-limit runs, got 14 arguments"},
		{"batch multi-limit arity", lua.Batch, []string{"a", "b"},
			[]string{"1", "gcra", "1", "1000000", "0", "0", "0", "1", "1", "2", "1", "0", "1"}, "",
			"ERR sluice: want 1 limits of 4 arguments, 0 runs of 4, 0 key runs of 2, 1 multi-limit runs, an optional now and a deadline, got 14 arguments"},
		{"batch multi-limit now arity", lua.Batch, []string{"a"},
			[]string{"1", "gcra", "1", "1000000", "0", "0", "0", "1", "1", "1", "1", "0", "1", now, "x"}, "",
			"ERR sluice: want 1 limits of 4 arguments, 0 runs of 4, 0 key runs of 2, 1 multi-limit runs, an optional now and a deadline, got 16 arguments"},
		{"batch multi-limit run past the keys", lua.Batch, []string{"a", "b"},
			[]string{"1", "gcra", "1", "1000000", "0", "0", "0", "1", "1000000000", "1", "1", "0", "1", now}, "",
			"ERR sluice: multi-limit run 1 of 1000000000 requests of 1 limits past the 2 keys"},
		// Two limits: a fixed window of 2 a second ("m:b") and of 3 a
		// minute ("m:d"), on one key, with a single-limit request on "s"
		// before them in the batch. Each multi-limit reply is five
		// integers per limit.
		{"multi admits and charges all", lua.Batch, []string{"s", "m:b", "m:d"},
			[]string{"2", "fixed", "2", "1000000", "0", "fixed", "3", "60000000", "0",
				"1", "1", "1", "1", "0", "1", "1", "1",
				"1", "1", "2", "1", "0", "1", "2", now},
			"1\n1\n0\n1000000\n0\n2\n0\n0\n0\n0\n1\n2\n0\n60000000\n0", ""}, // s's reply, then m:b's repeats it; m:d's
		// A multi-limit run: two requests, each on keys of its own, that
		// share their limits, cost and mode, sent once.
		{"multi run of two", lua.Batch, []string{"w1:b", "w1:d", "w2:b", "w2:d"},
			[]string{"2", "fixed", "2", "1000000", "0", "fixed", "3", "60000000", "0", "0", "0",
				"1", "2", "2", "1", "0", "1", "2", now},
			// a limit at a time: the burst's replies (the second repeats
			// the first), then the day's (likewise)
			"1\n1\n0\n1000000\n0\n2\n0\n0\n0\n0\n1\n2\n0\n60000000\n0\n2\n0\n0\n0\n0", ""},
		{"multi admits again, the day binds", lua.Batch, []string{"m:b", "m:d"},
			[]string{"2", "fixed", "2", "1000000", "0", "fixed", "3", "60000000", "0", "0", "0",
				"1", "1", "2", "1", "0", "1", "2", now},
			"1\n0\n0\n1000000\n0\n2\n1\n0\n59000000\n0", ""}, // m:d's steps from m:b's
		{"multi refused by the burst charges nothing", lua.Batch, []string{"m:b", "m:d"},
			[]string{"2", "fixed", "2", "1000000", "0", "fixed", "3", "60000000", "0", "0", "0",
				"1", "1", "2", "1", "0", "1", "2", now},
			// the burst refuses; the day, which had room, reports what it has
			"0\n0\n1000000\n1000000\n0\n1\n1\n0\n60000000\n0", ""},
		{"multi peek", lua.Batch, []string{"m:b", "m:d"},
			[]string{"2", "fixed", "2", "1000000", "0", "fixed", "3", "60000000", "0", "0", "0",
				"1", "1", "2", "1", "1", "1", "2", now},
			"0\n0\n1000000\n1000000\n0\n1\n1\n0\n60000000\n0", ""},
		{"multi with a bad limit fails alone", lua.Batch, []string{"n:a", "n:b", "m:b"},
			[]string{"2", "fixed", "2", "1000000", "0", "nope", "3", "60000000", "0", "0", "0",
				"2", "1", "2", "1", "0", "1", "2", "1", "1", "1", "0", "1", now},
			"-1\n0\n0\n0\n0\n2\n0\n0\n0\n0\n0\n0\n1000000\n1000000\n0\nERR sluice: unknown algorithm \"nope\"", ""},
		// A multi-limit run's limits and cost are resolved once, at its
		// first request; one that is bad fails each of its requests.
		{"multi run with a bad limit fails each", lua.Batch, []string{"bl1:a", "bl1:b", "bl2:a", "bl2:b"},
			[]string{"2", "fixed", "2", "1000000", "0", "nope", "3", "60000000", "0", "0", "0",
				"1", "2", "2", "1", "0", "1", "2", now},
			"-1\n0\n0\n0\n0\n4\n0\n0\n0\n0\nERR sluice: unknown algorithm \"nope\"", ""},
		{"multi run with a bad cost fails each", lua.Batch, []string{"bc1:a", "bc1:b", "bc2:a", "bc2:b"},
			[]string{"1", "fixed", "2", "1000000", "0", "0", "0",
				"1", "2", "2", "x", "0", "1", "1", now},
			"-1\n0\n0\n0\n0\n4\n0\n0\n0\n0\nERR sluice: invalid cost \"x\": want an integer in [0, 2^53)", ""},
		// A run: three requests on one key under GCRA (10 a second,
		// burst 9) and a fixed window (3 a minute), the second with a
		// bad cost. Each limit's key is read once and written once, and
		// the third goes on from the first.
		{"multi run with a bad cost", lua.Batch, []string{"h:b", "h:d", "h:b", "h:d", "h:b", "h:d"},
			[]string{"2", "gcra", "10", "1000000", "9", "fixed", "3", "60000000", "0", "0", "0",
				"3", "1", "2", "1", "0", "1", "2", "1", "2", "x", "0", "1", "2", "1", "2", "1", "0", "1", "2", now},
			"1\n9\n0\n100000\n0\n2\n-7\n0\n59900000\n0\n" + // the first's two replies
				"-1\n0\n0\n0\n0\n2\n0\n0\n0\n0\n" + // the second's error, for each limit
				"1\n8\n0\n200000\n0\n2\n-7\n0\n59800000\n0\n" + // the third's
				"ERR sluice: invalid cost \"x\": want an integer in [0, 2^53)", ""},
		{"multi run stored both charges", lua.Batch, []string{"h:b", "h:d"},
			[]string{"2", "gcra", "10", "1000000", "9", "fixed", "3", "60000000", "0", "0", "0",
				"1", "1", "2", "0", "1", "1", "2", now},
			"1\n8\n0\n200000\n0\n2\n-7\n0\n59800000\n0", ""},
		{"multi run ending at a bad cost stores the charge before it", lua.Batch, []string{"e:b", "e:d", "e:b", "e:d"},
			[]string{"2", "gcra", "10", "1000000", "9", "fixed", "3", "60000000", "0", "0", "0",
				"2", "1", "2", "1", "0", "1", "2", "1", "2", "x", "0", "1", "2", now},
			"1\n9\n0\n100000\n0\n2\n-7\n0\n59900000\n0\n-1\n0\n0\n0\n0\n2\n0\n0\n0\n0\n" +
				"ERR sluice: invalid cost \"x\": want an integer in [0, 2^53)", ""},
		{"multi run's charge is stored", lua.Batch, []string{"e:b", "e:d"},
			[]string{"2", "gcra", "10", "1000000", "9", "fixed", "3", "60000000", "0", "0", "0",
				"1", "1", "2", "0", "1", "1", "2", now},
			"1\n9\n0\n100000\n0\n2\n-7\n0\n59900000\n0", ""},
		// An acquire that starts after its deadline takes no lease: the
		// next, on time, finds the one slot free.
		{"late acquire", lua.Lease, []string{"lz"}, []string{"acquire", "1", "1000000", "a", "1", now}, "",
			"LATE sluice: the acquire started after its deadline, and took no lease"},
		{"acquire after a late one", lua.Lease, []string{"lz"}, []string{"acquire", "1", "1000000", "b", "0", now},
			"1\n1\n0\n0\n0", ""},
		{"batch limit count", lua.Batch, []string{"a"}, []string{"two"}, "",
			`ERR sluice: invalid number of limits "two"`},
		{"bad now", lua.Batch, []string{"a"}, one("fixed", "1", "1000", "0", "1", "0", "soon"), "",
			`ERR sluice: invalid pinned now "soon"`},
		{"zero period", lua.Batch, []string{"a"}, one("fixed", "1", "0", "0", "1", "0"),
			"-1\n0\n0\n0\n0\nERR sluice: rate and period must be at least 1", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := eval(c.script, c.keys, c.args...)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v; want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("reply\n%s\nwant\n%s", got, c.want)
			}
		})
	}
	// Every key written got a TTL: on a pinned clock, an expire time that
	// carries the state's end (see prelude.lua).
	for _, k := range []string{"g", "l", "l2", "f", "m:b", "m:d"} {
		ttl, err := srv.Do("PTTL", k)
		if err != nil || ttl == "-1" || ttl == "-2" {
			t.Errorf("PTTL %s = %s, %v", k, ttl, err)
		}
	}
}

// TestStoredForms: state is stored as Redis prints a Lua number, which
// after 7.0 is the shortest form that reads back exactly and may have an
// exponent; the scripts read either form back as the same time.
func TestStoredForms(t *testing.T) {
	srv := redistest.Start(t)
	const now = "1767225600000000"
	// GCRA at one per second, burst 4: a state one second ahead leaves
	// three more, whichever way the time is written.
	for _, stored := range []string{"1767225601000000", "1.767225601e+15", "1.767225601E15"} {
		// On a pinned clock a key's expire time carries its state's end
		// (see prelude.lua): here, one second ahead.
		if _, err := srv.Do("SET", "g", stored, "PXAT", "6270825228370496"); err != nil {
			t.Fatal(err)
		}
		got, err := srv.Do("EVAL", lua.Batch.Source, "1", "g", "1", "gcra", "1", "1000000", "4", "1", "1", "1", "1", "1", "1", "1", "1", "0", now, "0") // a peek
		if err != nil {
			t.Fatalf("%s: %v", stored, err)
		}
		got = body(t, got)
		if want := "1\n3\n0\n2000000\n0"; got != want {
			t.Errorf("state %s: reply\n%s\nwant\n%s", stored, got, want)
		}
	}
}

// TestIdleKeyTakesOneCommand: an admission on an empty key stores its
// state with the one SET NX GET that found the key empty; a busy key takes
// a second command.
func TestIdleKeyTakesOneCommand(t *testing.T) {
	srv := redistest.Start(t)
	calls := func() string {
		info, err := srv.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(info, "\n") {
			for _, c := range []string{"cmdstat_get:", "cmdstat_set:"} {
				if strings.HasPrefix(line, c) {
					calls, _, _ := strings.Cut(strings.TrimPrefix(line, c), ",")
					got = append(got, c+calls)
				}
			}
		}
		return strings.Join(got, " ")
	}
	for _, name := range []string{"gcra", "leaky"} {
		t.Run(name, func(t *testing.T) {
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"EVAL", lua.Batch.Source, "1", name + "-idle"}, noDeadline(one(name, "1", "1000000", "5", "1", "0")...)...)
			if _, err := srv.Do(args...); err != nil {
				t.Fatal(err)
			}
			if got := calls(); got != "cmdstat_set:calls=1" {
				t.Errorf("an admission on an empty key: %s; want one SET and no GET", got)
			}
			if _, err := srv.Do(args...); err != nil {
				t.Fatal(err)
			}
			if got := calls(); got != "cmdstat_set:calls=3" {
				t.Errorf("then one on the busy key: %s; want two SETs more", got)
			}
			// In a run of keys, a busy key between idle ones takes its
			// second command only: the claim that found it busy read it.
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			run := []string{"1", name, "1", "1000000", "5", "1", "3", "1", "1", "0", "1", "3", "1", "0"}
			args = append([]string{"EVAL", lua.Batch.Source, "3", name + "-a", name + "-idle", name + "-b"}, noDeadline(run...)...)
			if _, err := srv.Do(args...); err != nil {
				t.Fatal(err)
			}
			if got := calls(); got != "cmdstat_set:calls=4" {
				t.Errorf("idle, busy, idle: %s; want four SETs and no GET", got)
			}
		})
	}
}

// TestLibrary: the batch library loads under its hashed names, answers as
// the script does, and a call does not inherit the one before's state: a
// library's top-level locals outlive a call, and a pinned clock left
// behind would give the next, unpinned call's key an expiry tens of
// millennia ahead.
func TestLibrary(t *testing.T) {
	srv := redistest.Start(t)
	l := lua.BatchLibrary
	if !strings.HasPrefix(l.Name, "sluice_") || l.Function != "sluice_batch_"+strings.TrimPrefix(l.Name, "sluice_") {
		t.Fatalf("names %q, %q: want sluice_<hex> and sluice_batch_<hex>", l.Name, l.Function)
	}
	if got, err := srv.Do("FUNCTION", "LOAD", l.Source); err != nil || got != l.Name {
		t.Fatalf("FUNCTION LOAD: %q, %v; want %q", got, err, l.Name)
	}
	const now = "1767225600000000"
	fcall := func(key string, args ...string) string {
		t.Helper()
		got, err := srv.Do(append([]string{"FCALL", l.Function, "1", key}, noDeadline(args...)...)...)
		if err != nil {
			t.Fatalf("FCALL %s: %v", key, err)
		}
		return body(t, got)
	}
	eval := func(key string, args ...string) string {
		t.Helper()
		got, err := srv.Do(append([]string{"EVAL", lua.Batch.Source, "1", key}, noDeadline(args...)...)...)
		if err != nil {
			t.Fatalf("EVAL %s: %v", key, err)
		}
		return body(t, got)
	}
	for _, alg := range []string{"fixed", "log", "sliding", "token", "leaky", "gcra"} {
		for i := 0; i < 3; i++ {
			args := one(alg, "2", "1000000", "1", "1", "0", now)
			if f, e := fcall("f:"+alg, args...), eval("e:"+alg, args...); f != e {
				t.Errorf("%s, call %d: FCALL replies %q, EVAL %q", alg, i, f, e)
			}
		}
	}
	// The library defines each algorithm once for all its calls: a call
	// under another limit of the same algorithm answers as the script,
	// which defines it afresh, does.
	for _, alg := range []string{"fixed", "log", "sliding", "token", "leaky", "gcra"} {
		for i, rate := range []string{"3", "7", "2"} {
			args := one(alg, rate, "1000000", "1", "2", "0", now)
			key := alg + ":" + rate
			if f, e := fcall("f:"+key, args...), eval("e:"+key, args...); f != e {
				t.Errorf("%s, limit %d: FCALL replies %q, EVAL %q", alg, i, f, e)
			}
		}
	}
	fcall("pinned", one("gcra", "1", "1000000", "4", "1", "0", now)...)
	fcall("unpinned", one("gcra", "1", "1000000", "4", "1", "0")...)
	ttl, err := srv.Do("PTTL", "unpinned")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.ParseInt(ttl, 10, 64); n < 1 || n > 2000 {
		t.Errorf("the unpinned call's key has PTTL %s ms, want at most its period (1000 ms): the pinned call before it left its clock pinned", ttl)
	}
	// A claim worked out in one call serves the calls after it at their
	// own time: the value an empty key gets moves on with Redis's clock.
	claim := one("gcra", "1", "1000000", "4", "1", "0")
	fcall("claim:1", claim...)
	time.Sleep(20 * time.Millisecond)
	fcall("claim:2", claim...)
	var z [2]int64
	for i, key := range []string{"claim:1", "claim:2"} {
		v, err := srv.Do("GET", key)
		if err != nil {
			t.Fatal(err)
		}
		if z[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("%s holds %q: %v", key, v, err)
		}
	}
	if z[1]-z[0] < 20000 {
		t.Errorf("two claims 20 ms apart stored %d and %d: want the second at least 20,000 µs later", z[0], z[1])
	}
	// Cross-slot keys are the flag's business on Cluster; here it must
	// at least be declared.
	list, err := srv.Do("FUNCTION", "LIST", "LIBRARYNAME", l.Name)
	if err != nil || !strings.Contains(list, "allow-cross-slot-keys") {
		t.Errorf("FUNCTION LIST: %q, %v: want the flag allow-cross-slot-keys", list, err)
	}
}

// TestUndeclaredKeys: a call that declares no keys (a Cluster master's
// part of a batch) and carries them in ARGV, after their number, answers
// as one that declares them, with few keys and with more than Lua 5.1
// unpacks at once.
func TestUndeclaredKeys(t *testing.T) {
	srv := redistest.Start(t)
	for _, n := range []int{3, 9000} {
		size := strconv.Itoa(n)
		args := noDeadline("1", "gcra", "10", "1000000", "10", "1", size, "1", "1", "0", "1", size, "1", "0")
		declared := []string{"EVAL", lua.Batch.Source, size}
		undeclared := []string{"EVAL", lua.Batch.Source, "0", size}
		for i := range n {
			declared = append(declared, "d:"+size+":"+strconv.Itoa(i))
			undeclared = append(undeclared, "u:"+size+":"+strconv.Itoa(i))
		}
		want, err := srv.Do(append(declared, args...)...)
		if err != nil {
			t.Fatalf("%d keys declared: %v", n, err)
		}
		got, err := srv.Do(append(undeclared, args...)...)
		if err != nil {
			t.Fatalf("%d keys in ARGV: %v", n, err)
		}
		if body(t, got) != body(t, want) {
			t.Errorf("%d keys in ARGV: reply\n%s\nwant, as declared,\n%s", n, body(t, got), body(t, want))
		}
		if v, err := srv.Do("EXISTS", "u:"+size+":"+strconv.Itoa(n-1)); err != nil || v != "1" {
			t.Errorf("%d keys in ARGV: the last key exists: %q, %v", n, v, err)
		}
	}
}
