package service_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/upstream"
)

// clock is a pinned, movable time for a store and a service alike.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// memService is a service over the memory store, both on clk.
func memService(t *testing.T, clk *clock, cfg service.Config) *service.Service {
	t.Helper()
	mem, err := memstore.New(memstore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Now = mem, clk.Now
	s, err := service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reserve makes one reservation and returns its id ("" when refused) and
// decision.
func reserve(s *service.Service, r service.Request) (string, engine.Decision, error) {
	r.Reserve = true
	b := s.NewBatch()
	i, err := b.Add(r)
	if err != nil {
		return "", engine.Decision{}, err
	}
	s.DecideWait(b)
	d, err := b.Result(i)
	if err != nil {
		return "", engine.Decision{}, err
	}
	return b.Reservation(i), *d, nil
}

// used is how many units of the budget key has spent, read by a look
// that takes nothing; no more than the budget, as a look reads it.
func used(t *testing.T, s *service.Service, r service.Request) int64 {
	t.Helper()
	r.Cost, r.Peek, r.Reserve, r.ReserveTTL = 0, true, false, 0
	return read(t, s, r)
}

// probe is how many units the key had spent, over the budget too: read
// by a charge of 1, the one decision whose Remaining goes below zero, so
// that the key has spent one more after it.
func probe(t *testing.T, s *service.Service, r service.Request) int64 {
	t.Helper()
	r.Cost, r.Charge, r.Reserve, r.ReserveTTL = 1, true, false, 0
	return read(t, s, r) - 1
}

func read(t *testing.T, s *service.Service, r service.Request) int64 {
	t.Helper()
	b := s.NewBatch()
	i, err := b.Add(r)
	if err != nil {
		t.Fatal(err)
	}
	s.DecideWait(b)
	d, err := b.Result(i)
	if err != nil {
		t.Fatal(err)
	}
	return d.Limit - d.Remaining
}

var (
	fixed100 = engine.Limit{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Hour}
	token100 = engine.Limit{Algorithm: engine.TokenBucket, Rate: 100, Burst: 100, Period: time.Hour}
	gcra100  = engine.Limit{Algorithm: engine.GCRA, Rate: 100, Burst: 99, Period: time.Hour}
	slide100 = engine.Limit{Algorithm: engine.SlidingWindow, Rate: 100, Period: time.Hour}
)

// TestReserveSettle: a reservation takes its estimate from the budget at
// once; its settle gives back what the work did not use, charges what it
// used over (even past the limit), or changes nothing; the record is gone
// after. Each algorithm that offers it, with the clock still, where every
// give-back is whole.
func TestReserveSettle(t *testing.T) {
	for _, l := range []engine.Limit{fixed100, slide100, token100, gcra100} {
		for _, tc := range []struct {
			name             string
			estimate, actual int64
			allowed          bool // the settle's decision
		}{
			{"under", 40, 25, true},
			{"exact", 40, 40, true},
			{"over, fits", 40, 70, true},
			{"over the limit", 90, 150, false},
			{"nothing used", 60, 0, true},
		} {
			t.Run(l.Algorithm.String()+"/"+tc.name, func(t *testing.T) {
				s := memService(t, newClock(), service.Config{})
				r := service.Request{Key: "llm:alice", Limit: l, Cost: tc.estimate}
				id, d, err := reserve(s, r)
				if err != nil || id == "" || !d.Allowed || d.Remaining != l.Capacity()-tc.estimate {
					t.Fatalf("reserve %d: id %q %+v %v", tc.estimate, id, d, err)
				}
				if got := used(t, s, r); got != tc.estimate {
					t.Fatalf("after the reservation, used %d; want the estimate %d", got, tc.estimate)
				}
				sd, err := s.Settle(context.Background(), id, tc.actual)
				if err != nil {
					t.Fatalf("settle %d: %v", tc.actual, err)
				}
				want := min(tc.actual, 2*l.Capacity()) // a debt is at most one capacity
				if sd.Allowed != tc.allowed || sd.Remaining != l.Capacity()-want {
					t.Errorf("settle %d: %+v; want allowed %v, remaining %d", tc.actual, sd, tc.allowed, l.Capacity()-want)
				}
				var gone *service.UnknownReservationError
				if _, err := s.Settle(context.Background(), id, tc.actual); !errors.As(err, &gone) || gone.ID != id {
					t.Errorf("a second settle: %v; want an unknown reservation", err)
				}
				if got := probe(t, s, r); got != want {
					t.Errorf("after the settles, spent %d; want the actual %d", got, want)
				}
				var st service.ReservationStats
				s.EachReservationPolicy(func(_ string, x service.ReservationStats) { st = x })
				if st.Excess != uint64(max(0, tc.actual-tc.estimate)) || st.GivenBack != uint64(max(0, tc.estimate-tc.actual)) {
					t.Errorf("stats: %d units charged over the estimate, %d given back; want %d and %d", st.Excess, st.GivenBack,
						max(0, tc.actual-tc.estimate), max(0, tc.estimate-tc.actual))
				}
				info := fmt.Sprint(s.InfoReservations())
				for _, f := range []string{fmt.Sprint("reservation_excess_units ", st.Excess), fmt.Sprint("reservation_units_given_back ", st.GivenBack)} {
					if !strings.Contains(info, "["+f+"]") {
						t.Errorf("INFO %s; want [%s]", info, f)
					}
				}
			})
		}
	}
}

// A reservation whose estimate does not fit is refused, takes nothing and
// holds no record.
func TestReserveRefused(t *testing.T) {
	s := memService(t, newClock(), service.Config{})
	r := service.Request{Key: "k", Limit: token100, Cost: 70}
	if id, d, err := reserve(s, r); err != nil || id == "" || !d.Allowed {
		t.Fatalf("first: %q %+v %v", id, d, err)
	}
	id, d, err := reserve(s, r)
	if err != nil || id != "" || d.Allowed || d.Remaining != 30 || d.RetryAfter <= 0 {
		t.Fatalf("second, 70 of the 30 left: %q %+v %v; want refused with no id", id, d, err)
	}
	if got := used(t, s, r); got != 70 {
		t.Errorf("used %d after the refusal; want 70", got)
	}
	var st service.ReservationStats
	s.EachReservationPolicy(func(_ string, x service.ReservationStats) { st = x })
	if st.Open != 1 || st.Events[service.ReservationMade] != 1 {
		t.Errorf("stats: %+v; want one open, one made", st)
	}
}

// A reservation not settled ends at its TTL, charged at its estimate: a
// settle after it finds no record, and the book counts it as expired,
// whether the settle or a sweep finds it ended.
func TestReservationExpires(t *testing.T) {
	clk := newClock()
	s := memService(t, clk, service.Config{})
	r := service.Request{Key: "k", Limit: fixed100, Cost: 30, ReserveTTL: time.Minute}
	a, _, _ := reserve(s, r)
	r.ReserveTTL = 0 // the default, 5 minutes
	b, _, _ := reserve(s, r)
	if a == "" || b == "" || a == b {
		t.Fatalf("ids %q %q", a, b)
	}
	clk.Add(time.Minute)
	var gone *service.UnknownReservationError
	if _, err := s.Settle(context.Background(), a, 0); !errors.As(err, &gone) {
		t.Errorf("settle at its TTL: %v; want an unknown or expired reservation", err)
	}
	if got := used(t, s, r); got != 60 {
		t.Errorf("used %d; want both estimates, 60", got)
	}
	stats := func() service.ReservationStats {
		var st service.ReservationStats
		s.EachReservationPolicy(func(_ string, x service.ReservationStats) { st = x })
		return st
	}
	if st := stats(); st.Open != 1 || st.Events[service.ReservationExpired] != 1 {
		t.Errorf("after the first ended: %+v", st)
	}
	clk.Add(4 * time.Minute)
	if st := stats(); st.Open != 0 || st.Events[service.ReservationExpired] != 2 || st.Events[service.ReservationSettled] != 0 {
		t.Errorf("after the default TTL, swept: %+v", st)
	}
	if _, err := s.Settle(context.Background(), b, 30); !errors.As(err, &gone) {
		t.Errorf("settle after the sweep: %v", err)
	}
	want := [][2]string{{"reservations_open", "0"}, {"reservations_made", "2"}, {"reservations_settled", "0"}, {"reservations_expired", "2"},
		{"reservation_excess_units", "0"}, {"reservation_units_given_back", "0"}}
	if got := s.InfoReservations(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("INFO: %v; want %v", got, want)
	}
}

// Past MaxReservations open, a reservation is refused with an error before
// it takes anything; a settle, or a record's end, makes room.
func TestReservationsBounded(t *testing.T) {
	clk := newClock()
	s := memService(t, clk, service.Config{MaxReservations: 2})
	r := service.Request{Key: "k", Limit: fixed100, Cost: 10, ReserveTTL: time.Minute}
	a, _, _ := reserve(s, r)
	if id, _, _ := reserve(s, r); id == "" {
		t.Fatal("second refused")
	}
	var full *service.TooManyReservationsError
	if _, _, err := reserve(s, r); !errors.As(err, &full) || full.Max != 2 {
		t.Fatalf("third: %v; want too many reservations", err)
	}
	if got := used(t, s, r); got != 20 {
		t.Errorf("used %d; the refused third took something", got)
	}
	if _, err := s.Settle(context.Background(), a, 10); err != nil {
		t.Fatal(err)
	}
	if id, _, err := reserve(s, r); id == "" || err != nil {
		t.Fatalf("after a settle: %v", err)
	}
	clk.Add(time.Minute)
	if id, _, err := reserve(s, r); id == "" || err != nil {
		t.Fatalf("after the records ended: %v", err)
	}
}

// What a reservation cannot be is refused with the parameter named.
func TestReserveRefusesParameters(t *testing.T) {
	s := memService(t, newClock(), service.Config{})
	log := engine.Limit{Algorithm: engine.SlidingLog, Rate: 10, Period: time.Minute}
	leaky := engine.Limit{Algorithm: engine.LeakyBucket, Rate: 10, Burst: 10, Period: time.Minute}
	for _, tc := range []struct {
		name  string
		r     service.Request
		param string
	}{
		{"ttl too long", service.Request{Key: "k", Limit: fixed100, Cost: 1, ReserveTTL: 2 * time.Hour}, "ttl"},
		{"ttl too short", service.Request{Key: "k", Limit: fixed100, Cost: 1, ReserveTTL: time.Microsecond}, "ttl"},
		{"estimate over the capacity", service.Request{Key: "k", Limit: fixed100, Cost: 101}, "cost"},
		{"sliding log", service.Request{Key: "k", Limit: log, Cost: 1}, ""},
		{"leaky bucket", service.Request{Key: "k", Limit: leaky, Cost: 1}, ""},
		{"with charge", service.Request{Key: "k", Limit: fixed100, Cost: 1, Charge: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := reserve(s, tc.r)
			var pe *engine.ParamError
			if !errors.As(err, &pe) || (tc.param != "" && pe.Param != tc.param) {
				t.Errorf("%v; want a *ParamError naming %q", err, tc.param)
			}
		})
	}
	for _, actual := range []int64{-1, engine.MaxRate + 1} {
		var pe *engine.ParamError
		if _, err := s.Settle(context.Background(), "x", actual); !errors.As(err, &pe) || pe.Param != "actual" {
			t.Errorf("settle at %d: %v; want a *ParamError naming actual", actual, err)
		}
	}
}

// A multi-limit policy's reservation takes from every limit or none, and
// its settle gives back to (or charges) every limit.
func TestReserveMultiLimit(t *testing.T) {
	ps := policies{"llm": {Name: "llm", Prefix: "llm:", Limits: []engine.NamedLimit{
		{Name: "minute", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 50, Burst: 50, Period: time.Minute}},
		{Name: "day", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 200, Period: 24 * time.Hour}},
	}}}
	s := memService(t, newClock(), service.Config{Policies: ps})
	r := service.Request{ByPolicy: true, Policy: "llm", Key: "alice", Cost: 40, Detail: true}
	left := func() [2]int64 {
		b := s.NewBatch()
		i, _ := b.Add(service.Request{ByPolicy: true, Policy: "llm", Key: "alice", Cost: 0, Peek: true, Detail: true})
		s.DecideWait(b)
		_, _, parts := b.Detail(i)
		return [2]int64{parts[0].Remaining, parts[1].Remaining}
	}
	id, _, err := reserve(s, r)
	if err != nil || id == "" {
		t.Fatalf("reserve: %q %v", id, err)
	}
	if got := left(); got != [2]int64{10, 160} {
		t.Fatalf("after reserving 40: %v; want [10 160]", got)
	}
	// 20 more do not fit the minute's 10: refused by one, taken from none.
	if id2, _, _ := reserve(s, service.Request{ByPolicy: true, Policy: "llm", Key: "alice", Cost: 20}); id2 != "" {
		t.Fatal("20 reserved with 10 left in the minute")
	}
	if got := left(); got != [2]int64{10, 160} {
		t.Fatalf("after a refused reservation: %v; want [10 160]", got)
	}
	if _, err := s.Settle(context.Background(), id, 15); err != nil {
		t.Fatal(err)
	}
	if got := left(); got != [2]int64{35, 185} {
		t.Errorf("after settling at 15: %v; want [35 185]", got)
	}
	r.Cost = 30
	id, _, _ = reserve(s, r)
	if _, err := s.Settle(context.Background(), id, 60); err != nil {
		t.Fatal(err)
	}
	if got := left(); got != [2]int64{0, 125} {
		t.Errorf("after settling 30 at 60: %v; want [0 125] (the minute 25 over)", got)
	}
}

