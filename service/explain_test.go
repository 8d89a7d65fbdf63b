package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/service"
)

// explainNth decides req n times in one batch on the memory store and
// returns the last decision's explanation.
func explainNth(t *testing.T, svc *service.Service, req service.Request, n int) service.Explanation {
	t.Helper()
	b := svc.NewBatch().From("resp")
	var last int
	for range n {
		i, err := b.Add(req)
		if err != nil {
			t.Fatal(err)
		}
		last = i
	}
	decide(svc, b)
	e, err := b.Explain(last)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Each algorithm's explanation carries its rule, its own decision and the
// state it leaves in the algorithm's terms: the third request of a key
// allowed two a second is refused by every one of them.
func TestExplainEachAlgorithm(t *testing.T) {
	sec := time.Second
	for _, tc := range []struct {
		limit engine.Limit
		want  engine.Decision // of the third request
		state string
	}{
		{engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: sec},
			engine.Decision{Limit: 2, RetryAfter: sec, ResetAfter: sec}, "used 2 of 2, back to full in 1000ms"},
		{engine.Limit{Algorithm: engine.SlidingWindow, Rate: 2, Period: sec},
			engine.Decision{Limit: 2, RetryAfter: 3 * sec / 2, ResetAfter: 2 * sec}, "used 2 of 2, back to full in 2000ms"},
		{engine.Limit{Algorithm: engine.SlidingLog, Rate: 2, Period: sec},
			engine.Decision{Limit: 2, RetryAfter: sec, ResetAfter: sec}, "used 2 of 2, back to full in 1000ms"},
		{engine.Limit{Algorithm: engine.TokenBucket, Rate: 2, Burst: 2, Period: sec},
			engine.Decision{Limit: 2, RetryAfter: sec / 2, ResetAfter: sec}, "tokens 0 of 2, full in 1000ms"},
		{engine.Limit{Algorithm: engine.LeakyBucket, Rate: 2, Burst: 2, Period: sec},
			engine.Decision{Limit: 2, RetryAfter: sec / 2, ResetAfter: sec}, "queued 2 of 2, drained in 1000ms"},
		{engine.Limit{Algorithm: engine.GCRA, Rate: 2, Burst: 1, Period: sec},
			engine.Decision{Limit: 2, RetryAfter: sec / 2, ResetAfter: sec}, "TAT now+1000ms"},
	} {
		t.Run(tc.limit.Algorithm.String(), func(t *testing.T) {
			svc, _ := newService(t, nil)
			e := explainNth(t, svc, service.Request{Key: "u1", Limit: tc.limit, Cost: 1}, 3)
			l := tc.limit
			want := service.Explanation{Door: "resp", Key: "u1", Stored: "u1", Cost: 1, Bound: l.Algorithm.String(),
				Path: "store", OnFailure: "default", Why: "store decided", At: 1_800_000_000_000_000,
				Limits: []service.LimitExplanation{{Name: l.Algorithm.String(), Algorithm: l.Algorithm.String(),
					Rate: l.Rate, Burst: l.Burst, Period: "1s", Limit: tc.want.Limit,
					RetryAfterMs: tc.want.RetryAfter.Milliseconds(), ResetAfterMs: tc.want.ResetAfter.Milliseconds(), State: tc.state}}}
			if !reflect.DeepEqual(e, want) {
				t.Errorf("explanation\n%+v\nwant\n%+v", e, want)
			}
		})
	}
}

// A multi-limit policy's explanation holds each limit's own decision and
// names the one that refused; the policies' digest comes from the
// service's Config.
func TestExplainMultiLimit(t *testing.T) {
	ps := policies{"api": {Name: "api", Prefix: "api:", Limits: []engine.NamedLimit{
		{Name: "second", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Second}},
		{Name: "day", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 100, Burst: 100, Period: 24 * time.Hour}},
	}}}
	svc, _ := newServiceWith(t, service.Config{Policies: ps, Digest: func() string { return "d1g35t" }})
	e := explainNth(t, svc, service.Request{ByPolicy: true, Policy: "api", Key: "u1", Cost: 1}, 3)
	if e.Allowed || e.Bound != "second" || e.Policy != "api" || e.Key != "u1" || e.Stored != "api:u1" || e.Digest != "d1g35t" {
		t.Errorf("explanation %+v: want refused by api's limit second, key u1 stored as api:u1, digest d1g35t", e)
	}
	if len(e.Limits) != 2 {
		t.Fatalf("limits %+v; want two", e.Limits)
	}
	second, day := e.Limits[0], e.Limits[1]
	if second.Name != "second" || second.Allowed || second.State != "used 2 of 2, back to full in 1000ms" {
		t.Errorf("limit second %+v: want refused, used 2 of 2", second)
	}
	// The day's bucket admitted the third and took nothing for it: a
	// multi-limit request takes from none when one refuses.
	if day.Name != "day" || !day.Allowed || day.Remaining != 98 || day.Algorithm != "token_bucket" {
		t.Errorf("limit day %+v: want allowed with 98 left", day)
	}
	// The JSON names are the documented format.
	var m map[string]any
	raw, _ := json.Marshal(e)
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy", "key", "stored_key", "allowed", "bound", "limits", "path", "why", "digest", "on_failure"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON %s lacks %q", raw, k)
		}
	}
}

// Shadow mode: the caller was allowed, and the explanation says that the
// limit itself refused.
func TestExplainShadow(t *testing.T) {
	svc, _ := newService(t, testPolicies)
	e := explainNth(t, svc, service.Request{ByPolicy: true, Policy: "trial", Key: "u1", Cost: 1}, 2)
	if !e.Allowed || !e.Shadowed || e.Limits[0].Allowed || e.Bound != "trial" {
		t.Errorf("explanation %+v: want allowed, shadowed, its limit refused", e)
	}
}

