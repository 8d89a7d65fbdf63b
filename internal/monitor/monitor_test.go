package monitor

import (
	"strings"
	"testing"
	"time"
)

func bytesArgs(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// The line format, byte by byte, against what Redis writes.
func TestAppendMonitorLine(t *testing.T) {
	at := time.Unix(1767225600, 42000)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, `+1767225600.000042 [0 10.0.0.1:5] "PING"`},
		{[]string{"SET", "k", "a b\t\a\b\r\n\"\\\x7f"}, `+1767225600.000042 [0 10.0.0.1:5] "SET" "k" "a b\t\a\b\r\n\"\\\x7f"`},
		{[]string{"auth"}, `+1767225600.000042 [0 10.0.0.1:5] "auth"`},
		{[]string{"hello", "3", "auth", "u"}, `+1767225600.000042 [0 10.0.0.1:5] "hello" "3" "auth" "u"`},
		{[]string{"HELLO", "3", "AUTH", "u", "p", "AUTH", "v", "q"}, `+1767225600.000042 [0 10.0.0.1:5] "HELLO" "3" "AUTH" "(redacted)" "(redacted)" "AUTH" "(redacted)" "(redacted)"`},
		{[]string{""}, `+1767225600.000042 [0 10.0.0.1:5] ""`},
	} {
		if got := string(AppendLine(nil, at, "10.0.0.1:5", bytesArgs(tc.args...))); got != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.args, got, tc.want)
		}
	}
	if got := string(AppendLine(nil, time.Unix(5, 999999000), "a", bytesArgs("x"))); got != `+5.999999 [0 a] "x"` {
		t.Errorf("microseconds: %s", got)
	}
}

// A long argument is cut to MaxArgShown bytes with its length, and the
// arguments past MaxLine are counted: a line stays a small share of
// MaxBacklog whatever the command, so one command cannot close a monitor
// that keeps up.
func TestAppendLineBounded(t *testing.T) {
	at := time.Unix(1767225600, 42000)
	head := `+1767225600.000042 [0 a] `
	long := strings.Repeat("k", 2_000_000)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"at the bound", []string{"RL.GCRA", strings.Repeat("k", MaxArgShown)}, head + `"RL.GCRA" "` + strings.Repeat("k", MaxArgShown) + `"`},
		{"past it", []string{"RL.GCRA", long, "1"}, head + `"RL.GCRA" "` + strings.Repeat("k", MaxArgShown) + `"... (2000000 bytes) "1"`},
		{"escaped", []string{"X", strings.Repeat("\x00", MaxArgShown+1)}, head + `"X" "` + strings.Repeat(`\x00`, MaxArgShown) + `"... (1025 bytes)`},
	} {
		if got := string(AppendLine(nil, at, "a", bytesArgs(tc.args...))); got != tc.want {
			t.Errorf("%s: got %d bytes %.80q…, want %d bytes %.80q…", tc.name, len(got), got, len(tc.want), tc.want)
		}
	}
	many := make([]string, 4096)
	for i := range many {
		many[i] = long[:MaxArgShown+1]
	}
	got := AppendLine(nil, at, "a", bytesArgs(many...))
	if len(got) > MaxLine+2*(4*MaxArgShown) || !strings.HasSuffix(string(got), " more arguments)") {
		t.Errorf("4096 long arguments: a line of %d bytes ending %q", len(got), got[max(len(got)-40, 0):])
	}
	if e := AppendError(nil, long); len(e) > MaxArgShown+20 {
		t.Errorf("a long error: %d bytes", len(e))
	}
}

// watcher counts what the hub asks of it.
type watcher struct{ woken, behind int }

func (w *watcher) Wake()      { w.woken++ }
func (w *watcher) Behind(int) { w.behind++ }

