package respserver

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/resp"
)

// Fuzz targets for the command layer, beside the named regression table
// that keeps every input a fuzzer (or a person) found a bug with.

func fuzzServer(t testing.TB) *Server {
	t.Helper()
	srv, err := New(Config{Service: testService(t, memStore(t), testPolicies(t))})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// offlineClient is a connection without a network: exec and settle write
// into out, which the tests read back.
func offlineClient(s *Server) *client {
	return newClient(s, "offline")
}

// run executes commands on c and returns the replies, checking that they
// are well-formed RESP, one per command.
func run(t testing.TB, c *client, cmds [][][]byte) []string {
	t.Helper()
	want := 0
	for _, args := range cmds {
		if c.quit {
			break
		}
		if len(args) > 0 {
			want++
		}
		for c.command(args) { // held behind queued decisions: let them land first
			c.settle()
		}
	}
	c.settle()
	replies := takeReplies(t, c)
	if len(replies) != want {
		t.Fatalf("%d replies to %d commands: %q", len(replies), want, replies)
	}
	return replies
}

func startsWithCode(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	return code != "" && strings.ToUpper(code) == code
}

// splitCommands reads fuzz input as lines of space-separated arguments.
func splitCommands(data []byte) [][][]byte {
	var cmds [][][]byte
	for _, line := range bytes.Split(data, []byte("\n")) {
		var args [][]byte
		for _, a := range bytes.Split(line, []byte(" ")) {
			if len(a) > 0 {
				args = append(args, bytes.Clone(a)) // the server may keep keys
			}
		}
		cmds = append(cmds, args)
	}
	return cmds
}

// transcriptSeeds are the commands of every transcript.
func transcriptSeeds(t testing.TB) []string {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	var seeds []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			if cmd, ok := strings.CutPrefix(l, "> "); ok && !strings.Contains(cmd, "@repeat") && !strings.Contains(cmd, `"`) {
				seeds = append(seeds, cmd)
			}
		}
	}
	return seeds
}

func FuzzCommand(f *testing.F) {
	for _, s := range transcriptSeeds(f) {
		f.Add([]byte(s))
	}
	for _, r := range regressions {
		f.Add([]byte(strings.Join(r.cmds, "\n")))
	}
	// A connection that monitors what it runs itself: every later input
	// is fed to it too, until its unread lines pass the bound.
	f.Add([]byte("MONITOR\nRL.FIXED k 1 1m\nRL.FIXED k x 1m\nAUTH a b\nHELLO 3 AUTH default p\nCLIENT LIST\nCLIENT INFO\nCLIENT KILL ID 1\nRESET"))
	srv := fuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		run(t, offlineClient(srv), splitCommands(data))
	})
}

// FuzzReads feeds raw bytes through a connection's input, the parser
// (fuzzed alone by resp's FuzzFrames) and the command layer, once in one
// read and once in small reads (a byte a read, up to 64 bytes): a frame no
// parser expected must not take the process down, every reply must be
// well-formed, and how the bytes were split must not change a reply.
func FuzzReads(f *testing.F) {
	// Frames of every shape are resp's FuzzFrames seeds; these are
	// commands that do something, around a frame that breaks.
	for _, s := range []string{
		"*4\r\n$8\r\nRL.FIXED\r\n$1\r\nk\r\n$2\r\n10\r\n$2\r\n1m\r\nPING\r\n",
		"PING\r\nRL.GCRA k 1 1 1s\r\nRL.RESET k\r\nECHO \"a\\x00b\"\r\n",
		"*1\r\n$4\r\nPING\r\n*4444444444444444444\r\n",
		"RL.FIXED k 1 1m\r\n*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n",
	} {
		f.Add([]byte(s))
	}
	whole, piecewise := fuzzServer(f), fuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		a := feed(t, newClient(whole, "fuzz"), data, len(data))
		b := feed(t, newClient(piecewise, "fuzz"), data, max(1, len(data)/64))
		if a != b {
			t.Fatalf("replies depend on how the bytes were read:\nin one read: %q\nsmall reads: %q", a, b)
		}
	})
}

