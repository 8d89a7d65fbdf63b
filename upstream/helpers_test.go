package upstream_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisobserve"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// topology is a Redis to test against: its client and its servers.
type topology struct {
	name    string
	client  redis.UniversalClient
	servers []*redistest.Server
}

// eachTopology starts a standalone Redis and a three-master Cluster, and
// runs fn on each as a subtest.
func eachTopology(t *testing.T, fn func(t *testing.T, top topology)) {
	srv, rc := standalone(t)
	cc, nodes := cluster(t)
	for _, top := range []topology{{"standalone", rc, []*redistest.Server{srv}}, {"cluster", cc, nodes}} {
		t.Run(top.name, func(t *testing.T) { fn(t, top) })
	}
}

// standalone starts a redis-server and returns a client of it, closed in
// t.Cleanup.
func standalone(tb testing.TB) (*redistest.Server, *redis.Client) {
	tb.Helper()
	srv := redistest.Start(tb)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
	tb.Cleanup(func() { _ = c.Close() })
	return srv, c
}

// cluster starts a Redis Cluster of three masters and returns a client of
// it, closed in t.Cleanup.
func cluster(tb testing.TB) (*redis.ClusterClient, []*redistest.Server) {
	tb.Helper()
	c := redistest.StartCluster(tb, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Protocol: 2})
	tb.Cleanup(func() { _ = client.Close() })
	return client, c.Nodes
}

func mustDo(tb testing.TB, srv *redistest.Server, args ...string) string {
	tb.Helper()
	r, err := srv.Do(args...)
	if err != nil {
		tb.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return r
}

func newStore(tb testing.TB, cfg upstream.Config) *upstream.Store {
	tb.Helper()
	s, err := upstream.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// newObserver is an Observer of client that logs to log, for a test
// that reads what the store's checks recorded.
func newObserver(tb testing.TB, client redis.UniversalClient, log *slog.Logger) *redisobserve.Observer {
	tb.Helper()
	o, err := redisobserve.New(redisobserve.Config{Client: client, Log: log})
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// ttlChecked wraps a store and, after every operation, checks that every
// key matching pattern has a TTL. It is used from the test goroutine only.
type ttlChecked struct {
	engine.Store
	tb      testing.TB
	client  redis.UniversalClient
	pattern string          // SCAN MATCH pattern
	ignore  map[string]bool // keys the test itself wrote
}

// Submit waits for the store, so that the check runs on the test's
// goroutine, after the decision.
func (c *ttlChecked) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	err := engine.Wait(c.Store, reqs, res, deadline)
	c.check()
	done(err)
}

func (c *ttlChecked) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	err := c.Store.Reset(ctx, key, limits...)
	c.check()
	return err
}

func (c *ttlChecked) check() {
	c.tb.Helper()
	for _, key := range keysWithoutTTL(c.tb, c.client, c.pattern) {
		if !c.ignore[key] {
			c.tb.Errorf("key %q has no TTL", key)
		}
	}
}

// keysWithoutTTL scans every master for keys matching pattern whose PTTL
// is -1.
func keysWithoutTTL(tb testing.TB, client redis.UniversalClient, pattern string) []string {
	tb.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var found []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			ttl, err := c.PTTL(ctx, it.Val()).Result()
			if err != nil {
				return err
			}
			if ttl == -1*time.Nanosecond || ttl == -1*time.Millisecond {
				mu.Lock()
				found = append(found, it.Val())
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = fmt.Errorf("unexpected client %T", client)
	}
	if err != nil {
		tb.Fatalf("scan %s: %v", pattern, err)
	}
	return found
}

// noKeyWithoutTTL fails the test if any key lacks a TTL.
func noKeyWithoutTTL(tb testing.TB, client redis.UniversalClient) {
	tb.Helper()
	if keys := keysWithoutTTL(tb, client, "*"); len(keys) > 0 {
		tb.Fatalf("keys without TTL: %q", keys)
	}
}

func decide(tb testing.TB, s engine.Store, reqs ...engine.Request) []engine.Result {
	tb.Helper()
	res := make([]engine.Result, len(reqs))
	if err := engine.Wait(s, reqs, res, time.Time{}); err != nil {
		tb.Fatalf("Decide: %v", err)
	}
	return res
}

// limits has a small valid limit of each algorithm.
func limitOf(alg engine.Algorithm, rate int64, period time.Duration) engine.Limit {
	l := engine.Limit{Algorithm: alg, Rate: rate, Period: period}
	switch alg {
	case engine.TokenBucket, engine.LeakyBucket:
		l.Burst = rate
	case engine.GCRA:
		l.Burst = rate - 1
	}
	return l
}
