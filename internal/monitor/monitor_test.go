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
