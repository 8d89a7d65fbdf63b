package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// withReplica starts a master and a replica in sync with it, and a store
// of the master.
func withReplica(t *testing.T) (*upstream.Store, *redistest.Server, *redistest.Server, *redis.Client) {
	t.Helper()
	master := redistest.Start(t)
	replica := redistest.Start(t, "replicaof 127.0.0.1 "+strconv.Itoa(master.Port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if info := mustDo(t, replica, "INFO", "replication"); strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not sync within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := redis.NewClient(&redis.Options{Addr: master.Addr, Protocol: 2})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, upstream.Config{Client: c})
	t.Cleanup(s.Close)
	if err := s.Check(context.Background()); err != nil { // loads the batch library, as a sidecar does at start
		t.Fatal(err)
	}
	return s, master, replica, c
}

// A durable request is answered once the replica holds its charge; with
// the replica paused, its batch fails with engine.ErrNotDurable by the
// deadline (its charge stays on the master), and is counted, while a
// plain request beside it is answered at once.
func TestDurableWait(t *testing.T) {
	s, master, replica, _ := withReplica(t)
	limit := engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Hour}
	durable := engine.Request{Key: "d", Limit: limit, Cost: 1, Durable: engine.DurableReplica}
	plain := engine.Request{Key: "p", Limit: limit, Cost: 1}

	res := make([]engine.Result, 2)
	if err := engine.Wait(s, []engine.Request{durable, plain}, res, time.Now().Add(2*time.Second)); err != nil {
		t.Fatalf("with the replica up: %v", err)
	}
	for i, r := range res {
		if r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != 9 {
			t.Fatalf("request %d with the replica up: %+v", i, r)
		}
	}
	if got := mustDo(t, replica, "HGET", s.Key("d", engine.FixedWindow), "n"); got != "1" {
		t.Fatalf("the replica holds %q for the durable key, want 1", got)
	}
	if s.DurableCalls() != 1 || s.UnreplicatedCalls() != 0 {
		t.Fatalf("DurableCalls %d, UnreplicatedCalls %d, want 1 and 0", s.DurableCalls(), s.UnreplicatedCalls())
	}

	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Signal(syscall.SIGCONT) })
	durableDone := make(chan error, 1)
	dres := make([]engine.Result, 1)
	start := time.Now()
	s.Submit([]engine.Request{durable}, dres, start.Add(300*time.Millisecond), func(err error) { durableDone <- err })
	pres := make([]engine.Result, 1)
	if err := engine.Wait(s, []engine.Request{plain}, pres, time.Now().Add(2*time.Second)); err != nil || !pres[0].Decision.Allowed {
		t.Fatalf("a plain request with the replica paused: %+v, %v", pres[0], err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("the plain request took %v: it waited for the durable one's WAIT", d)
	}
	select {
	case err := <-durableDone:
		if !errors.Is(err, engine.ErrNotDurable) {
			t.Fatalf("the durable request with the replica paused: %v, want ErrNotDurable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the durable request was not answered within 5s of a 300ms deadline")
	}
	if s.DurableCalls() != 2 || s.UnreplicatedCalls() != 1 {
		t.Fatalf("DurableCalls %d, UnreplicatedCalls %d, want 2 and 1", s.DurableCalls(), s.UnreplicatedCalls())
	}
	// The charge is on the master all the same: not undone.
	if got := mustDo(t, master, "HGET", s.Key("d", engine.FixedWindow), "n"); got != "2" {
		t.Fatalf("the master holds %q for the durable key, want 2", got)
	}
}

// Where nothing can acknowledge, durable requests fail with
// ErrNotDurable and the connection stays usable: no replica at all, and
// WAITAOF where Redis has no such command (before 7.2) or no replica.
func TestDurableCannotHold(t *testing.T) {
	srv, c := standalone(t)
	_ = srv
	s := newStore(t, upstream.Config{Client: c})
	t.Cleanup(s.Close)
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	limit := engine.Limit{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 5}
	for _, d := range []engine.Durability{engine.DurableReplica, engine.DurableDisk} {
		res := make([]engine.Result, 1)
		err := engine.Wait(s, []engine.Request{{Key: "k", Limit: limit, Cost: 1, Durable: d}}, res, time.Now().Add(200*time.Millisecond))
		if !errors.Is(err, engine.ErrNotDurable) {
			t.Errorf("%v with no replica: %v, want ErrNotDurable", d, err)
		}
	}
	if s.UnreplicatedCalls() != 2 {
		t.Errorf("UnreplicatedCalls %d, want 2", s.UnreplicatedCalls())
	}
	res := make([]engine.Result, 1)
	if err := engine.Wait(s, []engine.Request{{Key: "k", Limit: limit, Cost: 1}}, res, time.Now().Add(time.Second)); err != nil || res[0].Err != nil {
		t.Fatalf("a plain request after them: %+v, %v", res[0], err)
	}
}

// BenchmarkDurable: what WAIT costs a batch, against a master with one
// replica on this machine: one batch at a time (the latency of a lone
// request, -P 1), and 16 batches in flight at once (each on its shard's
// connection, as a batcher keeps them).
func BenchmarkDurable(b *testing.B) {
	master := redistest.Start(b)
	replica := redistest.Start(b, "replicaof 127.0.0.1 "+strconv.Itoa(master.Port))
	for i := 0; ; i++ {
		if info, err := replica.Do("INFO", "replication"); err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if i == 3000 {
			b.Fatal("the replica did not sync within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := redis.NewClient(&redis.Options{Addr: master.Addr, Protocol: 2})
	b.Cleanup(func() { _ = c.Close() })
	s := newStore(b, upstream.Config{Client: c})
	b.Cleanup(s.Close)
	if err := s.Check(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, d := range []engine.Durability{engine.DurableNone, engine.DurableReplica} {
		for _, inFlight := range []int{1, 16} {
			for _, n := range []int{1, 16} {
				b.Run(fmt.Sprintf("%v/in-flight-%d/batch-of-%d", d, inFlight, n), func(b *testing.B) {
					b.ReportAllocs()
					var (
						next atomic.Int64 // iterations handed out
						wg   sync.WaitGroup
					)
					for g := range inFlight {
						reqs := make([]engine.Request, n)
						for i := range reqs {
							reqs[i] = engine.Request{Key: fmt.Sprint("bench", g, ":", i), Limit: limitOf(engine.GCRA, 1_000_000, time.Second), Cost: 1, Durable: d}
						}
						res := make([]engine.Result, n)
						wg.Go(func() {
							for next.Add(1) <= int64(b.N) {
								if err := engine.Wait(s, reqs, res, time.Now().Add(time.Second)); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/decision")
				})
			}
		}
	}
}

// A master with min-replicas-to-write and too few replicas refuses the
// writes at once: every batch fails as a whole (its requests get their
// failure mode), durable or not, with no WAIT waited out.
func TestMinReplicasToWrite(t *testing.T) {
	srv, c := standalone(t)
	s := newStore(t, upstream.Config{Client: c})
	t.Cleanup(s.Close)
	// The library loaded first: FUNCTION LOAD is a write, which the
	// setting refuses too.
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustDo(t, srv, "CONFIG", "SET", "min-replicas-to-write", "1")
	limit := engine.Limit{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 5}
	for _, d := range []engine.Durability{engine.DurableNone, engine.DurableReplica} {
		res := make([]engine.Result, 1)
		start := time.Now()
		err := engine.Wait(s, []engine.Request{{Key: "k", Limit: limit, Cost: 1, Durable: d}}, res, time.Now().Add(2*time.Second))
		if err == nil || !strings.Contains(err.Error(), "NOREPLICAS") {
			t.Errorf("%v: %v (result %+v), want the batch failed with NOREPLICAS", d, err, res[0])
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%v: answered after %v, want at once", d, took)
		}
	}
}
