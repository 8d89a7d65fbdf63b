package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// durableRows measures what durable decisions cost (--durable replica:
// each batch call followed by WAIT 1 on its own connection): the bench's
// Redis gets a replica, and a sidecar whose inline commands are durable
// is compared with one whose are not, both in front of that master and
// its replica, at -P 16, -P 1 and one request at a time. They come last:
// from here on the master replicates every write.
func durableRows(start func(string, ...string) int, sluice func(...string) int, dir string, master *redis.Client, masterPort string, rdb nodes, sidecar []string) {
	ctx := context.Background()
	replicaPort := freePort()
	// No wait before the first sync (Redis 7 waits 5s for more replicas).
	if err := master.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		fatalf("CONFIG SET repl-diskless-sync-delay: %v", err)
	}
	start("redis-server", "--port", replicaPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
		"--dbfilename", "replica.rdb", "--replicaof", "127.0.0.1", masterPort)
	waitPort(replicaPort)
	replica := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + replicaPort})
	defer replica.Close()
	for try := 0; ; try++ {
		info, err := replica.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if try == 3000 {
			fatalf("the replica not in sync after 30s: %v %s", err, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	upstream := "redis://127.0.0.1:" + masterPort
	plainPort, durablePort := freePort(), freePort()
	plainPID := sluice("--listen", "127.0.0.1:"+plainPort, "--admin-listen", "127.0.0.1:"+freePort(), "--upstream", upstream)
	durablePID := sluice("--listen", "127.0.0.1:"+durablePort, "--admin-listen", "127.0.0.1:"+freePort(), "--upstream", upstream,
		"--durable", "replica")
	waitPort(plainPort)
	waitPort(durablePort)
	fmt.Println("\ndurable decisions: a sidecar with --durable replica against one without, both in front of a master with one replica")
	for _, p := range []int{16, 1} {
		name := fmt.Sprintf("durable, keys from 1000000, -P %d", p)
		if !wanted(name) {
			continue
		}
		c := compare(rdb, *requests, *clients, p, target{port: plainPort, args: sidecar, keys: 1_000_000, pid: plainPID},
			target{port: durablePort, args: sidecar, keys: 1_000_000, pid: durablePID})
		fmt.Printf("%-40s not durable %9.0f/s, durable %9.0f/s, ratio %.2f; p50 ms: not durable %.3f, durable %.3f; Redis CPU µs per request: %.2f, %.2f\n",
			name, c.a.rps, c.b.rps, c.ratio, c.a.p50, c.b.p50, c.a.redisCPU, c.b.redisCPU)
	}
	if name := "durable -c 1 latency"; wanted(name) {
		c := compare(rdb, *requests/10, 1, 1, target{port: plainPort, args: sidecar, pid: plainPID},
			target{port: durablePort, args: sidecar, pid: durablePID})
		fmt.Printf("%-40s p50 not durable %.3f ms, durable %.3f ms, difference %+.3f ms\n", name, c.a.p50, c.b.p50, c.b.p50-c.a.p50)
	}
}
