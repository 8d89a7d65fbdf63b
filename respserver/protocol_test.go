package respserver

import (
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/resp"
)

// redisProtocolCases are the cases of Redis's own tests/unit/protocol.tcl
// (redis/redis at 4f8cdc2) that apply to a server without keys, under
// their names there, then how Redis reads the numbers in a frame's
// headers (string2ll: an optional minus, no plus, no leading zero), probed
// on redis-server 7.0. Each sends bytes and expects Redis's replies; a
// connection left open must then answer PING with PONG. sluice, when set,
// is where Sluice answers otherwise on purpose, and why.
var redisProtocolCases = []struct {
	name         string
	send         string
	replies      []string // rendered as the transcripts render them
	closed       bool
	sluice       []string // Sluice's replies where they differ from Redis's
	sluiceCloses bool     // Sluice closes the connection where Redis does not
	why          string
}{
	{name: "Handle an empty query", send: "\r\n"},
	{name: "Negative multibulk length", send: "*-10\r\n"},
	{name: "Out of range multibulk length", send: "*3000000000\r\n",
		replies: []string{"-ERR Protocol error: invalid multibulk length"}, closed: true},
	{name: "Wrong multibulk payload header", send: "*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
		replies: []string{"-ERR Protocol error: expected '$', got 'f'"}, closed: true},
	{name: "Negative multibulk payload length", send: "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n",
		replies: []string{"-ERR Protocol error: invalid bulk length"}, closed: true},
	{name: "Out of range multibulk payload length", send: "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n",
		replies: []string{"-ERR Protocol error: invalid bulk length"}, closed: true},
	{name: "Non-number multibulk payload length", send: "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n",
		replies: []string{"-ERR Protocol error: invalid bulk length"}, closed: true},
	{name: "Multi bulk request not followed by bulk arguments", send: "*1\r\nfoo\r\n",
		replies: []string{"-ERR Protocol error: expected '$', got 'f'"}, closed: true},
	{name: "Generic wrong number of args", send: "*4\r\n$4\r\nping\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n",
		replies: []string{"-ERR wrong number of arguments for 'ping' command"}},
	{name: "Unbalanced number of quotes", send: "set \"\"\"test-key\"\"\" test-value\r\nping\r\n",
		replies: []string{"-ERR Protocol error: unbalanced quotes in request"}, closed: true},
	// The desync tests send a byte, then "payload" (the Tcl test's
	// "$payload" lost its dollar) until the server gives up: past 64 KiB
	// without a line's end.
	{name: "Protocol desync regression test #1", send: "\x00" + desyncPayload,
		replies: []string{"-ERR Protocol error: too big inline request"}, closed: true},
	{name: "Protocol desync regression test #2", send: "*\x00" + desyncPayload,
		replies: []string{"-ERR Protocol error: too big mbulk count string"}, closed: true,
		sluice: []string{"-ERR Protocol error: invalid multibulk length"},
		why:    "Redis waits up to 64 KiB for the count's CR (its strchr stops at the NUL); Sluice refuses the first byte that cannot be part of a count"},
	{name: "Protocol desync regression test #3", send: "$\x00" + desyncPayload,
		replies: []string{"-ERR Protocol error: too big inline request"}, closed: true},

	// Header numbers, as string2ll reads them.
	{name: "zero multibulk length is no command", send: "*0\r\n"},
	{name: "minus one multibulk length is no command", send: "*-1\r\n"},
	{name: "the most negative length is no command", send: "*-9223372036854775808\r\n"},
	{name: "a length below the most negative", send: "*-9223372036854775809\r\n",
		replies: []string{"-ERR Protocol error: invalid multibulk length"}, closed: true},
	{name: "minus zero", send: "*-0\r\n",
		replies: []string{"-ERR Protocol error: invalid multibulk length"}, closed: true},
	{name: "a lone minus", send: "*-\r\n",
		replies: []string{"-ERR Protocol error: invalid multibulk length"}, closed: true},
	{name: "no digits", send: "*\r\n",
		replies: []string{"-ERR Protocol error: invalid multibulk length"}, closed: true},
	{name: "leading zero in a multibulk length", send: "*01\r\n$4\r\nPING\r\n",
		replies: []string{"-ERR Protocol error: invalid multibulk length"}, closed: true},
	{name: "plus sign in a multibulk length", send: "*+1\r\n$4\r\nPING\r\n",
		replies: []string{"-ERR Protocol error: invalid multibulk length"}, closed: true},
	{name: "plus sign in a bulk length", send: "*1\r\n$+4\r\nPING\r\n",
		replies: []string{"-ERR Protocol error: invalid bulk length"}, closed: true},
	{name: "leading zero in a bulk length", send: "*1\r\n$04\r\nPING\r\n",
		replies: []string{"-ERR Protocol error: invalid bulk length"}, closed: true},
	{name: "minus zero bulk length", send: "*1\r\n$-0\r\n",
		replies: []string{"-ERR Protocol error: invalid bulk length"}, closed: true},
	{name: "an empty bulk", send: "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", replies: []string{`""`}},
	{name: "no command, then a command, in one read", send: "*0\r\n*-3\r\n\n*1\r\n$4\r\nECHO\r\n",
		replies: []string{"-ERR wrong number of arguments for 'echo' command"}},

	// Framing Redis does not check.
	{name: "a bulk longer than its length", send: "*2\r\n$4\r\nECHO\r\n$2\r\nhixx\r\n", replies: []string{`"hi"`},
		sluice: []string{"-ERR Protocol error: invalid bulk length"}, sluiceCloses: true,
		why: "Redis skips the two bytes after a bulk unseen; a frame that misstates a length is a client's bug, caught here"},
}

