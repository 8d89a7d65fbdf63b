package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/redisurl"
)

// The local failure mode by share (issue 40, item 2), on the real binary:
// three sidecars on one redis-server, one hot token bucket (capacity 300,
// 5 a second) sent ten times what it allows over the outage, Redis paused
// (SIGSTOP to the redis-server this test started) for 10 s, then resumed.
// Run without grants and with them (--grants): a sidecar that loses Redis
// spends what its grants hold first, then decides by its share.
//
//   - fleet: the sidecars' admissions during the outage, local ones and
//     those spent from grants, are at most 1.1 × (capacity + rate ×
//     outage), the outage counted from SIGSTOP until every sidecar's
//     breaker has closed again; whole (today's behaviour) admits about
//     three times that, and the test says so, so that it fails if the
//     share stops making a difference;
//   - after Redis returns, nothing is over (afterOutage).
//
// Admissions are the sidecars' own counts (sluice_decisions_total by
// path), which a reply cannot show; the clients' count of admissions
// answered during the outage is logged beside them.
func TestLocalShareOutage(t *testing.T) {
	// The runs at once, each on its own Redis and sidecars: the test
	// takes one outage's time, not three.
	var mu sync.Mutex
	results := map[string]shareRun{} // guarded by mu
	t.Run("share", func(t *testing.T) {
		for _, c := range []struct {
			name, share string
			grants      bool
			// redisFirst is how long Redis decides before it is
			// paused: 1.5 s drains the bucket (no grant can then hold
			// more than a unit or two); 300 ms leaves the sidecars
			// holding grants taken from a full bucket when it stops.
			redisFirst time.Duration
		}{
			{"fleet", "fleet", false, 1500 * time.Millisecond},
			{"fleet+grants", "fleet", true, 1500 * time.Millisecond},
			{"fleet+grants held", "fleet", true, 300 * time.Millisecond},
			{"whole", "whole", false, 1500 * time.Millisecond},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				run := localShareOutage(t, c.name, c.share, c.grants, c.redisFirst)
				mu.Lock()
				results[c.name] = run
				mu.Unlock()
			})
		}
	})
	f, w := results["fleet"], results["whole"]
	if f.bound > 0 && w.bound > 0 {
		t.Logf("admitted during a %v outage, three sidecars: fleet %d (bound %.0f), whole %d (bound %.0f): %.1f× as many",
			f.outage.Round(100*time.Millisecond), f.admitted(), f.bound, w.admitted(), w.bound, float64(w.admitted())/float64(max(f.admitted(), 1)))
	}
}

// The hot bucket, and the outage.
const (
	hotCapacity = 300
	hotRate     = 5 // a second
	hotPause    = 10 * time.Second
	// hotLoad is requests a second over all sidecars: ten times what the
	// bucket allows over the pause, (300 + 5 × 10) / 10 s.
	hotLoad = 10 * (hotCapacity + hotRate*10) / 10
)

var hotPolicy = fmt.Sprintf(`policies:
  hot:
    algorithm: token_bucket
    capacity: %d
    rate: %d
    period: 1s
    on_failure: local
`, hotCapacity, hotRate)

// shareRun is what one run measured.
type shareRun struct {
	local   int64         // admitted by the sidecars' local stores
	granted int64         // admitted from grants while Redis was paused
	seen    int           // admissions the clients saw answered during the outage
	outage  time.Duration // SIGSTOP until every breaker closed
	bound   float64       // 1.1 × (capacity + rate × outage)
}

// admitted is what the fleet admitted during the outage: locally, and
// from the grants it held when Redis went away.
func (r shareRun) admitted() int64 { return r.local + r.granted }

