package upstream_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/lua"
	"github.com/sluice-rl/sluice/upstream"
)

// TestFunctions: Check loads the batch library and batches call it from
// then on (FCALL, and no EVALSHA); a Redis that lost it (FUNCTION FLUSH,
// as a failover to an empty master) gets it again within the batch that
// found it missing, and the next batch calls it again.
func TestFunctions(t *testing.T) {
	srv, client := standalone(t)
	var log bytes.Buffer
	s := newStore(t, upstream.Config{Client: client, Log: slog.New(slog.NewTextHandler(&log, nil))})
	if got := s.Scripts(); got != "evalsha" {
		t.Fatalf("before Check: %s; want evalsha until the library is loaded", got)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.Scripts(); got != "functions" || !strings.Contains(log.String(), "upstream_scripts=functions") {
		t.Fatalf("after Check: %s, log %q; want functions, and a line that says so", got, log.String())
	}
	req := engine.Request{Key: "fn", Limit: limitOf(engine.GCRA, 100, time.Hour), Cost: 1}
	for i := range 3 {
		if i > 0 {
			mustDo(t, srv, "FUNCTION", "FLUSH")
		}
		res, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req, req)
		if err != nil || res[1].Err != nil || res[1].Decision.Remaining != int64(98-2*i) {
			t.Fatalf("round %d: %v %+v", i, err, res)
		}
		if list := mustDo(t, srv, "FUNCTION", "LIST"); !strings.Contains(list, lua.BatchLibrary.Function) {
			t.Fatalf("round %d: FUNCTION LIST %q: the library was not loaded again", i, list)
		}
	}
	mustDo(t, srv, "CONFIG", "RESETSTAT")
	if res := decide(t, s, req); res[0].Err != nil || res[0].Decision.Remaining != 93 {
		t.Fatalf("after the reloads: %+v", res)
	}
	for cmd, want := range map[string]int64{"fcall": 1, "evalsha": 0, "eval": 0, "function|load": 0} {
		if n := commandCalls(t, srv, cmd); n != want {
			t.Errorf("%d %s calls for one batch; want %d", n, cmd, want)
		}
	}
	if s.Scripts() != "functions" {
		t.Errorf("after the reloads: %s; want functions still", s.Scripts())
	}
	// A call go-redis makes (Check's, a Cluster key sent again alone)
	// reloads the library too.
	mustDo(t, srv, "FUNCTION", "FLUSH")
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check after FUNCTION FLUSH: %v", err)
	}
	if list := mustDo(t, srv, "FUNCTION", "LIST"); !strings.Contains(list, lua.BatchLibrary.Function) {
		t.Errorf("after Check met the missing library: FUNCTION LIST %q; want it loaded again", list)
	}
}

// TestFunctionsRefused: where Redis refuses FUNCTION LOAD (an ACL user
// allowed FCALL and EVALSHA but denied FUNCTION), batches call EVALSHA,
// and the log says so: from the start, or from the reload that met the
// refusal.
func TestFunctionsRefused(t *testing.T) {
	srv := redistest.Start(t)
	mustDo(t, srv, "ACL", "SETUSER", "nofunction", "on", ">pw", "~*", "&*", "+@all", "-function")
	mustDo(t, srv, "ACL", "SETUSER", "later", "on", ">pw", "~*", "&*", "+@all")
	req := engine.Request{Key: "refused", Limit: limitOf(engine.GCRA, 100, time.Hour), Cost: 1}
	store := func(user string) (*upstream.Store, *redistest.LogBuffer) {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: "pw", Protocol: 2})
		t.Cleanup(func() { _ = client.Close() })
		log := new(redistest.LogBuffer) // the retry logs from a goroutine of its own
		s := newStore(t, upstream.Config{Client: client, Prefix: user + ":", Log: slog.New(slog.NewTextHandler(log, nil))})
		return s, log
	}
	evalshaOnly := func(t *testing.T, s *upstream.Store, log *redistest.LogBuffer) {
		t.Helper()
		if got := s.Scripts(); got != "evalsha" || !strings.Contains(log.String(), "upstream_scripts=evalsha") {
			t.Fatalf("%s, log %q; want evalsha, and a line that says so", got, log.String())
		}
		mustDo(t, srv, "CONFIG", "RESETSTAT")
		if res := decide(t, s, req); res[0].Err != nil {
			t.Fatalf("%+v", res)
		}
		if f, e := commandCalls(t, srv, "fcall"), commandCalls(t, srv, "evalsha"); f != 0 || e != 1 {
			t.Errorf("%d FCALL and %d EVALSHA calls for one batch; want 0 and 1", f, e)
		}
	}

	t.Run("from the start", func(t *testing.T) {
		s, log := store("nofunction")
		if err := s.Check(context.Background()); err != nil {
			t.Fatalf("Check: %v; want a pass on EVALSHA", err)
		}
		evalshaOnly(t, s, log)
	})
	t.Run("granted later", func(t *testing.T) {
		defer upstream.SetFunctionsRetry(50 * time.Millisecond)()
		mustDo(t, srv, "ACL", "SETUSER", "grantedlater", "on", ">pw", "~*", "&*", "+@all", "-function")
		s, log := store("grantedlater")
		if err := s.Check(context.Background()); err != nil || s.Scripts() != "evalsha" {
			t.Fatalf("Check: %v, %s; want evalsha", err, s.Scripts())
		}
		mustDo(t, srv, "ACL", "SETUSER", "grantedlater", "+function")
		time.Sleep(60 * time.Millisecond) // the retry's interval passes
		// Generous: the retry runs on a goroutine of its own, which a
		// loaded machine may start late.
		deadline := time.Now().Add(30 * time.Second)
		for s.Scripts() != "functions" {
			if time.Now().After(deadline) {
				t.Fatalf("still %s 30s after FUNCTION was granted, batches going on; log %q", s.Scripts(), log.String())
			}
			if res := decide(t, s, req); res[0].Err != nil {
				t.Fatalf("%+v", res)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !strings.Contains(log.String(), "upstream_scripts=functions") {
			t.Errorf("log %q; want a line saying batches call the function now", log.String())
		}
	})
	t.Run("at a reload", func(t *testing.T) {
		s, log := store("later")
		if err := s.Check(context.Background()); err != nil || s.Scripts() != "functions" {
			t.Fatalf("Check: %v, %s; want functions", err, s.Scripts())
		}
		mustDo(t, srv, "ACL", "SETUSER", "later", "-function")
		mustDo(t, srv, "FUNCTION", "FLUSH")
		if res := decide(t, s, req); res[0].Err != nil || res[0].Decision.Remaining != 99 {
			t.Fatalf("the batch that met the missing library: %+v; want it decided by EVAL", res)
		}
		evalshaOnly(t, s, log)
	})
}
