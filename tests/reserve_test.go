package tests

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// reservePolicies is a budget of 1,000 a day, a fixed window: what a day
// admits cannot refill while a test runs (unless it runs across
// midnight UTC).
func reservePolicies(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(p, []byte("policies:\n  llm:\n    algorithm: fixed_window\n    limit: 1000\n    period: 1d\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReserveSettleEndToEnd: 50 clients of the binary (go-redis) reserve
// random estimates of one budget of 1,000 at once, on the memory store
// and on a real Redis; those admitted fit the budget, none refused would
// have, and after each settles at a random actual cost the budget spent
// is exactly the actual costs. Then redis-cli reserves and settles as a
// user would type it, and INFO and the metrics count the reservations.
func TestReserveSettleEndToEnd(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := startSluice(t, append(b.args(t), "--policies", reservePolicies(t))...)
			ctx := ctxT(t)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 3, PoolSize: 50})
			defer rdb.Close()
			const n = 50
			rng := rand.New(rand.NewPCG(40, 3))
			var est, act [n]int64
			for i := range n {
				est[i] = 1 + rng.Int64N(40)
				act[i] = rng.Int64N(est[i] + 10)
			}
			var ids [n]string
			var errs [n]error
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					v, err := rdb.Do(ctx, "RL.RESERVE", "POLICY", "llm", "team", est[i]).Slice()
					switch {
					case err != nil:
						errs[i] = err
					case len(v) != 6:
						errs[i] = fmt.Errorf("reply %v", v)
					case v[0].(int64) == 1:
						ids[i], _ = v[5].(string)
					case v[5] != nil:
						errs[i] = fmt.Errorf("a refusal with an id: %v", v)
					}
				})
			}
			wg.Wait()
			admitted := int64(0)
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("reservation %d: %v", i, errs[i])
				}
				if ids[i] != "" {
					admitted += est[i]
				}
			}
			if admitted > 1000 {
				t.Fatalf("estimates admitted sum to %d of a budget of 1000", admitted)
			}
			for i := range n {
				if ids[i] == "" && est[i] <= 1000-admitted {
					t.Errorf("an estimate of %d refused with %d left after the admitted ones", est[i], 1000-admitted)
				}
			}
			// What the budget spent, over it too: read by a charge of 1,
			// the one reply whose remaining goes below zero, which
			// spends one more.
			spent := func() int64 {
				t.Helper()
				v, err := rdb.Do(ctx, "RL.ALLOW", "llm", "team", 1, "CHARGE").Slice()
				if err != nil {
					t.Fatal(err)
				}
				return v[1].(int64) - v[2].(int64) - 1
			}
			if got := spent(); got != admitted {
				t.Fatalf("spent %d after the reservations; want %d", got, admitted)
			}
			want := int64(1) // the read's
			for i := range n {
				if ids[i] == "" {
					continue
				}
				want += act[i]
				wg.Go(func() {
					if _, err := rdb.Do(ctx, "RL.SETTLE", ids[i], act[i]).Slice(); err != nil {
						errs[i] = err
					}
				})
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("settle %d: %v", i, errs[i])
				}
			}
			if got := spent(); got != want {
				t.Errorf("spent %d after the settles; want the actual costs, %d", got, want)
			}
			if err := rdb.Do(ctx, "RL.SETTLE", ids[0]+ids[1], 1).Err(); err == nil || !strings.Contains(err.Error(), "unknown or expired reservation") {
				t.Errorf("a settle of an unknown id: %v", err)
			}

			// redis-cli, as a user types it.
			out := redisCLI(t, s, "", "--no-raw", "RL.RESERVE", "RL.TOKEN", "cli", "100", "100", "1h", "60", "TTL", "1m")
			m := regexp.MustCompile(`(?m)^6\) "([0-9a-f]{16})"$`).FindStringSubmatch(out)
			if m == nil || !strings.HasPrefix(out, "1) (integer) 1\n2) (integer) 100\n3) (integer) 40\n") {
				t.Fatalf("redis-cli RL.RESERVE: %q", out)
			}
			if out := redisCLI(t, s, "", "--no-raw", "RL.SETTLE", m[1], "25"); !strings.HasPrefix(out, "1) (integer) 1\n2) (integer) 100\n3) (integer) 75\n") {
				t.Errorf("redis-cli RL.SETTLE: %q", out)
			}
			if out := redisCLI(t, s, "", "--no-raw", "RL.SETTLE", m[1], "25"); !strings.HasPrefix(out, "(error) ERR unknown or expired reservation '"+m[1]+"'") {
				t.Errorf("redis-cli RL.SETTLE again: %q", out)
			}
			made := 1
			for _, id := range ids {
				if id != "" {
					made++
				}
			}
			info := redisCLI(t, s, "", "INFO", "reservations")
			if !strings.Contains(info, "reservations_open:0\r\n") || !strings.Contains(info, fmt.Sprintf("reservations_made:%d\r\n", made)) ||
				!strings.Contains(info, fmt.Sprintf("reservations_settled:%d\r\n", made)) {
				t.Errorf("INFO reservations: %q; want %d made and settled, none open", info, made)
			}
			fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
			if v, ok := metricstest.Sample(fams, "sluice_reservations_total", map[string]string{"policy": "llm", "event": "settled"}); !ok || v != float64(made-1) {
				t.Errorf("sluice_reservations_total{policy=llm,event=settled} = %v, %v; want %d", v, ok, made-1)
			}
			if v, ok := metricstest.Sample(fams, "sluice_reservations_open", map[string]string{"policy": "inline"}); !ok || v != 0 {
				t.Errorf("sluice_reservations_open{policy=inline} = %v, %v; want 0", v, ok)
			}
		})
	}
}

// TestHTTPReserveSettle: the HTTP check's pair on the real binary and a
// real Redis: reserve=N answers the id in X-Sluice-Reservation, POST
// /v1/settle settles it once, and a check sees the budget the settle
// left.
func TestHTTPReserveSettle(t *testing.T) {
	r := redistest.Start(t)
	s := startDoors(t, "", "--policies", reservePolicies(t), "--upstream", "redis://"+r.Addr, "--upstream-timeout", decidingTimeout)
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
	if res := do(http.MethodPost, "/v1/settle?id="+id+"&actual=120"); res.StatusCode != 200 || res.Header.Get("X-Ratelimit-Remaining") != "880" {
		t.Errorf("settle at 120: %d %v", res.StatusCode, res.Header)
	}
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
	if res := do(http.MethodGet, "/v1/check?policy=llm&key=full&reserve=20"); res.StatusCode != 200 {
		t.Errorf("reserve 20 after everything was given back: %d %v", res.StatusCode, res.Header)
	}
}
