package upstream_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// send sends reqs and waits for done, failing the test if done does not
// come within limit.
func send(t *testing.T, s *upstream.Store, deadline time.Time, limit time.Duration, reqs ...engine.Request) ([]engine.Result, error) {
	t.Helper()
	res := make([]engine.Result, len(reqs))
	landed := make(chan error, 1)
	s.Submit(reqs, res, deadline, func(err error) { landed <- err })
	select {
	case err := <-landed:
		return res, err
	case <-time.After(limit):
		t.Fatalf("Send: no answer within %v", limit)
		return nil, nil
	}
}

// A paused Redis fails the batch on the pipe by its deadline, not later;
// once Redis runs again the store decides on a new connection.
func TestSendToAPausedRedis(t *testing.T) {
	srv, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client})
	req := engine.Request{Key: "paused", Limit: limitOf(engine.FixedWindow, 100, time.Hour), Cost: 1}
	if _, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			_ = srv.Signal(syscall.SIGCONT)
		}
	}()
	start := time.Now()
	if _, err := send(t, s, start.Add(200*time.Millisecond), 5*time.Second, req); err == nil {
		t.Fatal("a paused Redis decided")
	}
	// Past the clock's margin after the deadline (internal/redispipe/clock.go).
	time.Sleep(50 * time.Millisecond)
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	paused = false
	res, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req)
	if err != nil || res[0].Err != nil {
		t.Fatalf("after Redis resumed: %v %+v", err, res[0])
	}
	// The request sent while Redis was paused was in Redis's socket, and
	// Redis ran it when it resumed, after its deadline: it charged
	// nothing.
	if got := res[0].Decision.Remaining; got != 98 {
		t.Fatalf("after Redis resumed, remaining %d; want 98: the request its deadline had failed charged", got)
	}
}

// A Redis that forgot its scripts is sent the call again as EVAL, within
// the same Send, and the next call finds the script loaded.
func TestSendReloadsFlushedScripts(t *testing.T) {
	srv, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client})
	req := engine.Request{Key: "flushed", Limit: limitOf(engine.GCRA, 100, time.Hour), Cost: 1}
	for i := range 3 {
		mustDo(t, srv, "SCRIPT", "FLUSH")
		res, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req, req)
		if err != nil || res[1].Err != nil || res[1].Decision.Remaining != int64(98-2*i) {
			t.Fatalf("round %d after SCRIPT FLUSH: %v %+v", i, err, res)
		}
	}
}

// The pipe authenticates as the client's options say (an ACL user, or a
// password alone) and selects its database; a wrong password fails the
// batch with Redis's own words.
func TestSendAuthenticatesAndSelects(t *testing.T) {
	srv := redistest.Start(t)
	// Set after the start, whose readiness check does not authenticate;
	// the default user's password last.
	mustDo(t, srv, "ACL", "SETUSER", "alice", "on", ">wonderland", "~*", "&*", "+@all")
	mustDo(t, srv, "CONFIG", "SET", "requirepass", "secret")
	for _, c := range []struct {
		name       string
		user, pass string
		db         int
		want       string // in the batch error; empty: decides
	}{
		{name: "ACL user, database 3", user: "alice", pass: "wonderland", db: 3},
		{name: "password alone", pass: "secret"},
		{name: "wrong password", user: "alice", pass: "nope", want: "WRONGPASS"},
		{name: "no password", want: "unauthenticated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := &redis.Options{Addr: srv.Addr, Username: c.user, Password: c.pass, DB: c.db, Protocol: 2, MaxRetries: -1}
			client := redis.NewClient(opt)
			defer client.Close()
			s := newStore(t, upstream.Config{Client: client, Prefix: "auth:"})
			defer s.Close()
			req := engine.Request{Key: c.name, Limit: limitOf(engine.FixedWindow, 10, time.Hour), Cost: 1}
			res, err := send(t, s, time.Now().Add(5*time.Second), 10*time.Second, req)
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Send: %v %+v; want an error saying %s", err, res, c.want)
				}
				return
			}
			if err != nil || res[0].Err != nil || res[0].Decision.Remaining != 9 {
				t.Fatalf("Send: %v %+v", err, res[0])
			}
			n, err := client.Exists(context.Background(), s.Key(c.name, engine.FixedWindow)).Result()
			if err != nil || n != 1 {
				t.Fatalf("the state is not in database %d: %d %v", c.db, n, err)
			}
		})
	}
}

// Many callers through a batcher with several round trips in flight on
// the one pipe: every reply reaches its own batch, in each caller's order.
func TestSendManyInFlight(t *testing.T) {
	_, client := standalone(t)
	s := newStore(t, upstream.Config{Client: client, Prefix: "flight:"})
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: s, MaxBatch: 16, MaxInFlight: 4, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	limit := limitOf(engine.TokenBucket, 1000, time.Hour)
	enginetest.ManyCallers(t, b, limit, 20, 10, func(c int) int { return 1 + c%5 })
}

// Nothing listening: the batch fails with the dial's error by its
// deadline, and a closed store fails at once.
func TestSendWithoutRedis(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprint("127.0.0.1:", redistest.FreePort(t)), MaxRetries: -1})
	defer client.Close()
	s := newStore(t, upstream.Config{Client: client})
	req := engine.Request{Key: "k", Limit: limitOf(engine.GCRA, 1, time.Second), Cost: 1}
	if _, err := send(t, s, time.Now().Add(time.Second), 5*time.Second, req); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("Send with nothing listening: %v; want a connect error", err)
	}
	s.Close()
	if _, err := send(t, s, time.Now().Add(time.Second), time.Second, req); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Send after Close: %v; want the store closed", err)
	}
}
