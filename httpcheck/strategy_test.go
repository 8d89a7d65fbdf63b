package httpcheck

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/service"
)

// The draft (draft-ietf-httpapi-ratelimit-headers) allows a client two
// strategies: pace itself at RateLimit-Policy's q over w, or spend
// RateLimit's r at once and then wait t seconds. Issue 28 found the fields
// lying (GCRA at 100 a minute with burst 20 said q=21;w=60, a token bucket
// of 10 a second holding 50 said q=50;w=1), so a client trusting them was
// refused or wasted its budget. For every algorithm, through a real HTTP
// check over the in-memory store on a clock the test moves: neither
// strategy is ever refused, and pacing at q/w uses at least 90% of the
// limit's rate.
func TestClientStrategiesFollowingTheFields(t *testing.T) {
	for _, l := range []engine.Limit{
		{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Minute},
		{Algorithm: engine.SlidingWindow, Rate: 100, Period: time.Minute},
		{Algorithm: engine.SlidingWindow, Rate: 100, Period: time.Minute, Precision: 10},
		{Algorithm: engine.SlidingWindow, Rate: 20, Period: 10 * time.Second, Precision: 5},
		{Algorithm: engine.SlidingWindow, Rate: 1000, Period: time.Minute, Precision: 6},
		{Algorithm: engine.SlidingLog, Rate: 20, Period: 10 * time.Second},
		{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 50},
		{Algorithm: engine.LeakyBucket, Rate: 10, Period: time.Second, Burst: 20},
		{Algorithm: engine.GCRA, Rate: 100, Period: time.Minute, Burst: 20},
		{Algorithm: engine.GCRA, Rate: 10, Period: 1500 * time.Millisecond, Burst: 3},
	} {
		name := fmt.Sprintf("%v %d per %v burst %d precision %d", l.Algorithm, l.Rate, l.Period, l.Burst, l.Precision)
		t.Run(name+"/pace at q over w", func(t *testing.T) {
			c := newStrategyClient(t, l)
			first := c.check(t)
			q, w := first.policy(t)
			if rate, want := float64(q)/float64(w), float64(l.Rate)/l.Period.Seconds(); rate < 0.9*want || rate > want {
				t.Fatalf("q=%d;w=%d is %g a second; the limit sustains %g", q, w, rate, want)
			}
			interval := (time.Duration(w)*time.Second + time.Duration(q) - 1) / time.Duration(q) // rounded up: never faster than q/w
			end := c.now() + int64(max(3*l.Period, 10*time.Second))
			n := 1
			for c.now() < end {
				c.advance(interval)
				if a := c.check(t); a.status != http.StatusOK {
					t.Fatalf("paced request %d, %v after the first, refused: %d %s", n, time.Duration(n)*interval, a.status, a.rateLimit)
				}
				n++
			}
		})
		t.Run(name+"/spend r then wait t", func(t *testing.T) {
			c := newStrategyClient(t, l)
			end := c.now() + int64(max(3*l.Period, 10*time.Second))
			spent := 0
			for round := 0; c.now() < end; round++ {
				a := c.check(t)
				if a.status != http.StatusOK {
					t.Fatalf("round %d: the first request after waiting t refused: %d %s", round, a.status, a.rateLimit)
				}
				spent++
				r, _ := a.remaining(t)
				for i := range r {
					if a = c.check(t); a.status != http.StatusOK {
						t.Fatalf("round %d: request %d of r=%d refused: %d %s", round, i+1, r, a.status, a.rateLimit)
					}
					spent++
				}
				_, wait := a.remaining(t)
				c.advance(time.Duration(max(wait, 1)) * time.Second)
			}
			if spent < int(l.Rate) {
				t.Fatalf("spent %d over %v: the strategy made no use of the limit", spent, 3*l.Period)
			}
		})
	}
}

// strategyClient checks one key of policy "p" over real HTTP against a
// server whose store reads the client's clock.
type strategyClient struct {
	url   string
	clock atomic.Int64 // unix nanoseconds
}

func newStrategyClient(t *testing.T, l engine.Limit) *strategyClient {
	t.Helper()
	c := &strategyClient{}
	c.clock.Store(time.Unix(1_800_000_030, 123_456_000).UnixNano())
	mem, err := memstore.New(memstore.Config{Now: func() time.Time { return time.Unix(0, c.clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: mem, Policies: policies{"p": {Name: "p", Prefix: "p:", Limit: l}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.http.Close() })
	c.url = "http://" + ln.Addr().String() + Path + "?policy=p&key=client"
	return c
}

func (c *strategyClient) now() int64              { return c.clock.Load() }
func (c *strategyClient) advance(d time.Duration) { c.clock.Add(int64(d)) }

// answer is what a check said.
type answer struct {
	status             int
	policyF, rateLimit string
}

func (c *strategyClient) check(t *testing.T) answer {
	t.Helper()
	resp, err := http.Get(c.url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return answer{resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit")}
}

var (
	policyItem = regexp.MustCompile(`^"p";q=(\d+);w=(\d+)(;sluice-burst=\d+)?$`)
	limitItem  = regexp.MustCompile(`^"p";r=(\d+);t=(\d+)$`)
)

func (a answer) policy(t *testing.T) (q, w int64) {
	t.Helper()
	m := policyItem.FindStringSubmatch(a.policyF)
	if m == nil {
		t.Fatalf("RateLimit-Policy %q is not one item \"p\";q=…;w=…", a.policyF)
	}
	q, _ = strconv.ParseInt(m[1], 10, 64)
	w, _ = strconv.ParseInt(m[2], 10, 64)
	if q < 1 || w < 1 {
		t.Fatalf("RateLimit-Policy %q: q and w must be positive", a.policyF)
	}
	return q, w
}

func (a answer) remaining(t *testing.T) (r, reset int64) {
	t.Helper()
	m := limitItem.FindStringSubmatch(a.rateLimit)
	if m == nil {
		t.Fatalf("RateLimit %q is not one item \"p\";r=…;t=…", a.rateLimit)
	}
	r, _ = strconv.ParseInt(m[1], 10, 64)
	reset, _ = strconv.ParseInt(m[2], 10, 64)
	return r, reset
}