func localShareOutage(t *testing.T, name, share string, grants bool, redisFirst time.Duration) shareRun {
	r := redistest.Start(t)
	pol := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pol, []byte(hotPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	// A round trip gets 1s: a loaded machine must not send decisions to
	// the local store while Redis answers, which would blur what comes
	// from where; the pause is noticed within about two of them.
	args := []string{"--upstream", "redis://" + r.Addr, "--policies", pol, "--upstream-timeout", "1s", "--local-share", share}
	if grants {
		args = append(args, "--grants")
	}
	sidecars := []*sluice{startSluice(t, args...), startSluice(t, args...), startSluice(t, args...)}
	var rdbs []*redis.Client
	for _, s := range sidecars {
		rdbs = append(rdbs, client(t, s))
	}
	paused := false
	t.Cleanup(func() {
		if paused {
			_ = r.Signal(syscall.SIGCONT)
		}
	})
	if share == "fleet" {
		within(t, 10*time.Second, "every sidecar counting three in the fleet", func() bool {
			for _, rdb := range rdbs {
				if info(t, rdb, "upstream")["local_share_sidecars"] != 3 {
					return false
				}
			}
			return true
		})
		fams := metricstest.Scrape(t, "http://"+sidecars[0].Admin+"/metrics")
		if n, _ := metricstest.Sample(fams, "sluice_fleet_sidecars", nil); n != 3 {
			t.Errorf("sluice_fleet_sidecars %v; want 3", n)
		}
		if v, _ := metricstest.Sample(fams, "sluice_local_share", nil); v < 0.33 || v > 0.34 {
			t.Errorf("sluice_local_share %v; want 1/3", v)
		}
	}

	// Redis decides before the pause.
	l := startPacedLoad(t, sidecars, hotLoad, 25*time.Second)
	time.Sleep(redisFirst)
	before := admittedBy(t, sidecars, "local_fallback")
	grantsBefore := admittedBy(t, sidecars, "grant")
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused = true
	stopped := time.Now()
	time.Sleep(hotPause)
	// Nothing is granted while Redis is paused: what the grants admitted
	// meanwhile they held when it stopped.
	grantsDuring := admittedBy(t, sidecars, "grant") - grantsBefore
	if err := r.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	paused = false
	resumed := time.Now()
	within(t, 10*time.Second, "every sidecar's breaker closed", func() bool {
		for _, rdb := range rdbs {
			if info(t, rdb, "upstream")["breaker_open"] != 0 {
				return false
			}
		}
		return true
	})
	back := time.Now()
	replies := l.Stop()
	run := shareRun{local: admittedBy(t, sidecars, "local_fallback") - before, granted: grantsDuring, outage: back.Sub(stopped)}
	run.bound = 1.1 * (hotCapacity + hotRate*run.outage.Seconds())
	for _, rs := range replies {
		for _, rep := range rs {
			if rep.err == nil && rep.d[0] == 1 && rep.got.After(stopped) && rep.got.Before(back) {
				run.seen++
			}
		}
	}
	sum := summarize(replies)
	var charged int64
	for _, rdb := range rdbs {
		charged += info(t, rdb, "grants")["grant_units_charged_locally"]
	}
	t.Logf("%s: Redis paused %v; breakers closed %v after it resumed; %d admitted by the local stores and %d from grants "+
		"(%d units of grants charged to the shares; the clients saw %d answered meanwhile) of %d requests; bound %.0f",
		name, resumed.Sub(stopped).Round(time.Millisecond), back.Sub(resumed).Round(time.Millisecond), run.local, run.granted,
		charged, run.seen, sum.n, run.bound)
	if sum.errs > 0 {
		t.Errorf("%d of %d requests got an error; the first: %v", sum.errs, sum.n, sum.firstErr)
	}
	switch {
	case !grants && run.granted != 0:
		t.Errorf("%s: %d admitted from grants with grants off", name, run.granted)
	case share == "fleet" && float64(run.admitted()) > run.bound:
		t.Errorf("%s: %d admitted during the outage (%d locally, %d from grants); want at most %.0f",
			name, run.admitted(), run.local, run.granted, run.bound)
	case share == "whole" && float64(run.admitted()) <= run.bound:
		t.Errorf("%s: %d admitted during the outage, within %.0f: the share would make no difference", name, run.admitted(), run.bound)
	case run.local == 0:
		t.Errorf("%s: nothing admitted locally during the outage", name)
	}
	afterOutage(t, name, grants, r, sidecars, rdbs)
	return run
}

// afterOutage: once Redis is back, nothing is over. With the load
// stopped, the units the sidecars' grants may still spend are read
// (INFO grants), then the hot bucket's theoretical time z from Redis; the
// load runs 2 s and stops; z is read again. The bucket is kept past empty
// throughout (z after Redis's now), where each unit taken moves z one
// interval on, so the difference over the interval is the units taken
// from Redis's budget meanwhile: admitted by Redis and moved into grants.
// The accounting that must hold:
//
//   - nothing is decided locally, and every admission the clients saw
//     was decided by Redis or spent from a grant;
//   - the units taken from Redis's budget are at most what the bucket
//     allowed: its tokens at the first read and its refill since;
//   - the units spent from grants are at most those granted: held at the
//     first read, or granted meanwhile (taken less admitted by Redis);
//   - and the units held at the first read were already counted taken in
//     Redis: the bucket's tokens plus them are at most its capacity.
//
// So the clients may see more admitted than Redis recorded meanwhile (by
// the units granted before the first read and spent after it), never
// more than the bucket allowed plus those units. Without grants the
// clients see exactly what Redis recorded.
func afterOutage(t *testing.T, name string, grants bool, r *redistest.Server, sidecars []*sluice, rdbs []*redis.Client) {
	t.Helper()
	key := redisurl.DefaultPrefix + "{hot:k}:token"
	interval := int64(time.Second/time.Microsecond) / hotRate
	z := func() (z, now int64) {
		t.Helper()
		v := mustDoT(t, r, "GET", key)
		z, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("GET %s: %q: want the bucket's time in µs", key, v)
		}
		return z, redisMicros(t, r)
	}
	// Read before z: a grant's spendable units only fall with time, so
	// these are at least those held at z's reading.
	held := grantUnits(t, rdbs)
	z0, now0 := z()
	if z0 <= now0 {
		t.Fatalf("the hot bucket is full once Redis is back (z %d, now %d); the test needs it past empty", z0, now0)
	}
	local0, store0, grant0 := admittedBy(t, sidecars, "local_fallback"), admittedBy(t, sidecars, "store"), admittedBy(t, sidecars, "grant")
	replies := startPacedLoad(t, sidecars, hotLoad, 2*time.Second).Wait()
	z1, now1 := z()
	local := admittedBy(t, sidecars, "local_fallback") - local0
	direct := admittedBy(t, sidecars, "store") - store0
	spent := admittedBy(t, sidecars, "grant") - grant0
	seen := int64(0)
	for _, rs := range replies {
		for _, rep := range rs {
			if rep.err == nil && rep.d[0] == 1 {
				seen++
			}
		}
	}
	taken := (z1 - z0) / interval // from Redis's budget: admitted there, and granted
	granted := taken - direct
	// The bucket takes a unit at t while z stays within its capacity of
	// t: the units it allowed from the first read to the second are its
	// tokens then (capacity less (z0-now0), in intervals) and its refill
	// since, in whole units.
	tokens := hotCapacity - (z0-now0+interval-1)/interval // at the first read, rounded down
	allows := (hotCapacity*interval - (z0 - now0) + (now1 - now0)) / interval
	t.Logf("%s after the outage: in %v the clients saw %d admitted: %d by Redis, %d from grants (%d units held before, "+
		"%d granted meanwhile), %d locally; Redis's budget gave %d (the bucket allowed %d: %d tokens and the refill)",
		name, time.Duration(now1-now0)*time.Microsecond, seen, direct, spent, held, granted, local, taken, allows, tokens)
	if local != 0 || seen != direct+spent {
		t.Errorf("%s after Redis returned: the clients saw %d admitted; %d by Redis, %d from grants, %d decided locally; want every admission Redis's or a grant's",
			name, seen, direct, spent, local)
	}
	if taken > allows {
		t.Errorf("%s: Redis's budget gave %d units (%d admitted, %d granted); the bucket allowed %d", name, taken, direct, granted, allows)
	}
	if granted < 0 || spent > held+granted || (!grants && granted != 0) {
		t.Errorf("%s: %d admitted from grants; %d units were held before and %d granted meanwhile", name, spent, held, granted)
	}
	if seen > allows+held {
		t.Errorf("%s: the clients saw %d admitted; the bucket allowed %d and the grants held %d", name, seen, allows, held)
	}
	// Held units are taken units: the bucket's level and them are at
	// most its capacity (a unit of slack: held was read just before z).
	if held*interval > z0-now0+interval {
		t.Errorf("%s: the grants held %d units while the bucket had %d tokens: more than its capacity %d", name, held, tokens, hotCapacity)
	}
}