// feed sends data to c in reads of at most chunk bytes, as a transport
// does, and returns the replies, checked to be well-formed RESP.
func feed(t testing.TB, c *client, data []byte, chunk int) string {
	t.Helper()
	for len(data) > 0 && !c.quit {
		room := c.room()
		n := copy(room[:min(len(room), chunk)], data)
		data = data[n:]
		c.serveRead(n)
		c.compact()
	}
	return strings.Join(takeReplies(t, c), "\n")
}

// takeReplies reads back, and empties, what c has written, checking that
// every reply is well-formed RESP and every error starts with a code.
func takeReplies(t testing.TB, c *client) []string {
	t.Helper()
	rd := bufio.NewReader(bytes.NewReader(c.out))
	var replies []string
	for {
		r, err := readRendered(rd)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("malformed reply after %q: %v", replies, err)
		}
		if strings.HasPrefix(r, "-") && !startsWithCode(r[1:]) {
			t.Fatalf("error reply without a code: %q", r)
		}
		replies = append(replies, r)
	}
	c.out = c.out[:0]
	return replies
}

// FuzzPeriod checks the period and duration parsers the commands use:
// they never panic, a duration they accept agrees with time.ParseDuration
// where that reads it too, and a period is within its bounds.
func FuzzPeriod(f *testing.F) {
	for _, s := range []string{"0", "1", "-1", "1.5", "NaN", "inf", "+1", " 1",
		"500ms", "1s", "1m", "1h", "1d", "1h30m", "1.5s", "1d12h", "60", "-1s", "1x", "", "1e3s", ".5s", "5.s", "99999999999999999999h", "µs", "1µs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := engine.ParseDuration(s)
		if err == nil && d < 0 {
			t.Errorf("ParseDuration(%q) = %v, negative", s, d)
		}
		if std, stdErr := time.ParseDuration(s); stdErr == nil && err == nil && !strings.Contains(s, "d") && std != d && fracDigits(s) < 15 {
			t.Errorf("ParseDuration(%q) = %v, time.ParseDuration = %v", s, d, std)
		}
		if p, why := engine.ParsePeriod(s); why == "" && (p < engine.MinPeriod || p > engine.MaxPeriod) {
			t.Errorf("ParsePeriod(%q) = %v, out of bounds", s, p)
		}
	})
}

func fracDigits(s string) int {
	n, in := 0, false
	for _, c := range s {
		switch {
		case c == '.':
			in = true
		case c >= '0' && c <= '9':
			if in {
				n++
			}
		default:
			in = false
		}
	}
	return n
}

// regressions are inputs that once went wrong, by name, with the replies
// they must get.
var regressions = []struct {
	name    string
	cmds    []string
	replies []string
}{
	{"throttle quantity over burst takes nothing", []string{"CL.THROTTLE q 1 1 10 5", "CL.THROTTLE q 1 1 10 2"},
		[]string{"[1, 2, 2, -1, 0]", "[0, 2, 0, -1, 20]"}},
	{"throttle negative burst with a big quantity names max_burst", []string{"CL.THROTTLE q -5 1 10 100"},
		[]string{"-ERR invalid max_burst -5: must be between 0 and 999999999999"}},
	{"an empty command line is no command", []string{""}, nil},
	{"a period one byte past the bound", []string{"RL.FIXED k 1 3650d1ns"}, []string{"-ERR invalid period '3650d1ns': must be between 1ms and 3650d"}},
	{"a fraction of a day", []string{"RL.FIXED k 1 0.5d"}, []string{"[1, 1, 0, 0, 43200000]"}},
	{"peek only as the last argument", []string{"RL.FIXED k 1 1s PEEK 1"}, []string{"-ERR invalid option '1': expected PEEK or CHARGE"}},
	// Found by FuzzArgs (internal/resp/testdata/fuzz/FuzzArgs/81476e3145e0ed8c).
	{"leading zeros are not an integer, as in Redis", []string{"RL.FIXED k 0010 1s", "CL.THROTTLE k -0 1 1"},
		[]string{"-ERR invalid limit '0010': must be an integer", "-ERR invalid max_burst '-0': must be an integer"}},
	{"commands after QUIT are not run", []string{"QUIT", "PING"}, []string{"+OK"}},
	{"a long unknown name is cut at 128 bytes", []string{strings.Repeat("x", 200)},
		[]string{"-ERR unknown command '" + strings.Repeat("x", 128) + "', with args beginning with: "}},
}

