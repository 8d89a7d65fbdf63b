package monitor

import (
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
	h.Remove(ts) // dropped already: nothing to do
	h.Remove(tf)
	if h.On() {
		t.Error("On after every watcher went")
	}
}