var desyncPayload = strings.Repeat("payload", resp.MaxInline/7+1)[:resp.MaxInline]

// TestRedisProtocol runs redisProtocolCases against a real redis-server,
// so that the table says what Redis does, and against Sluice.
func TestRedisProtocol(t *testing.T) {
	redis := redistest.Start(t, "appendonly no", `save ""`)
	_, sluice := startServer(t, Config{Service: testService(t, memStore(t), testPolicies(t))})
	for _, tc := range redisProtocolCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, side := range []struct{ name, addr string }{{"redis", redis.Addr}, {"sluice", sluice}} {
				want, closed := tc.replies, tc.closed
				if side.name == "sluice" && tc.sluice != nil {
					want, closed = tc.sluice, closed || tc.sluiceCloses
				}
				if !closed {
					want = append(append([]string(nil), want...), "+PONG")
				}
				if got := converse(t, side.addr, tc.send, !closed); !slices.Equal(got, want) {
					t.Errorf("%s answered %q\n want %q", side.name, got, want)
				}
			}
		})
	}
}

// redisBeforeAuthCases are Redis's limits before authentication, probed
// on redis-server 7.0 with requirepass: a multibulk count over 10 or a
// bulk over 16 KiB is refused with its own error and the connection
// closed, answered after the commands before it; an AUTH before the frame
// in the same read lifts the limit, as Redis parses a command only once
// the ones before it have run. Commands are sent by a client that has not
// authenticated; the password is "pw".
var redisBeforeAuthCases = []struct {
	name    string
	send    string
	replies []string
	closed  bool
	sluice  []string // Sluice's replies where they differ from Redis's, and why
	why     string
}{
	{name: "a multibulk count over 10", send: "*11\r\n",
		replies: []string{"-ERR Protocol error: unauthenticated multibulk length"}, closed: true},
	{name: "a multibulk count of 10", send: "*10\r\n" + strings.Repeat("$4\r\nPING\r\n", 10),
		replies: []string{"-NOAUTH Authentication required."},
		sluice:  []string{"-ERR wrong number of arguments for 'ping' command"},
		why:     "Sluice's command table gives PING at most two arguments, checked before authentication as Redis checks a command's arity (Redis's PING, of arity -1, refuses more in its handler, after authentication)"},
	{name: "a bulk over 16 KiB", send: "*1\r\n$16385\r\n",
		replies: []string{"-ERR Protocol error: unauthenticated bulk length"}, closed: true},
	{name: "a bulk of 16 KiB", send: "*2\r\n$4\r\nECHO\r\n$16384\r\n" + strings.Repeat("x", 16384) + "\r\n",
		replies: []string{"-NOAUTH Authentication required."}},
	{name: "a second bulk over 16 KiB", send: "*2\r\n$4\r\nECHO\r\n$1000000\r\n",
		replies: []string{"-ERR Protocol error: unauthenticated bulk length"}, closed: true},
	{name: "a count over 10 after a command", send: "*1\r\n$4\r\nPING\r\n*100000\r\n",
		replies: []string{"-NOAUTH Authentication required.", "-ERR Protocol error: unauthenticated multibulk length"}, closed: true},
	{name: "a bulk over 16 KiB after a command", send: "*1\r\n$4\r\nPING\r\n*1\r\n$20000\r\n",
		replies: []string{"-NOAUTH Authentication required.", "-ERR Protocol error: unauthenticated bulk length"}, closed: true},
	{name: "a negative count", send: "*-1\r\n"},
	{name: "an inline line over 16 KiB", send: "ECHO " + strings.Repeat("a", 20000) + "\r\n",
		replies: []string{"-NOAUTH Authentication required."}},
	{name: "AUTH, then a large frame in the same read",
		send:    "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$4\r\nECHO\r\n$20000\r\n" + strings.Repeat("y", 20000) + "\r\n*12\r\n$4\r\nECHO\r\n" + strings.Repeat("$1\r\nz\r\n", 11),
		replies: []string{"+OK", `"` + strings.Repeat("y", 20000) + `"`, "-ERR wrong number of arguments for 'echo' command"}},
	{name: "a wrong AUTH, then a large frame", send: "*2\r\n$4\r\nAUTH\r\n$2\r\nno\r\n*1\r\n$20000\r\n",
		replies: []string{"-WRONGPASS invalid username-password pair or user is disabled.", "-ERR Protocol error: unauthenticated bulk length"}, closed: true},
}

