package main

import (
	"fmt"
	"sync"

	"github.com/sluice-rl/sluice/bench/baseline"
)

// grantsFleet is how many sidecars share the hot key in grantRows.
const grantsFleet = 3

// grantRows measures grants (--grants): one hot key, every request
// allowed, loaded on three sidecars at once, all in front of the bench's
// Redis. Beside them, on the same load, three sidecars on the in-memory
// store (each its own: the ceiling, no round trip at all) and the
// application calling Redis directly with the baseline GCRA script. It
// reports decisions per second per sidecar against the in-memory
// store's, Redis's script calls per decision, and Redis's CPU per
// decision against direct calls'. The sidecars start only when the row
// is asked for.
func grantRows(sluice func(...string) int, rdb nodes, redisPort string, p int) {
	upstream := "redis://127.0.0.1:" + redisPort
	var granted, memory, direct []target
	// A limit no run reaches: 10^9 at once, 10^6 a second.
	side := []string{"CL.THROTTLE", "hot-granted", "1000000000", "1000000", "1", "1"}
	for range grantsFleet {
		port := freePort()
		pid := sluice("--listen", "127.0.0.1:"+port, "--admin-listen", "127.0.0.1:"+freePort(), "--upstream", upstream, "--grants")
		granted = append(granted, target{port: port, args: side, pid: pid})
		mport := freePort()
		mpid := sluice("--listen", "127.0.0.1:"+mport, "--admin-listen", "127.0.0.1:"+freePort())
		memory = append(memory, target{port: mport, args: side, pid: mpid})
		direct = append(direct, target{port: redisPort, args: []string{"EVALSHA", baseline.GCRA.SHA, "1", "hot-direct", "1000000000", "1000000", "1", "1"}})
	}
	for _, t := range append(granted, memory...) {
		waitPort(t.port)
	}
	n := *requests
	var perSidecar, perMemory, calls, cpu, directCPU, ratios []float64
	for range *runs {
		g, m, d := fleetOnce(rdb, n, *clients, p, granted), fleetOnce(nil, n, *clients, p, memory), fleetOnce(rdb, n, *clients, p, direct)
		perSidecar, perMemory = append(perSidecar, g.rps), append(perMemory, m.rps)
		ratios = append(ratios, g.rps/m.rps)
		calls, cpu, directCPU = append(calls, g.scriptsPerRequest), append(cpu, g.redisCPU), append(directCPU, d.redisCPU)
	}
	fmt.Printf("%-40s per sidecar: grants %9.0f/s, in-memory %9.0f/s, ratio %.2f; Redis calls per decision %.4f; Redis CPU µs per decision: grants %.3f, direct %.3f (%.3f×)\n",
		fmt.Sprintf("one hot key, allowed, %d sidecars on one Redis, -P %d", grantsFleet, p),
		median(perSidecar), median(perMemory), median(ratios), median(calls), median(cpu), median(directCPU), median(cpu)/median(directCPU))
}

// fleetOnce runs one redis-benchmark per target at once, n requests each,
// and returns the mean of their rates, with Redis's CPU and script calls
// per request over all of them.
func fleetOnce(rdb nodes, n, c, pipeline int, ts []target) sample {
	cpu0, eval0 := redisStats(rdb)
	rates := make([]float64, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Go(func() { rates[i], _, _ = benchmark(t, c, pipeline, n) })
	}
	wg.Wait()
	cpu1, eval1 := redisStats(rdb)
	total := float64(n * len(ts))
	var sum float64
	for _, r := range rates {
		sum += r
	}
	return sample{rps: sum / float64(len(ts)), redisCPU: (cpu1 - cpu0) / total * 1e6, scriptsPerRequest: (eval1 - eval0) / total}
}

// grantsColdRow measures what grants cost where no key is hot (issue 40:
// "no change beyond noise"): many distinct keys, every request allowed,
// on a sidecar with --grants against the bench's sidecar without, both in
// front of the bench's Redis, side by side in each run. The grant layer
// counts every request's key to find the hot ones; none is, so nothing is
// granted (INFO grants, printed after, says what the layer kept and
// asked). The sidecar starts only when the row is asked for.
func grantsColdRow(name string, sluice func(...string) int, rdb nodes, redisPort string, off target) {
	port := freePort()
	pid := sluice("--listen", "127.0.0.1:"+port, "--admin-listen", "127.0.0.1:"+freePort(),
		"--upstream", "redis://127.0.0.1:"+redisPort, "--grants")
	waitPort(port)
	on := off
	on.port, on.pid = port, pid
	c := compare(rdb, *requests, *clients, 16, off, on)
	fmt.Printf("%-48s grants off %9.0f/s, on %9.0f/s, ratio %.2f; p50 ms: off %.3f, on %.3f; Sluice's CPU µs per request: off %.2f, on %.2f; Redis calls per request: off %.4f, on %.4f; %s\n",
		name, c.a.rps, c.b.rps, c.ratio, c.a.p50, c.b.p50, c.a.serverCPU, c.b.serverCPU, c.a.scriptsPerRequest, c.b.scriptsPerRequest,
		infoFields(port, "grants", "grants", "grants_asked", "grant_decisions", "grant_keys"))
}