// Shadow mode answers a refused reservation as admitted: its record holds
// nothing taken, so its settle charges the whole actual cost, as the
// CHARGE a shadow policy's client would send.
func TestReserveShadow(t *testing.T) {
	ps := policies{"trial": {Name: "trial", Prefix: "t:", Limit: fixed100, Shadow: true}}
	s := memService(t, newClock(), service.Config{Policies: ps})
	r := service.Request{ByPolicy: true, Policy: "trial", Key: "k", Cost: 80}
	a, _, _ := reserve(s, r)
	b, d, err := reserve(s, r)
	if err != nil || b == "" || !d.Allowed {
		t.Fatalf("the shadowed refusal: %q %+v %v; want admitted with an id", b, d, err)
	}
	if got := used(t, s, r); got != 80 {
		t.Fatalf("used %d; want 80, the shadowed one took nothing", got)
	}
	if _, err := s.Settle(context.Background(), b, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(context.Background(), a, 50); err != nil {
		t.Fatal(err)
	}
	if got := used(t, s, r); got != 80 {
		t.Errorf("used %d; want 30 + 50", got)
	}
}

// TestReservationsConcurrent is issue 40's test: rounds of 50 concurrent
// reservations of random estimates against a budget of 1,000, each then
// settled at a random actual cost, on the memory store, a real
// redis-server and a Cluster of 3 masters (a key on each), for a fixed
// window and a token bucket, the clock pinned
// so that nothing refills between the checks. In every round:
//   - no admitted estimate overran the budget: those admitted sum to at
//     most what was left when the round began;
//   - none was refused that fitted: a refused estimate is more than what
//     the admitted ones left;
//   - after the settles, the budget spent is exactly what it was plus the
//     actual costs: over the budget by no more than the settles above
//     their estimates added.
func TestReservationsConcurrent(t *testing.T) {
	const budget = 1000
	limits := []engine.Limit{
		{Algorithm: engine.FixedWindow, Rate: budget, Period: time.Hour},
		{Algorithm: engine.TokenBucket, Rate: budget, Burst: budget, Period: time.Hour},
	}
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
	t.Cleanup(func() { _ = client.Close() })
	cl := redistest.StartCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 2})
	t.Cleanup(func() { _ = cc.Close() })
	// On the Cluster, a key on each master: its hash tag is the key.
	var spread []string
	on := map[string]bool{}
	for i := 0; len(spread) < 3; i++ {
		k := fmt.Sprintf("llm:team-%d", i)
		if m := cl.MasterOf("{" + k + "}").Addr; !on[m] {
			on[m] = true
			spread = append(spread, k)
		}
	}
	upstreamOn := func(c redis.UniversalClient) func(*clock) engine.Store {
		return func(clk *clock) engine.Store {
			up, err := upstream.New(upstream.Config{Client: c, Now: clk.Now, Prefix: "rsv" + fmt.Sprint(rand.Uint32()) + ":"})
			if err != nil {
				t.Fatal(err)
			}
			return up
		}
	}
	stores := []struct {
		name string
		make func(clk *clock) engine.Store
		keys []string
	}{
		{"memory", func(clk *clock) engine.Store {
			mem, err := memstore.New(memstore.Config{Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			return mem
		}, []string{"llm:team"}},
		{"redis", upstreamOn(client), []string{"llm:team"}},
		{"cluster", upstreamOn(cc), spread},
	}
	for _, st := range stores {
		for _, l := range limits {
			t.Run(st.name+"/"+l.Algorithm.String(), func(t *testing.T) {
				clk := newClock()
				s, err := service.New(service.Config{Store: st.make(clk), Now: clk.Now})
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range st.keys {
					concurrentRounds(t, s, l, budget, key)
				}
			})
		}
	}
}

func concurrentRounds(t *testing.T, s *service.Service, l engine.Limit, budget int64, key string) {
	const n, rounds = 50, 6
	rng := rand.New(rand.NewPCG(1, uint64(l.Algorithm)))
	r := service.Request{Key: key, Limit: l}
	spent, overs := int64(0), int64(0)
	admittedAll := 0
	for round := range rounds {
		var est, act [n]int64
		for i := range n {
			est[i] = 1 + rng.Int64N(60)
			// Mostly under the estimate, at times over it.
			act[i] = rng.Int64N(est[i]*5/4 + 1)
		}
		var ids [n]string
		var errs [n]error
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				q := r
				q.Cost = est[i]
				ids[i], _, errs[i] = reserve(s, q)
			})
		}
		wg.Wait()
		left := budget - spent
		admitted := int64(0)
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d reservation %d: %v", round, i, errs[i])
			}
			if ids[i] != "" {
				admitted += est[i]
				admittedAll++
			}
		}
		if admitted > max(left, 0) {
			t.Fatalf("round %d: estimates admitted sum to %d with %d left: the budget overran", round, admitted, left)
		}
		for i := range n {
			if ids[i] == "" && est[i] <= left-admitted {
				t.Errorf("round %d: an estimate of %d was refused though %d were left after the admitted ones", round, est[i], left-admitted)
			}
		}
		if got := probe(t, s, r); got != spent+admitted {
			t.Fatalf("round %d: after the reservations, spent %d; want %d + %d", round, got, spent, admitted)
		}
		spent++ // the probe's
		for i := range n {
			if ids[i] == "" {
				continue
			}
			wg.Go(func() {
				if _, err := s.Settle(context.Background(), ids[i], act[i]); err != nil {
					errs[i] = err
				}
			})
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d settle %d: %v", round, i, errs[i])
			}
			if ids[i] != "" {
				spent += act[i]
				overs += max(act[i]-est[i], 0)
			}
		}
		got := probe(t, s, r)
		if got != spent {
			t.Fatalf("round %d: after the settles, spent %d; want the actual costs' %d", round, got, spent)
		}
		spent++
		overs++ // the probe's charge is over its (zero) estimate
		if got > budget+overs {
			t.Fatalf("round %d: spent %d, over the budget %d by more than the settles' excess %d", round, got, budget, overs)
		}
	}
	if admittedAll < n || admittedAll == rounds*n {
		t.Errorf("%d of %d reservations admitted: the test exercised no refusal, or too few admissions", admittedAll, rounds*n)
	}
}