// grantUnits sums the units the sidecars' grants may still spend.
func grantUnits(t *testing.T, rdbs []*redis.Client) int64 {
	t.Helper()
	var n int64
	for _, rdb := range rdbs {
		n += info(t, rdb, "grants")["grant_units_outstanding"]
	}
	return n
}

// redisMicros is Redis's clock, in µs.
func redisMicros(t *testing.T, r *redistest.Server) int64 {
	t.Helper()
	out := mustDoT(t, r, "TIME")
	var s, us int64
	if _, err := fmt.Sscanf(out, "%d\n%d", &s, &us); err != nil {
		t.Fatalf("TIME: %q: %v", out, err)
	}
	return s*1_000_000 + us
}

// admittedBy sums the sidecars' admissions of the hot policy decided by
// path (sluice_decisions_total).
func admittedBy(t *testing.T, sidecars []*sluice, path string) int64 {
	t.Helper()
	var n float64
	for _, s := range sidecars {
		fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
		v, _ := metricstest.Sample(fams, "sluice_decisions_total",
			map[string]string{"policy": "hot", "algorithm": "token_bucket", "outcome": "allowed", "path": path})
		n += v
	}
	return int64(n)
}

// startPacedLoad sends RL.ALLOW hot k at perSecond requests a second over
// all the sidecars, spread evenly over four connections each, until
// stopped or maxDur passes.
func startPacedLoad(t *testing.T, sidecars []*sluice, perSecond int, maxDur time.Duration) *load {
	conns := 4 * len(sidecars)
	every := time.Second * time.Duration(conns) / time.Duration(perSecond)
	return startLoadOn(t, func(c int) string { return sidecars[c%len(sidecars)].Addr }, conns, every, maxDur,
		func(int, int) []any { return []any{"RL.ALLOW", "hot", "k"} })
}

// Wait waits for the load to end by itself (maxDur) and returns what
// each connection saw.
func (l *load) Wait() [][]reply {
	l.wg.Wait()
	return l.Stop()
}
