package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// reservePolicies is llm, a budget of 1,000 a day, a fixed window, and
// chat, two limits: 100 a day and 150 a week. What they admit cannot
// refill while a test runs (unless it runs across midnight UTC: a week's
// windows, aligned to the epoch, also end at one).
func reservePolicies(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(p, []byte(`policies:
  llm:
    algorithm: fixed_window
    limit: 1000
    period: 1d
  chat:
    limits:
      - {name: day, algorithm: fixed_window, limit: 100, period: 1d}
      - {name: week, algorithm: fixed_window, limit: 150, period: 7d}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// reserveBackend is where a reservation test's sidecar keeps its
// budgets: its flags, and a client of the Redis behind it (nil for the
// memory store) to read the counts back from, with the master that
// holds a Redis key.
type reserveBackend struct {
	name    string
	masters int // the Redis masters the keys' budgets spread over
	start   func(t *testing.T) (args []string, rdb redis.UniversalClient, masterOf func(key string) string)
}

var reserveBackends = []reserveBackend{
	{"memory", 0, func(*testing.T) ([]string, redis.UniversalClient, func(string) string) { return nil, nil, nil }},
	{"redis", 1, func(t *testing.T) ([]string, redis.UniversalClient, func(string) string) {
		r := redistest.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr, Protocol: 2})
		t.Cleanup(func() { rdb.Close() })
		return []string{"--upstream", "redis://" + r.Addr, "--upstream-timeout", decidingTimeout}, rdb,
			func(string) string { return r.Addr }
	}},
	{"cluster", 3, func(t *testing.T) ([]string, redis.UniversalClient, func(string) string) {
		cl := redistest.StartCluster(t, 3, 0)
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 2})
		t.Cleanup(func() { rdb.Close() })
		return []string{"--upstream", "redis+cluster://" + strings.Join(cl.Addrs(), ","), "--upstream-timeout", decidingTimeout}, rdb,
			func(key string) string { return cl.MasterOf(key).Addr }
	}},
}

// reserveBudget is the llm policy's budget (reservePolicies).
const reserveBudget = 1000

// llmRedisKey is where Redis keeps the llm policy's count of key: the
// fixed window's hash, its hash tag the policy's key.
func llmRedisKey(key string) string { return "sluice:{llm:" + key + "}:fixed" }

// reserveReply is an RL.RESERVE reply read: the decision's remaining and
// the reservation's id, empty when refused.
type reserveReply struct {
	remaining int64
	id        string
}

// reserveLLM reserves estimate of the llm budget of key.
func reserveLLM(ctx context.Context, rdb *redis.Client, key string, estimate int64, more ...any) (reserveReply, error) {
	v, err := rdb.Do(ctx, append([]any{"RL.RESERVE", "POLICY", "llm", key, estimate}, more...)...).Slice()
	if err != nil {
		return reserveReply{}, err
	}
	if len(v) != 6 {
		return reserveReply{}, fmt.Errorf("reply %v", v)
	}
	allowed, _ := v[0].(int64)
	remaining, _ := v[2].(int64)
	id, _ := v[5].(string)
	switch {
	case allowed == 1 && len(id) != 16:
		return reserveReply{}, fmt.Errorf("an admission without an id: %v", v)
	case allowed != 1 && v[5] != nil:
		return reserveReply{}, fmt.Errorf("a refusal with an id: %v", v)
	}
	return reserveReply{remaining: remaining, id: id}, nil
}

// TestReserveSettleEndToEnd: on the memory store, one Redis and a Cluster
// of 3 masters, clients of the binary (go-redis) reserve random estimates
// of budgets of 1,000, 50 at once on each of 12 keys (spread over the
// Cluster's masters): those admitted fit their budget, none refused would
// have. Then they settle at random actual costs while as many new
// reservations are made on the same keys, and a watcher reads Redis's
// counts all along: no budget is ever over by more than the settlements
// above their estimates added, and once all have settled each budget
// spent, read back from Redis, exactly the actual costs. Reservations
// left unsettled end at their TTL, charged at their estimates. Last,
// redis-cli reserves and settles as a user would type it, and INFO and
// the metrics count the reservations.
func TestReserveSettleEndToEnd(t *testing.T) {
	for _, b := range reserveBackends {
		t.Run(b.name, func(t *testing.T) {
			args, store, masterOf := b.start(t)
			s := startSluice(t, append(args, "--policies", reservePolicies(t))...)
			ctx := ctxT(t)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 3, PoolSize: 100})
			defer rdb.Close()
			// spent is what key's budget spent, over it too: read from
			// Redis where it is kept, and by the sidecar, with a charge
			// of 1, the one reply whose remaining goes below zero; both
			// must agree. Each read spends its 1, counted in reads and
			// taken off.
			reads := map[string]int64{}
			spent := func(key string) int64 {
				t.Helper()
				v, err := rdb.Do(ctx, "RL.ALLOW", "llm", key, 1, "CHARGE").Slice()
				if err != nil {
					t.Fatal(err)
				}
				reads[key]++
				n := v[1].(int64) - v[2].(int64) - reads[key]
				if store != nil {
					if got := redisSpent(ctx, t, store, key) - reads[key]; got != n {
						t.Fatalf("Redis holds %d spent of %q; the sidecar answers %d", got, key, n)
					}
				}
				return n
			}

			made, over, under := reserveManyKeys(ctx, t, rdb, store, b.masters, masterOf, spent)
			chat := reserveMultiLimit(ctx, t, rdb, store)
			settled := made
			expired := reserveUnsettled(ctx, t, rdb, spent)
			made += expired
			if err := rdb.Do(ctx, "RL.SETTLE", "0123456789abcdef", 1).Err(); err == nil || !strings.Contains(err.Error(), "unknown or expired reservation") {
				t.Errorf("a settle of an unknown id: %v", err)
			}

			// redis-cli, as a user types it.
			out := redisCLI(t, s, "", "--no-raw", "RL.RESERVE", "RL.TOKEN", "cli", "100", "100", "1h", "60", "TTL", "1m")
			id := regexp.MustCompile(`(?m)^6\) "([0-9a-f]{16})"$`).FindStringSubmatch(out)
			if id == nil || !strings.HasPrefix(out, "1) (integer) 1\n2) (integer) 100\n3) (integer) 40\n") {
				t.Fatalf("redis-cli RL.RESERVE: %q", out)
			}
			if out := redisCLI(t, s, "", "--no-raw", "RL.SETTLE", id[1], "25"); !strings.HasPrefix(out, "1) (integer) 1\n2) (integer) 100\n3) (integer) 75\n") {
				t.Errorf("redis-cli RL.SETTLE: %q", out)
			}
			if out := redisCLI(t, s, "", "--no-raw", "RL.SETTLE", id[1], "25"); !strings.HasPrefix(out, "(error) ERR unknown or expired reservation '"+id[1]+"'") {
				t.Errorf("redis-cli RL.SETTLE again: %q", out)
			}
			info := redisCLI(t, s, "", "INFO", "reservations")
			for _, f := range []string{"reservations_open:0", fmt.Sprintf("reservations_made:%d", made+chat+1),
				fmt.Sprintf("reservations_settled:%d", settled+chat+1), fmt.Sprintf("reservations_expired:%d", expired),
				// Summed over the policies (their metrics below), and the
				// inline reservation redis-cli settled 35 under its 60.
				fmt.Sprintf("reservation_excess_units:%d", over+15*int64(chat)/2),
				fmt.Sprintf("reservation_units_given_back:%d", under+5*int64(chat)/2+35)} {
				if !strings.Contains(info, f+"\r\n") {
					t.Errorf("INFO reservations: %q; want %s", info, f)
				}
			}
			fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
			for event, want := range map[string]int{"made": made, "settled": settled, "expired": expired} {
				if v, ok := metricstest.Sample(fams, "sluice_reservations_total", map[string]string{"policy": "llm", "event": event}); !ok || v != float64(want) {
					t.Errorf("sluice_reservations_total{policy=llm,event=%s} = %v, %v; want %d", event, v, ok, want)
				}
			}
			if v, ok := metricstest.Sample(fams, "sluice_reservations_total", map[string]string{"policy": "chat", "event": "settled"}); !ok || v != float64(chat) {
				t.Errorf("sluice_reservations_total{policy=chat,event=settled} = %v, %v; want %d", v, ok, chat)
			}
			// The units settled over and under the estimates: chat's
			// reservations each settle 80 at 95 and 5 at 0.
			for _, c := range []struct {
				name, policy string
				want         int64
			}{
				{"sluice_reservation_excess_units_total", "llm", over},
				{"sluice_reservation_units_given_back_total", "llm", under},
				{"sluice_reservation_excess_units_total", "chat", 15 * int64(chat) / 2},
				{"sluice_reservation_units_given_back_total", "chat", 5 * int64(chat) / 2},
			} {
				if v, ok := metricstest.Sample(fams, c.name, map[string]string{"policy": c.policy}); !ok || v != float64(c.want) {
					t.Errorf("%s{policy=%s} = %v, %v; want %d", c.name, c.policy, v, ok, c.want)
				}
			}
			if v, ok := metricstest.Sample(fams, "sluice_reservations_open", map[string]string{"policy": "inline"}); !ok || v != 0 {
				t.Errorf("sluice_reservations_open{policy=inline} = %v, %v; want 0", v, ok)
			}
		})
	}
}

// redisSpent is the llm budget of key spent, as Redis holds it (the
// fixed window's n; 0 when it holds none).
func redisSpent(ctx context.Context, t *testing.T, store redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := store.HGet(ctx, llmRedisKey(key), "n").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("HGET %s n: %v", llmRedisKey(key), err)
	}
	return n
}

// reservation is one RL.RESERVE of reserveManyKeys and its settle.
type reservation struct {
	key      int
	est, act int64
	id       string // empty: refused
	err      error
}

// reserveManyKeys makes the reservations of TestReserveSettleEndToEnd on
// 12 keys in three steps, checking each budget, read back from Redis,
// after each; it returns how many reservations it made (all settled),
// and the units their settles charged over and gave back under the
// estimates.
func reserveManyKeys(ctx context.Context, t *testing.T, rdb *redis.Client, store redis.UniversalClient,
	masters int, masterOf func(string) string, spent func(string) int64) (made int, over, under int64) {
	t.Helper()
	const keys, per = 12, 50
	name := func(k int) string { return fmt.Sprintf("user-%02d", k) }
	if masterOf != nil {
		on := map[string]bool{}
		for k := range keys {
			on[masterOf(llmRedisKey(name(k)))] = true
		}
		if len(on) != masters {
			t.Fatalf("the keys' budgets are on %d masters; want %d", len(on), masters)
		}
	}
	rng := rand.New(rand.NewPCG(40, 12))
	// A round asks 50 estimates of 1 to 60 (30 on average: 1,500) of
	// each budget of 1,000, so that some are refused; actual costs are
	// up to 20 over.
	round := func() []reservation {
		r := make([]reservation, keys*per)
		for i := range r {
			est := 1 + rng.Int64N(60)
			r[i] = reservation{key: i % keys, est: est, act: rng.Int64N(est + 21)}
		}
		return r
	}
	// excess is each budget's charges over the estimates, added before
	// each settle is sent.
	var excess [keys]atomic.Int64
	// run reserves each of rs (nil: none) and settles each admitted of
	// settle (nil: none), all at once, and fails t on an error.
	var wg sync.WaitGroup
	run := func(rs, settle []reservation) {
		t.Helper()
		for i := range rs {
			r := &rs[i]
			wg.Go(func() {
				got, err := reserveLLM(ctx, rdb, name(r.key), r.est)
				r.id, r.err = got.id, err
				if err == nil && r.id == "" && r.est <= got.remaining {
					r.err = fmt.Errorf("an estimate of %d refused with %d left", r.est, got.remaining)
				}
			})
		}
		for i := range settle {
			r := &settle[i]
			if r.id == "" {
				continue
			}
			if r.act > r.est {
				excess[r.key].Add(r.act - r.est)
			}
			wg.Go(func() {
				if err := rdb.Do(ctx, "RL.SETTLE", r.id, r.act).Err(); err != nil {
					r.err = fmt.Errorf("settle %s at %d of %d: %w", r.id, r.act, r.est, err)
				}
			})
		}
		wg.Wait()
		for _, r := range slices.Concat(rs, settle) {
			if r.err != nil {
				t.Fatalf("%s: %v", name(r.key), r.err)
			}
		}
	}
	// sum is, per key, est or act of the admitted of rs.
	sum := func(rs []reservation, act bool) (s [keys]int64) {
		for _, r := range rs {
			switch {
			case r.id == "":
			case act:
				s[r.key] += r.act
			default:
				s[r.key] += r.est
			}
		}
		return s
	}

	// First, reservations only: each budget spent exactly what it
	// admitted, at most the budget, and what it refused did not fit
	// what was left.
	first := round()
	run(first, nil)
	for k, est := range sum(first, false) {
		got := spent(name(k))
		if got != est || got > reserveBudget {
			t.Errorf("%s spent %d; want the estimates admitted, %d, and at most %d", name(k), got, est, reserveBudget)
		}
		for _, r := range first {
			if r.key == k && r.id == "" && r.est <= reserveBudget-got {
				t.Errorf("%s: an estimate of %d refused with %d left after the admitted ones", name(k), r.est, reserveBudget-got)
			}
		}
	}

	// Then the first settle while a second round reserves, and a watcher
	// reads Redis's counts: never over a budget by more than the excess
	// charged so far (read after the count: it only grows).
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		defer close(watched)
		if store == nil {
			return
		}
		for {
			for k := range keys {
				n, err := store.HGet(ctx, llmRedisKey(name(k)), "n").Int64()
				if err != nil && !errors.Is(err, redis.Nil) {
					watched <- fmt.Errorf("HGET %s n: %w", llmRedisKey(name(k)), err)
					return
				}
				if bound := reserveBudget + excess[k].Load() + 1; n > bound { // + 1: spent's read
					watched <- fmt.Errorf("%s spent %d in Redis: over its budget by more than the excess charged, %d", name(k), n, bound-reserveBudget-1)
					return
				}
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	second := round()
	run(second, first)
	// Last, the second round settles.
	run(nil, second)
	close(stop)
	if err := <-watched; err != nil {
		t.Error(err)
	}
	a1, a2 := sum(first, true), sum(second, true)
	for k := range keys {
		got := spent(name(k))
		if want := a1[k] + a2[k]; got != want {
			t.Errorf("%s spent %d after the settles; want the actual costs, %d", name(k), got, want)
		}
		if got > reserveBudget+excess[k].Load() {
			t.Errorf("%s spent %d: over its budget by more than the excess charged, %d", name(k), got, excess[k].Load())
		}
	}
	refused := 0
	for _, r := range slices.Concat(first, second) {
		switch {
		case r.id == "":
			refused++
		case r.act > r.est:
			made++
			over += r.act - r.est
		default:
			made++
			under += r.est - r.act
		}
	}
	if refused == 0 || over == 0 || made == 0 {
		t.Fatalf("%d reservations made, %d refused, %d units settled over the estimates: the test tried nothing", made, refused, over)
	}
	return made, over, under
}

// reserveUnsettled: a reservation on each of 6 keys (spread over the
// Cluster's masters too), never settled, ends at its TTL charged at its
// estimate: counted as expired, its settle refused after, and its
// estimate still spent in Redis. It returns how many it made.
func reserveUnsettled(ctx context.Context, t *testing.T, rdb *redis.Client, spent func(string) int64) int {
	t.Helper()
	const keys, est = 6, 300
	before := info(t, rdb, "reservations")["reservations_expired"]
	var ids [keys]string
	for k := range keys {
		r, err := reserveLLM(ctx, rdb, fmt.Sprintf("forgot-%d", k), est, "TTL", "200ms")
		if err != nil || r.id == "" || r.remaining != reserveBudget-est {
			t.Fatalf("reserve %d with a TTL: %+v, %v", est, r, err)
		}
		ids[k] = r.id
	}
	within(t, 10*time.Second, "the unsettled reservations counted as expired", func() bool {
		return info(t, rdb, "reservations")["reservations_expired"] == before+keys
	})
	for k, id := range ids {
		if err := rdb.Do(ctx, "RL.SETTLE", id, 0).Err(); err == nil || !strings.Contains(err.Error(), "unknown or expired reservation") {
			t.Errorf("a settle after the TTL: %v", err)
		}
		if got := spent(fmt.Sprintf("forgot-%d", k)); got != est {
			t.Errorf("forgot-%d spent %d after its reservation ended; want its estimate, %d", k, got, est)
		}
	}
	return keys
}

// TestHTTPReserveSettle: the HTTP check's pair on the real binary, on the
// memory store, one Redis and a Cluster of 3 masters: reserve=N answers
// the id in X-Sluice-Reservation, POST /v1/settle settles it once, and a
// check, and Redis, see the budget the settle left.
func TestHTTPReserveSettle(t *testing.T) {
	for _, b := range reserveBackends {
		t.Run(b.name, func(t *testing.T) { testHTTPReserveSettle(t, b) })
	}
}

func testHTTPReserveSettle(t *testing.T, b reserveBackend) {
	args, store, _ := b.start(t)
	s := startDoors(t, "", append(args, "--policies", reservePolicies(t))...)
	// inRedis wants Redis to hold n spent of key's budget.
	inRedis := func(key string, n int64) {
		t.Helper()
		if store == nil {
			return
		}
		if got := redisSpent(context.Background(), t, store, key); got != n {
			t.Errorf("Redis holds %d spent of %q; want %d", got, key, n)
		}
	}
	do := func(method, target string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), method, "http://"+s.HTTP+target, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	res := do(http.MethodGet, "/v1/check?policy=llm&key=web&reserve=300")
	id := res.Header.Get("X-Sluice-Reservation")
	if res.StatusCode != 200 || len(id) != 16 || res.Header.Get("X-Ratelimit-Remaining") != "700" {
		t.Fatalf("reserve 300: %d %v", res.StatusCode, res.Header)
	}
	if res := do(http.MethodGet, "/v1/check?policy=llm&key=web&reserve=701"); res.StatusCode != 429 || res.Header.Get("X-Sluice-Reservation") != "" {
		t.Errorf("reserve 701 of 700: %d %v", res.StatusCode, res.Header)
	}
	inRedis("web", 300)
	if res := do(http.MethodPost, "/v1/settle?id="+id+"&actual=120"); res.StatusCode != 200 || res.Header.Get("X-Ratelimit-Remaining") != "880" {
		t.Errorf("settle at 120: %d %v", res.StatusCode, res.Header)
	}
	inRedis("web", 120)
	if res := do(http.MethodPost, "/v1/settle?id="+id+"&actual=120"); res.StatusCode != 404 {
		t.Errorf("settle twice: %d", res.StatusCode)
	}
	if res := do(http.MethodGet, "/v1/check?policy=llm&key=web&cost=0"); res.StatusCode != 200 || res.Header.Get("X-Ratelimit-Remaining") != "880" {
		t.Errorf("a check after the settle: %v", res.Header)
	}
	// A refused reservation is remembered by the deny cache; the settle
	// that gives back more than it asked for must still reach Redis,
	// never be answered as that refusal.
	id = do(http.MethodGet, "/v1/check?policy=llm&key=full&reserve=990").Header.Get("X-Sluice-Reservation")
	if res := do(http.MethodGet, "/v1/check?policy=llm&key=full&reserve=20"); res.StatusCode != 429 {
		t.Fatalf("reserve 20 of 10: %d", res.StatusCode)
	}
	if res := do(http.MethodPost, "/v1/settle?id="+id+"&actual=0"); res.StatusCode != 200 || res.Header.Get("X-Ratelimit-Remaining") != "1000" {
		t.Errorf("settle of 990 at 0 after a remembered refusal: %d %v", res.StatusCode, res.Header)
	}
	inRedis("full", 0)
	if res := do(http.MethodGet, "/v1/check?policy=llm&key=full&reserve=20"); res.StatusCode != 200 {
		t.Errorf("reserve 20 after everything was given back: %d %v", res.StatusCode, res.Header)
	}
}

// reserveMultiLimit: a reservation by a policy of two limits (chat: 100
// a day, 150 a week) takes its estimate from both or neither, and its
// settle charges or gives back on both, each limit's count read back
// from Redis, on keys spread over the Cluster's masters (a request's
// limits share its key's slot). It returns how many reservations it
// made (all settled).
func reserveMultiLimit(ctx context.Context, t *testing.T, rdb *redis.Client, store redis.UniversalClient) (made int) {
	t.Helper()
	const keys = 6
	reserve := func(key string, est int64) (string, int64) {
		t.Helper()
		v, err := rdb.Do(ctx, "RL.RESERVE", "POLICY", "chat", key, est).Slice()
		if err != nil || len(v) != 6 {
			t.Fatalf("RL.RESERVE POLICY chat %s %d: %v, %v", key, est, v, err)
		}
		id, _ := v[5].(string)
		return id, v[2].(int64)
	}
	settle := func(id string, actual int64) int64 {
		t.Helper()
		v, err := rdb.Do(ctx, "RL.SETTLE", id, actual).Slice()
		if err != nil {
			t.Fatalf("RL.SETTLE %s %d: %v", id, actual, err)
		}
		return v[2].(int64)
	}
	// counts wants each limit's count of key in Redis to be n.
	counts := func(key string, n int64) {
		t.Helper()
		if store == nil {
			return
		}
		for _, limit := range []string{"day", "week"} {
			k := "sluice:{chat:" + key + "}:" + limit + ":fixed"
			got, err := store.HGet(ctx, k, "n").Int64()
			if err != nil || got != n {
				t.Errorf("%s: n = %d, %v in Redis; want %d", k, got, err, n)
			}
		}
	}
	for k := range keys {
		key := fmt.Sprintf("team-%d", k)
		id, left := reserve(key, 80)
		if id == "" || left != 20 {
			t.Fatalf("%s: reserve 80 of 100 a day: id %q, %d left", key, id, left)
		}
		counts(key, 80)
		if id, left := reserve(key, 30); id != "" || left != 20 {
			t.Errorf("%s: reserve 30 of the day's 20 left: id %q, %d left", key, id, left)
		}
		counts(key, 80)
		if left := settle(id, 95); left != 5 {
			t.Errorf("%s: settle 80 at 95: %d left; want 5", key, left)
		}
		counts(key, 95)
		id, left = reserve(key, 5)
		if id == "" || left != 0 {
			t.Fatalf("%s: reserve the day's last 5: id %q, %d left", key, id, left)
		}
		counts(key, 100)
		if left := settle(id, 0); left != 5 {
			t.Errorf("%s: settle 5 at 0: %d left; want 5", key, left)
		}
		counts(key, 95)
		made += 2
	}
	return made
}
