package respserver

import (
	"strings"
	"testing"
)

func TestFrameGuard(t *testing.T) {
	valid := []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$8\r\nRL.FIXED\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n",
		"PING\r\nECHO hi\n\r\n",
		"*+1\r\n$+4\r\nPING\r\n",
		"*1\r\n$10\r\n\r\n\r\n\r\n\r\n\r\n*1\r\n$4\r\nPING\r\n", // a bulk holding CRLFs
		"*4096\r\n",
	}
	for _, in := range valid {
		for _, chunk := range []int{1, 3, len(in)} {
			g := frameGuard{maxArgs: DefaultMaxArgs, maxBulk: 1 << 20}
			for i := 0; i < len(in); i += chunk {
				part := in[i:min(i+chunk, len(in))]
				if n, msg := g.scan([]byte(part)); msg != "" || n != len(part) {
					t.Errorf("%q in chunks of %d: %d, %q", in, chunk, n, msg)
				}
			}
			if strings.HasSuffix(in, "\r\n") && in != "*4096\r\n" && g.state != gStart {
				t.Errorf("%q in chunks of %d: ends in state %d", in, chunk, g.state)
			}
		}
	}
	for _, tc := range []struct {
		in, msg string
		ok      int
	}{
		{"*4097\r\n", "Protocol error: invalid multibulk length", 4},
		{"*1\r\n$4\r\nPING\r\n*4444444444444444444\r\n", "Protocol error: invalid multibulk length", 18},
		{"*1\r\n$1048577\r\n", "Protocol error: invalid bulk length", 11},
		{"*2\r\n$1\r\na\r\n$99999999999999999999\r\n", "Protocol error: invalid bulk length", 18},
		{strings.Repeat("x", maxInline+1), "Protocol error: too big inline request", maxInline},
		// Malformed frames stop the guard at their first bad byte.
		{"*-1\r\n*4444444444444444444\r\n", "Protocol error: invalid multibulk length", 1},
		{"*0\r\n", "Protocol error: invalid multibulk length", 3},
		{"*1\r\nX", "Protocol error: expected '$', got 'X'", 4},
		{"*1\r\n\x00", "Protocol error: expected '$', got '\x00'", 4},
		{"*1\r\n$-1\r\n", "Protocol error: invalid bulk length", 5},
		{"*1\r\n$4\rX", "Protocol error: invalid bulk length", 7},
		{"*x\r\n", "Protocol error: invalid multibulk length", 1},
	} {
		g := frameGuard{maxArgs: DefaultMaxArgs, maxBulk: 1 << 20}
		n, msg := g.scan([]byte(tc.in))
		if msg != tc.msg || n != tc.ok {
			t.Errorf("%.40q: %d, %q; want %d, %q", tc.in, n, msg, tc.ok, tc.msg)
		}
	}
}