// pathStore answers every request as a failure mode would, so that the
// path's sentence can be checked.
type pathStore struct {
	engine.Store
	path    engine.Path
	allowed bool
}

func (p pathStore) Submit(reqs []engine.Request, res []engine.Result, _ time.Time, done func(error)) {
	for i := range reqs {
		res[i] = engine.Result{Decision: engine.Decision{Allowed: p.allowed}, Path: p.path}
	}
	done(nil)
}

func TestExplainPath(t *testing.T) {
	for _, tc := range []struct {
		path    engine.Path
		allowed bool
		name    string
		why     string
	}{
		{engine.PathStore, true, "redis", "redis decided"},
		{engine.PathDenyCache, false, "deny_cache", "a refusal redis gave earlier, remembered and answered here until its retry_after"},
		{engine.PathLocal, true, "local_fallback", "the store failed or was too slow; the in-memory store decided (on_failure deny)"},
		{engine.PathFailOpen, true, "fail_open", "the store failed or was too slow; allowed by the failure mode (on_failure deny)"},
		{engine.PathFailClosed, false, "fail_closed", "the store failed or was too slow; refused by the failure mode (on_failure deny)"},
	} {
		svc, err := service.New(service.Config{Store: pathStore{path: tc.path, allowed: tc.allowed}, StoreName: "redis", Policies: testPolicies})
		if err != nil {
			t.Fatal(err)
		}
		e := explainNth(t, svc, service.Request{ByPolicy: true, Policy: "closed", Key: "u1", Cost: 1}, 1)
		if e.Path != tc.name || e.Why != tc.why || e.OnFailure != "deny" || e.Allowed != tc.allowed {
			t.Errorf("%s: explanation %+v; want path %s, why %q, on_failure deny", tc.path, e, tc.name, tc.why)
		}
	}
}

// A request that failed has an error, not an explanation.
func TestExplainError(t *testing.T) {
	svc, rec := newService(t, nil)
	rec.err = errTest
	b := svc.NewBatch()
	if _, err := b.Add(service.Request{Key: "u1", Limit: oneAnHour, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	decide(svc, b)
	if _, err := b.Explain(0); err != errTest {
		t.Errorf("Explain: %v; want %v", err, errTest)
	}
}

var errTest = errors.New("store unreachable")

// newServiceWith is newService with more of the Config.
func newServiceWith(t *testing.T, cfg service.Config) (*service.Service, *recorder) {
	t.Helper()
	mem, err := memstore.New(memstore.Config{Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Store: mem}
	cfg.Store = rec
	svc, err := service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc, rec
}

// failingStates is a StateReader whose reads fail.
type failingStates struct{}

func (failingStates) ReadState(context.Context, string, engine.NamedLimit) (engine.State, int64, error) {
	return engine.State{}, 0, errTest
}
func (failingStates) StateKey(key string, _ engine.NamedLimit) string { return "at:" + key }

// ExplainHeld reads each limit's state back through the StateReader and
// says what it means; a read that fails says why beside the rest of the
// explanation; without a reader, nothing is read.
func TestExplainHeld(t *testing.T) {
	mem, err := memstore.New(memstore.Config{Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	ps := policies{"search": searchPolicy}
	for _, tc := range []struct {
		name   string
		states service.StateReader
		check  func(t *testing.T, e service.Explanation)
	}{
		{"memory", mem, func(t *testing.T, e service.Explanation) {
			burst, daily := e.Limits[0].Held, e.Limits[1].Held
			if burst == nil || daily == nil {
				t.Fatalf("held %+v %+v", burst, daily)
			}
			if daily.Key != "{search:u}:daily" || daily.At != 1_800_000_000_000_000 ||
				!reflect.DeepEqual(daily.Values, map[string]int64{"w": 1_799_971_200_000_000, "n": 2}) ||
				daily.State != "used 2 of 2, back to full in 57600000ms" {
				t.Errorf("daily held %+v", daily)
			}
			if !reflect.DeepEqual(burst.Values, map[string]int64{"z": 1_800_000_000_400_000}) || burst.State != "tokens 3 of 5, full in 400ms" {
				t.Errorf("burst held %+v", burst)
			}
		}},
		{"failing", failingStates{}, func(t *testing.T, e service.Explanation) {
			if h := e.Limits[1].Held; h == nil || h.Key != "at:search:u" || h.Error != errTest.Error() || h.Values != nil {
				t.Errorf("held %+v; want the read's error", h)
			}
		}},
		{"none", nil, func(t *testing.T, e service.Explanation) {
			if e.Limits[0].Held != nil {
				t.Errorf("held %+v without a reader", e.Limits[0].Held)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := service.New(service.Config{Store: mem, Policies: ps, States: tc.states})
			if err != nil {
				t.Fatal(err)
			}
			b := svc.NewBatch()
			for range 2 {
				if _, err := b.Add(service.Request{ByPolicy: true, Policy: "search", Key: "u", Cost: 1}); err != nil {
					t.Fatal(err)
				}
			}
			decide(svc, b)
			b.Clear()
			i, _ := b.Add(service.Request{ByPolicy: true, Policy: "search", Key: "u", Cost: 1, Peek: true})
			decide(svc, b)
			e, err := b.ExplainHeld(t.Context(), i)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, e)
			if err := mem.Reset(t.Context(), "search:u", searchPolicy.Limits...); err != nil {
				t.Fatal(err)
			}
		})
	}
}
