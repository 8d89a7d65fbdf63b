package redisobserve

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/resp"
)

// A warning that repeats is logged once a warnEvery per key, the next
// line carrying the count of those not logged; other keys are apart.
func TestWarnerRateLimits(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	w := newWarner(slog.New(slog.NewTextHandler(&buf, nil)), 30*time.Second, func() time.Time { return now })
	for range 142 { // a wrong Sentinel address's 10 seconds
		w.warn("refused", "cannot reach", "cause", "refused")
		now = now.Add(70 * time.Millisecond)
	}
	w.warn("auth", "wrong password")
	now = now.Add(30 * time.Second)
	w.warn("refused", "cannot reach", "cause", "refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines; want 3 (the first, the other key's, the one after the interval):\n%s", len(lines), buf.String())
	}
	if strings.Contains(lines[0], "repeats") || !strings.Contains(lines[1], "wrong password") || !strings.Contains(lines[2], "repeats=141") {
		t.Errorf("lines:\n%s\nwant the first alone, then the other key, then repeats=141", buf.String())
	}
}

// The reachability changes once per outage; a failure that repeats with
// its cause is counted, and said again only after warnEvery; a new cause
// is said at once.
func TestObserve(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	o := &Observer{log: slog.New(slog.NewTextHandler(&buf, nil)), now: func() time.Time { return now }}
	o.warner = newWarner(o.log, warnEvery, o.now)
	refused := fmt.Errorf("dial: %w", errors.New("connect: connection refused"))
	o.Observe(nil)
	start := now
	now = now.Add(time.Second)
	for range 10 {
		o.Observe(refused)
		now = now.Add(time.Second)
	}
	down := o.Reach()
	if down.Up || !down.Since.Equal(start.Add(time.Second)) || down.Cause != CauseRefused || down.Failures[CauseRefused] != 10 {
		t.Fatalf("after 10 refusals: %+v", down)
	}
	o.Observe(resp.ReplyError("WRONGPASS invalid username-password pair"))
	o.Observe(nil)
	up := o.Reach()
	if !up.Up || !up.Since.Equal(now) || up.Cause != CauseAuth {
		t.Fatalf("after recovery: %+v; want up since now, the last cause kept", up)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "cause=refused") || !strings.Contains(lines[1], "cause=auth") ||
		!strings.Contains(lines[2], "answers again") {
		t.Errorf("log:\n%s\nwant one line for the refusals, one for the new cause, one for the recovery", buf.String())
	}
}

func TestCauseOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Cause
	}{
		{nil, ""},
		{resp.ReplyError("NOAUTH Authentication required."), CauseAuth},
		{resp.ReplyError("WRONGPASS invalid username-password pair or user is disabled."), CauseAuth},
		{resp.ReplyError("ERR Protocol error: unauthenticated bulk length"), CauseAuth},
		{resp.ReplyError("ERR AUTH <password> called without any password configured for the default user."), CauseAuth},
		{resp.ReplyError("MOVED 3999 127.0.0.1:7001"), CauseMoved},
		{resp.ReplyError("ERR This instance has cluster support disabled"), CauseNotCluster},
		{resp.ReplyError("READONLY You can't write against a read only replica."), CauseReadOnly},
		{resp.ReplyError("OOM command not allowed when used memory > 'maxmemory'."), CauseOOM},
		{resp.ReplyError("ERR DB index is out of range"), CauseDB},
		{resp.ReplyError("NOPERM this user has no permissions to run the 'evalsha' command"), CauseNoPerm},
		{resp.ReplyError("ERR user_script:1: boom"), CauseOther},
		{&Error{Cause: CauseTLS, Err: errors.New("x")}, CauseTLS},
		{fmt.Errorf("wrapped: %w", &Error{Cause: CauseOOM, Err: errors.New("x")}), CauseOOM},
		{errors.New("dial tcp: lookup x on 1.1.1.1:53: no such host"), CauseUnknownHost},
		{errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority"), CauseTLS},
	} {
		if got := CauseOf(tc.err); got != tc.want {
			t.Errorf("CauseOf(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}

// infoField reads INFO's reply text, which a Redis (or a proxy) writes:
// whatever the text, it finds a field written on a line of its own.
func FuzzInfoField(f *testing.F) {
	f.Add("# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n", "allkeys-lru")
	f.Add("", "")
	f.Add("maxmemory_policy\r\n:x", "a:b")
	f.Fuzz(func(t *testing.T, info, value string) {
		if strings.ContainsAny(value, "\r\n") {
			return
		}
		_, _ = infoField(info, "maxmemory_policy")
		text := info + "\r\nmaxmemory_policy:" + value + "\r\n"
		got, ok := infoField(text, "maxmemory_policy")
		if !ok {
			t.Fatalf("no field in %q", text)
		}
		if before, found := infoField(info+"\r\n", "maxmemory_policy"); !found && got != value {
			t.Fatalf("got %q, want %q (none before: %q)", got, value, before)
		}
	})
}
