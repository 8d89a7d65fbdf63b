package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// recordRows measures what recording costs at full load (--record, issue
// 43: "a recording never slows decisions beyond noise"): a sidecar that
// records every decision (--record-sample 1, the most a recording can
// write) against the same sidecar without, in front of the bench's Redis
// and on the in-memory store, where no round trip hides the recorder's
// cost. The recorded files live in the bench's temporary directory and
// rotate at the default 64 MiB, so that a long run keeps its disk use
// bounded, as a sidecar does.
func recordRows(sluice func(...string) int, dir, redisPort string, rdb nodes, sidecar []string) {
	type pair struct {
		name               string
		plainPort, recPort string
		plainPID, recPID   int
		rdb                nodes
		keys               int
	}
	var pairs []pair
	for _, store := range []struct {
		name string
		args []string
		rdb  nodes
		keys int
	}{
		{"Redis", []string{"--upstream", "redis://127.0.0.1:" + redisPort}, rdb, 1_000_000},
		// Keys from 100,000, the default --max-keys, as the in-memory
		// rows above.
		{"in-memory store", nil, nil, 100_000},
	} {
		p := pair{name: store.name, plainPort: freePort(), recPort: freePort(), rdb: store.rdb, keys: store.keys}
		file := filepath.Join(dir, "record-"+strings.ReplaceAll(store.name, " ", "-")+".jsonl")
		p.plainPID = sluice(append([]string{"--listen", "127.0.0.1:" + p.plainPort, "--admin-listen", "127.0.0.1:" + freePort()}, store.args...)...)
		p.recPID = sluice(append([]string{"--listen", "127.0.0.1:" + p.recPort, "--admin-listen", "127.0.0.1:" + freePort(),
			"--record", file, "--record-sample", "1"}, store.args...)...)
		waitPort(p.plainPort)
		waitPort(p.recPort)
		pairs = append(pairs, p)
	}
	fmt.Println("\nrecording: a sidecar with --record FILE --record-sample 1 (every decision) against the same without")
	for _, p := range pairs {
		for _, pipeline := range []int{16, 1} {
			name := fmt.Sprintf("record, %s, keys from %d, -P %d", p.name, p.keys, pipeline)
			if !wanted(name) {
				continue
			}
			c := compare(p.rdb, *requests, *clients, pipeline, target{port: p.plainPort, args: sidecar, keys: p.keys, pid: p.plainPID},
				target{port: p.recPort, args: sidecar, keys: p.keys, pid: p.recPID})
			fmt.Printf("%-48s without %9.0f/s, recording %9.0f/s, ratio %.2f; p50 ms: without %.3f, recording %.3f; Sluice's CPU µs per request: without %.2f, recording %.2f; %s\n",
				name, c.a.rps, c.b.rps, c.ratio, c.a.p50, c.b.p50, c.a.serverCPU, c.b.serverCPU, recorded(p.recPort))
		}
	}
}

// recorded is what the recording sidecar's INFO says it recorded and
// dropped so far: a recording that kept up drops nothing.
func recorded(port string) string {
	return infoFields(port, "recording", "recorded_decisions", "recording_dropped", "recording_bytes")
}

// infoFields is the named fields of one section of the INFO of the
// sidecar on port, as "name value" pairs.
func infoFields(port, section string, names ...string) string {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	defer c.Close()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		return "INFO " + section + ": " + err.Error()
	}
	var out []string
	for line := range strings.SplitSeq(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && slices.Contains(names, k) {
			out = append(out, k+" "+v)
		}
	}
	return strings.Join(out, ", ")
}
