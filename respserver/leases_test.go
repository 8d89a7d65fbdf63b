package respserver

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzLeaseArgs: RL.ACQUIRE's and RL.RELEASE's parsers never panic,
// answer any bad input with one line, and copy what they keep: the
// request must not change when the read buffer is reused.
func FuzzLeaseArgs(f *testing.F) {
	for _, s := range []string{"jobs 2 10s", "jobs 2 10s a", "POLICY workers alice", "policy workers alice w1",
		"jobs 0 10", "jobs x 1ms", "jobs 2 10s \x00", "jobs b", "POLICY w a b", "jobs 9223372036854775808 1d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		fields := strings.Fields(line)
		for n := 3; n <= 5; n++ {
			if len(fields) < n-1 {
				return
			}
			args := [][]byte{[]byte("RL.ACQUIRE")}
			for _, a := range fields[:n-1] {
				args = append(args, []byte(a))
			}
			check := func(msg string) {
				if strings.ContainsAny(msg, "\r\n") {
					t.Fatalf("%q: a reply of more than one line: %q", line, msg)
				}
			}
			if n >= 4 {
				r, msg := parseAcquire(args)
				check(msg)
				before := r.Policy + "\x00" + r.Key + "\x00" + r.ID // a copy: concatenation allocates
				for _, a := range args {
					for i := range a {
						a[i] = 'X'
					}
				}
				if r.Policy+"\x00"+r.Key+"\x00"+r.ID != before {
					t.Fatalf("%q: the request changed with the buffer", line)
				}
				for k, a := range fields[:n-1] {
					args[k+1] = bytes.Clone([]byte(a))
				}
			}
			_, msg := parseRelease(args)
			check(msg)
		}
	})
}