// refusesRefunds answers every refund as a remembered refusal would,
// without the store: what a deny cache that took a refund for a request
// did.
type refusesRefunds struct{ engine.Store }

func (r refusesRefunds) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	for i := range reqs {
		if reqs[i].Refund {
			res[i] = engine.Result{Decision: engine.Decision{Limit: 100, RetryAfter: time.Second}, Path: engine.PathDenyCache}
			done(nil)
			return
		}
	}
	r.Store.Submit(reqs, res, deadline, done)
}

// A give-back answered by anything but the store was not made: the settle
// says so with an error, and the reservation stays charged.
func TestSettleNotGivenBack(t *testing.T) {
	clk := newClock()
	mem, _ := memstore.New(memstore.Config{Now: clk.Now})
	s, err := service.New(service.Config{Store: refusesRefunds{mem}, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	r := service.Request{Key: "k", Limit: fixed100, Cost: 50}
	id, _, _ := reserve(s, r)
	var ngb *service.NotGivenBackError
	if _, err := s.Settle(context.Background(), id, 10); !errors.As(err, &ngb) || ngb.Path != engine.PathDenyCache {
		t.Errorf("settle: %v; want not given back, by the deny cache", err)
	}
	if got := used(t, s, r); got != 50 {
		t.Errorf("used %d; want the estimate, 50", got)
	}
}

// A reservation with Peek is a look at its estimate (RL.EXPLAIN
// RL.RESERVE): it takes nothing and holds no record.
func TestReservePeek(t *testing.T) {
	s := memService(t, newClock(), service.Config{})
	r := service.Request{Key: "k", Limit: fixed100, Cost: 40, Peek: true}
	id, d, err := reserve(s, r)
	if err != nil || id != "" || !d.Allowed || d.Remaining != 60 {
		t.Fatalf("%q %+v %v; want a look, admitted, with no id", id, d, err)
	}
	if got := used(t, s, r); got != 0 {
		t.Errorf("used %d after a look", got)
	}
	if info := s.InfoReservations(); info[1] != [2]string{"reservations_made", "0"} {
		t.Errorf("INFO: %v", info)
	}
}