// A line reaches every watcher; a watcher is woken only when its backlog
// was empty, drained by Take; one whose backlog would pass MaxBacklog is
// dropped and told so, and the others are fed on.
func TestHubFeedsWakesAndDrops(t *testing.T) {
	var h Hub
	if h.On() {
		t.Fatal("On with no watcher")
	}
	slow, fast := &watcher{}, &watcher{}
	ts, tf := h.Add(slow), h.Add(fast)
	if h.Len() != 2 || !h.On() {
		t.Fatalf("Len %d, On %v with two watchers", h.Len(), h.On())
	}
	h.Feed([]byte("a\r\n"))
	h.Feed([]byte("b\r\n"))
	if slow.woken != 1 || fast.woken != 1 {
		t.Fatalf("woken %d and %d times for two lines into empty backlogs; want once each", slow.woken, fast.woken)
	}
	if got := string(h.Take(tf, nil)); got != "a\r\nb\r\n" {
		t.Fatalf("Take: %q", got)
	}
	if n, ok := h.Backlog(fast); n != 0 || !ok {
		t.Fatalf("Backlog after Take: %d, %v", n, ok)
	}
	big := make([]byte, MaxBacklog/2)
	for range 3 {
		h.Feed(big)
		h.Take(tf, nil)
	}
	if slow.behind != 1 || fast.behind != 0 {
		t.Fatalf("behind: slow %d, fast %d; want the slow one dropped once", slow.behind, fast.behind)
	}
	if h.Len() != 1 {
		t.Fatalf("Len %d after dropping one", h.Len())
	}
	if _, ok := h.Backlog(slow); ok {
		t.Error("the dropped watcher still has a backlog")
	}
	// A line is measured with the backlog before it: one larger than
	// MaxBacklog into an empty backlog is kept.
	h.Feed(make([]byte, MaxBacklog+1))
	if fast.behind != 0 || h.Len() != 1 {
		t.Fatalf("a watcher that had taken everything was dropped for one line")
	}
	h.Take(tf, nil)
	h.Remove(ts) // dropped already: nothing to do
	h.Remove(tf)
	if h.On() {
		t.Error("On after every watcher went")
	}
}

// A decision's outcome with the explanation's fields: the names bare
// when they are plain words, quoted when a rule holds a space, a quote
// or a line break, so that a line stays one line of fields.
func TestAppendOutcome(t *testing.T) {
	state := []byte("used 3 of 3, back to full in 420ms")
	for _, tc := range []struct {
		name string
		o    Outcome
		want string
	}{
		{"plain", Outcome{Allowed: true, Remaining: 4, Path: "memory"},
			` -> allowed=1 remaining=4 retry_after_ms=0 path=memory`},
		{"policy", Outcome{Remaining: 0, RetryAfterMs: 420, Path: "redis", Policy: "api", Limit: "minute", Algorithm: "fixed_window", State: state},
			` -> allowed=0 remaining=0 retry_after_ms=420 path=redis policy=api limit=minute algorithm=fixed_window state="used 3 of 3, back to full in 420ms"`},
		{"shadow", Outcome{Allowed: true, Path: "redis", Shadow: true, Policy: "trial", Limit: "trial", Algorithm: "gcra", State: []byte("TAT now+5ms")},
			` -> allowed=1 remaining=0 retry_after_ms=0 path=redis shadow=refused policy=trial limit=trial algorithm=gcra state="TAT now+5ms"`},
		{"failure mode", Outcome{Allowed: true, Path: "fail_open", OnFailure: "open", Rule: "edge.remote_address", Limit: "edge.remote_address", Algorithm: "fixed_window", State: state},
			` -> allowed=1 remaining=0 retry_after_ms=0 path=fail_open on_failure=open rule=edge.remote_address limit=edge.remote_address algorithm=fixed_window state="used 3 of 3, back to full in 420ms"`},
		{"odd rule", Outcome{Path: "redis", Rule: "d.a b=\"c\"\n", Limit: "x", Algorithm: "gcra", State: []byte("TAT now+0ms")},
			` -> allowed=0 remaining=0 retry_after_ms=0 path=redis rule="d.a b=\"c\"\n" limit=x algorithm=gcra state="TAT now+0ms"`},
	} {
		if got := string(AppendOutcome(nil, tc.o)); got != tc.want+"\r\n" {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want+"\r\n")
		}
	}
}