func TestRegressions(t *testing.T) {
	srv := fuzzServer(t)
	for _, r := range regressions {
		t.Run(r.name, func(t *testing.T) {
			var cmds [][][]byte
			for _, c := range r.cmds {
				cmds = append(cmds, splitCommands([]byte(c))...)
			}
			got := run(t, offlineClient(srv), cmds)
			if strings.Join(got, "\n") != strings.Join(r.replies, "\n") {
				t.Errorf("got  %q\nwant %q", got, r.replies)
			}
		})
	}
}

// A connection remembers its last command to skip the lookup; a name that
// differs from it, by one byte or by length, must still be looked up.
func TestExecLastCommand(t *testing.T) {
	c := offlineClient(fuzzServer(t))
	cmds := [][][]byte{
		bytesArgs("RL.GCRA", "k", "1", "10", "1s"),
		bytesArgs("rl.gcra", "k", "1", "10", "1s"),
		bytesArgs("Rl.GcRa", "k", "1", "10", "1s"),
		bytesArgs("RL.GCRB", "k", "1", "10", "1s"),
		bytesArgs("RL.GCR", "k", "1", "10", "1s"),
		bytesArgs("RL.GCRAA", "k", "1", "10", "1s"),
		bytesArgs("PING"),
		bytesArgs("RL.TOKEN", "k", "1", "10", "1s"),
	}
	replies := run(t, c, cmds)
	for i, r := range replies {
		unknown := strings.HasPrefix(r, "-ERR unknown command")
		if want := i >= 3 && i <= 5; unknown != want {
			t.Errorf("%q: reply %q", cmds[i][0], r)
		}
	}
}

// FuzzPolicyArgs checks the parsers of RL.ALLOW's tail (cost, PEEK,
// DETAIL in any order) and of RL.RESET's POLICY form: they never panic,
// an error is one line starting with ERR, and what they accept reads back
// as given (DETAIL found exactly when a DETAIL was sent, the reset's keys
// the arguments after the policy's name).
func FuzzPolicyArgs(f *testing.F) {
	for _, s := range []string{"", "1", "DETAIL", "1 DETAIL", "detail 2 peek", "PEEK DETAIL", "1 PEEK DETAIL extra",
		"DETAIL DETAIL", "POLICY", "POLICY p", "POLICY p k", "POLICY p k1 k2", "policy", "x y z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tail := splitCommands([]byte(s))[0]
		args := append([][]byte{[]byte("RL.ALLOW"), []byte("p"), []byte("k")}, tail...)
		req, _, msg := parseAllow(nil, args)
		details := 0
		for _, a := range tail {
			if resp.Is(a, "detail") {
				details++
			}
		}
		switch {
		case msg != "":
			if !strings.HasPrefix(msg, "ERR ") || strings.ContainsAny(msg, "\r\n") {
				t.Errorf("RL.ALLOW p k %s: error %q", s, msg)
			}
		case req.Detail != (details == 1) || details > 1:
			t.Errorf("RL.ALLOW p k %s: Detail %v with %d DETAIL", s, req.Detail, details)
		case req.Cost < 0 && !strings.Contains(s, "-"):
			t.Errorf("RL.ALLOW p k %s: cost %d", s, req.Cost)
		}
		rargs := append([][]byte{[]byte("RL.RESET")}, tail...)
		if len(rargs) < 2 {
			return
		}
		byPolicy, policy, keys, msg := parseReset(rargs)
		if msg != "" {
			if !strings.HasPrefix(msg, "ERR ") || strings.ContainsAny(msg, "\r\n") {
				t.Errorf("RL.RESET %s: error %q", s, msg)
			}
			return
		}
		// The form is the first argument's, whatever the name: an empty
		// name is the policy form, never the inline one.
		if byPolicy != resp.Is(tail[0], "policy") {
			t.Errorf("RL.RESET %s: by policy %v", s, byPolicy)
		}
		from := 1
		if byPolicy {
			from = 3
		}
		if len(keys) != len(rargs)-from || len(keys) == 0 {
			t.Errorf("RL.RESET %s: policy %q keys %q", s, policy, keys)
		}
	})
}