// TestRedisProtocolBeforeAuth runs redisBeforeAuthCases against a real
// redis-server with requirepass and against Sluice with RequirePass: the
// same replies, byte for byte, and the same closes.
func TestRedisProtocolBeforeAuth(t *testing.T) {
	redis := redistest.Start(t, "appendonly no", `save ""`)
	// Set once started: redistest's start waits for a PING to answer.
	if r, err := redis.Do("CONFIG", "SET", "requirepass", "pw"); err != nil || r != "OK" {
		t.Fatalf("CONFIG SET requirepass: %q, %v", r, err)
	}
	_, sluice := startServer(t, Config{Service: testService(t, memStore(t), testPolicies(t)), RequirePass: "pw"})
	for _, tc := range redisBeforeAuthCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, side := range []struct{ name, addr string }{{"redis", redis.Addr}, {"sluice", sluice}} {
				want := tc.replies
				if side.name == "sluice" && tc.sluice != nil {
					want = tc.sluice
				}
				if !tc.closed {
					// Still open, still not authenticated (AUTH's case
					// aside): the PING that follows is answered.
					pong := "-NOAUTH Authentication required."
					if strings.HasPrefix(tc.name, "AUTH") {
						pong = "+PONG"
					}
					want = append(append([]string(nil), want...), pong)
				}
				done := func(got []string) bool { return !tc.closed && len(got) == len(want) }
				if got := converseUntil(t, side.addr, tc.send, !tc.closed, done); !slices.Equal(got, want) {
					t.Errorf("%s answered %.200q\n want %.200q", side.name, got, want)
				}
			}
		})
	}
}

// converse sends in on a new connection, then PING if ping, and returns
// the replies until the server closes the connection or, with ping, until
// PONG. A close with bytes unread is a reset: a close all the same.
func converse(t *testing.T, addr, in string, ping bool) []string {
	t.Helper()
	return converseUntil(t, addr, in, ping, func(got []string) bool { return ping && got[len(got)-1] == "+PONG" })
}

// converseUntil is converse that stops reading once done says so: for a
// connection whose PING may be refused.
func converseUntil(t *testing.T, addr, in string, ping bool, done func(got []string) bool) []string {
	t.Helper()
	c := dialTest(t, addr)
	c.send(t, []byte(in))
	if ping {
		c.send(t, []byte("*1\r\n$4\r\nPING\r\n"))
	}
	var got []string
	for len(got) < 10 {
		r, err := c.reply(t)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				got = append(got, "error: "+err.Error())
			}
			return got
		}
		if got = append(got, r); done(got) {
			return got
		}
	}
	return got
}

// TestRequestLimit: Config.MaxRequestBytes (16 MiB by default) bounds a
// command as sent, its framing included. A command of exactly that size
// is run. A bulk header announcing more than the command has room for is
// refused at once, before the client sends the bytes: a bulk too large
// for any command with Redis's error for a bulk past proto-max-bulk-len.
func TestRequestLimit(t *testing.T) {
	const limit = 16 << 20
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), testPolicies(t))})
	head := func(n int) string { return "*2\r\n$4\r\nECHO\r\n$" + strconv.Itoa(n) + "\r\n" }
	fit := limit - len(head(limit)) - 2 // the largest argument ECHO can take
	if len(head(fit))+fit+2 != limit {
		t.Fatalf("bad arithmetic: %d", len(head(fit))+fit+2)
	}

	c := dialTest(t, addr)
	c.send(t, []byte(head(fit)+strings.Repeat("x", fit)+"\r\n"))
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := c.rd.ReadString('\n'); err != nil || line != "$"+strconv.Itoa(fit)+"\r\n" {
		t.Fatalf("a command of exactly %d bytes: %q, %v", limit, line, err)
	}

	for n, want := range map[int]string{
		fit + 1:    "-ERR Protocol error: request larger than the server's limit",
		limit - 13: "-ERR Protocol error: request larger than the server's limit", // $16777203\r\n, the data, \r\n: 16 MiB
		limit - 12: "-ERR Protocol error: invalid bulk length",
		limit:      "-ERR Protocol error: invalid bulk length",
	} {
		c := dialTest(t, addr)
		c.send(t, []byte(head(n)))
		if r, err := c.reply(t); r != want {
			t.Errorf("an argument of %d bytes: %q, %v; want %q", n, r, err, want)
		}
	}
}
