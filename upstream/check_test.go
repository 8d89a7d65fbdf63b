package upstream_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redisobserve"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// Check passes where decisions work and fails where they would not,
// including where PING (and FUNCTION LOAD) still answers, and names the cause: in its error,
// in the Observer's Reach, and in the first line the store logs.
func TestCheck(t *testing.T) {
	r := redistest.Start(t)
	mustDo(t, r, "ACL", "SETUSER", "pingonly", "on", ">pw", "~*", "+ping", "+hello", "+auth", "+function")
	replica := redistest.Start(t, "replicaof 127.0.0.1 "+fmt.Sprint(r.Port))
	full := redistest.Start(t, "maxmemory 1mb", "maxmemory-policy noeviction")
	full.FillUntil(t, func(_ *redis.Client, err error) bool { return err != nil && strings.HasPrefix(err.Error(), "OOM") })
	// One Cluster node that serves every slot.
	node := redistest.Start(t, "cluster-enabled yes", "cluster-config-file nodes.conf")
	mustDo(t, node, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	for _, tc := range []struct {
		name  string
		opt   *redis.Options
		want  string // "" for a pass
		cause redisobserve.Cause
	}{
		{"healthy", &redis.Options{Addr: r.Addr}, "", ""},
		{"an ACL user without EVALSHA", &redis.Options{Addr: r.Addr, Username: "pingonly", Password: "pw"}, "NOPERM", redisobserve.CauseNoPerm},
		{"a wrong password", &redis.Options{Addr: r.Addr, Username: "pingonly", Password: "nope"}, "WRONGPASS", redisobserve.CauseAuth},
		{"nothing listening", &redis.Options{Addr: "127.0.0.1:" + fmt.Sprint(redistest.FreePort(t)), MaxRetries: -1}, "connect", redisobserve.CauseRefused},
		{"an unknown host", &redis.Options{Addr: "sluice-no-such-host.invalid:6379", MaxRetries: -1}, "no such host", redisobserve.CauseUnknownHost},
		{"a wrong database", &redis.Options{Addr: r.Addr, DB: 99}, "DB index", redisobserve.CauseDB},
		{"a replica", &redis.Options{Addr: replica.Addr}, "READONLY", redisobserve.CauseReadOnly},
		{"a full Redis", &redis.Options{Addr: full.Addr}, "OOM", redisobserve.CauseOOM},
		{"a Cluster node as one server", &redis.Options{Addr: node.Addr}, "cluster_enabled", redisobserve.CauseMoved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := redis.NewClient(tc.opt)
			defer client.Close()
			var log bytes.Buffer
			lg := slog.New(slog.NewTextHandler(&log, nil))
			obs := newObserver(t, client, lg)
			s, err := upstream.New(upstream.Config{Client: client, Log: lg, Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err = s.Check(ctx)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check = %v; want a pass", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check = %v; want an error with %q", err, tc.want)
			}
			if got := redisobserve.CauseOf(err); got != tc.cause {
				t.Errorf("cause %q; want %q", got, tc.cause)
			}
			reach := obs.Reach()
			if !reach.Known || reach.Up != (tc.want == "") || reach.Cause != tc.cause {
				t.Errorf("Reach %+v; want up %v with cause %q", reach, tc.want == "", tc.cause)
			}
			first := firstWarning(log.String())
			if tc.want != "" && (!strings.Contains(first, "cause="+string(tc.cause)) ||
				!strings.Contains(first, tc.cause.Hint())) {
				t.Errorf("first warning %q; want one naming cause %s and its hint", first, tc.cause)
			}
			if tc.want != "" && strings.Contains(log.String(), "FUNCTION LOAD") {
				t.Errorf("log %q: a failure that is not about FUNCTION moved the store to EVALSHA", log.String())
			}
			if tc.name == "an ACL user without EVALSHA" {
				if perr := client.Ping(ctx).Err(); perr != nil {
					t.Fatalf("PING as that user: %v; the point is that PING passes where Check fails", perr)
				}
			}
		})
	}
}

// firstWarning is the first line of log at level WARN.
func firstWarning(log string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level=WARN") {
			return line
		}
	}
	return ""
}

// A failure that is not about FUNCTION leaves Functions to the next
// check: once the password is right, the next check loads the library
// and batches call it, with no minute's wait for a retry.
func TestCheckLoadsFunctionsOnceFixed(t *testing.T) {
	srv := redistest.Start(t)
	mustDo(t, srv, "ACL", "SETUSER", "late", "off", ">pw", "~*", "&*", "+@all")
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "late", Password: "pw", MaxRetries: -1})
	defer client.Close()
	var log bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&log, nil))
	obs := newObserver(t, client, lg)
	s := newStore(t, upstream.Config{Client: client, Log: lg, Observer: obs})
	ctx := context.Background()
	if err := s.Check(ctx); redisobserve.CauseOf(err) != redisobserve.CauseAuth {
		t.Fatalf("Check as a disabled user: %v; want cause auth", err)
	}
	mustDo(t, srv, "ACL", "SETUSER", "late", "on")
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check once enabled: %v", err)
	}
	if s.Scripts() != "functions" || !obs.Reach().Up {
		t.Fatalf("once enabled: %s, %+v; want functions at once, and up", s.Scripts(), obs.Reach())
	}
	if !strings.Contains(log.String(), "answers again") {
		t.Errorf("log %q; want a line that the upstream answers again", log.String())
	}
}
