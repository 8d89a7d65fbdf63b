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
// records as a sidecar does by default (--record-sample 1, every key, up
// to --record-max-rate's 50,000 decisions a second, past which it records
// fewer keys) and one that records every decision whatever the rate
// (--record-max-rate 0, the most a recording can write), each against
// the same sidecar without, in front of the bench's Redis and on the
// in-memory store, where no round trip hides the recorder's cost. The
// recorded files live in the bench's temporary directory and rotate at
// the default 64 MiB, so that a long run keeps its disk use bounded, as a
// sidecar does. The sidecars live across runs: the default one's sample,
// raised in the first, stays raised, as it would in a sidecar.
func recordRows(sluice func(...string) int, dir, redisPort string, rdb nodes, sidecar []string) {
	type trio struct {
		name                        string
		plainPort, recPort, allPort string
		plainPID, recPID, allPID    int
		rdb                         nodes
		keys                        int
	}
	var trios []trio
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
		p := trio{name: store.name, plainPort: freePort(), recPort: freePort(), allPort: freePort(), rdb: store.rdb, keys: store.keys}
		file := filepath.Join(dir, "record-"+strings.ReplaceAll(store.name, " ", "-"))
		run := func(port string, args ...string) int {
			return sluice(append(append([]string{"--listen", "127.0.0.1:" + port, "--admin-listen", "127.0.0.1:" + freePort()}, args...), store.args...)...)
		}
		p.plainPID = run(p.plainPort)
		p.recPID = run(p.recPort, "--record", file+".jsonl", "--record-sample", "1")
		p.allPID = run(p.allPort, "--record", file+"-all.jsonl", "--record-sample", "1", "--record-max-rate", "0")
		for _, port := range []string{p.plainPort, p.recPort, p.allPort} {
			waitPort(port)
		}
		trios = append(trios, p)
	}
	fmt.Println("\nrecording: a sidecar with --record FILE (every key, --record-max-rate 50000 by default), and one with --record-max-rate 0 (every decision), against the same without")
	for _, p := range trios {
		for _, pipeline := range []int{16, 1} {
			name := fmt.Sprintf("record, %s, keys from %d, -P %d", p.name, p.keys, pipeline)
			if !wanted(name) {
				continue
			}
			// Two comparisons, the bounded recording's first: the file
			// of every decision, written back by the kernel after its
			// run, would weigh on the runs after it.
			plain := target{port: p.plainPort, args: sidecar, keys: p.keys, pid: p.plainPID}
			c := compare(p.rdb, *requests, *clients, pipeline, plain, target{port: p.recPort, args: sidecar, keys: p.keys, pid: p.recPID})
			all := compare(p.rdb, *requests, *clients, pipeline, plain, target{port: p.allPort, args: sidecar, keys: p.keys, pid: p.allPID})
			fmt.Printf("%-48s recording: without %9.0f/s, recording %9.0f/s, ratio %.2f, Sluice's CPU µs per request %.2f and %.2f, %s; every decision: without %9.0f/s, recording %9.0f/s, ratio %.2f, Sluice's CPU µs per request %.2f and %.2f, %s\n",
				name, c.a.rps, c.b.rps, c.ratio, c.a.serverCPU, c.b.serverCPU, recorded(p.recPort),
				all.a.rps, all.b.rps, all.ratio, all.a.serverCPU, all.b.serverCPU, recorded(p.allPort))
		}
	}
}

// recorded is what a recording sidecar's INFO says of its sample, and of
// what it recorded and dropped so far: a recording that kept up drops
// nothing.
func recorded(port string) string {
	return infoFields(port, "recording", "recording_sample", "recorded_decisions", "recording_dropped", "recording_bytes")
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
