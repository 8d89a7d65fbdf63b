package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// A sidecar in front of a Redis paused (SIGSTOP) while idle answers each
// request of the pause by its policy's failure mode (allow, deny, local),
// and once Redis resumes (SIGCONT) and runs the batches written to it
// meanwhile, none of them charges: Redis holds the charges made before
// the pause and no more, read from Redis itself; INFO counts the late
// calls.
func TestPausedRedisChargesNoRequestItsFailureModeAnswered(t *testing.T) {
	r := redistest.Start(t)
	pol := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pol, []byte(outagePolicies), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSluice(t, "--upstream", "redis://"+r.Addr, "--policies", pol,
		"--upstream-timeout", upstreamTimeout.String())
	rc := client(t, s)
	ctx := ctxT(t)
	const before = 3 // charges of each key before the pause
	key := func(p string) string { return "late:" + p }
	for _, p := range outageNames {
		for range before {
			v, err := rc.Do(ctx, "RL.ALLOW", p, key(p)).Result()
			if d, derr := ints(v); err != nil || derr != nil || d[0] != 1 {
				t.Fatalf("%s before the pause: %v %v %v", p, v, err, derr)
			}
		}
	}
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			_ = r.Signal(syscall.SIGCONT)
		}
	}()
	// Connections in parallel, each policy's requests on their own.
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for c := range 6 {
		p := outageNames[c%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				v, err := rc.Do(ctx, "RL.ALLOW", p, key(p)).Result()
				d, derr := ints(v)
				switch {
				case err != nil || derr != nil:
					errs <- fmt.Errorf("%s during the pause: %v %v", p, err, derr)
				case (d[0] == 1) != (p != "closed"):
					errs <- fmt.Errorf("%s during the pause: %v, not its failure mode's answer", p, d)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// A call Redis starts within the clock's margin after its deadline
	// may still charge (docs/operating.md): resume past it.
	time.Sleep(50 * time.Millisecond)
	if err := r.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	paused = false
	// The sidecar reads Redis's late replies on the connections it gave
	// up: wait for one.
	for limit := time.Now().Add(15 * time.Second); info(t, rc, "sluice")["upstream_calls_late"] == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Error("no late call counted (INFO upstream_calls_late) within 15s")
			break
		}
	}
	keys, err := r.Do("KEYS", "*late:*")
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int64{}
	for _, k := range strings.Fields(keys) {
		n, err := r.Do("HGET", k, "n")
		if err != nil {
			t.Fatalf("HGET %s n: %v", k, err)
		}
		for _, p := range outageNames {
			if strings.Contains(k, key(p)) {
				held[p], _ = strconv.ParseInt(n, 10, 64)
			}
		}
	}
	for _, p := range outageNames {
		if held[p] != before {
			t.Errorf("%s: Redis holds %d charges; want %d, those before the pause (keys %q)", p, held[p], before, keys)
		}
	}
	in := info(t, rc, "sluice")
	if n := in["upstream_calls_overdue"]; n != 0 {
		t.Errorf("upstream_calls_overdue %d; want 0: no call was running when Redis stopped", n)
	}
	// The same counts reach the metrics, where alerts can see them.
	fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
	for metric, field := range map[string]string{"sluice_upstream_late_calls_total": "upstream_calls_late",
		"sluice_upstream_overdue_calls_total": "upstream_calls_overdue"} {
		if got, ok := metricstest.Sample(fams, metric, nil); !ok || int64(got) != in[field] {
			t.Errorf("%s = %v (found: %t); want INFO's %s, %d", metric, got, ok, field, in[field])
		}
	}
}
