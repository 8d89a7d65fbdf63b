package service_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/service"
)

// policies is a fixed set for the tests.
type policies map[string]engine.Policy

func (p policies) Lookup(name string) (engine.Policy, bool) {
	v, ok := p[name]
	return v, ok
}

var oneAnHour = engine.Limit{Algorithm: engine.GCRA, Rate: 1, Period: time.Hour}

var testPolicies = policies{
	"api":    {Name: "api", Limit: oneAnHour, Prefix: "api:"},
	"trial":  {Name: "trial", Limit: oneAnHour, Prefix: "trial:", Shadow: true},
	"closed": {Name: "closed", Limit: oneAnHour, Prefix: "closed:", OnFailure: engine.FailClosed},
	"kept":   {Name: "kept", Limit: oneAnHour, Prefix: "kept:", Durable: engine.DurableReplica},
}

// recorder is a store that records the requests it is asked, then lets
// the memory store decide them.
type recorder struct {
	engine.Store
	seen  []engine.Request
	calls int
	err   error
}

func (r *recorder) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	r.calls++
	r.seen = append(r.seen, reqs...)
	if r.err != nil {
		done(r.err)
		return
	}
	r.Store.Submit(reqs, res, deadline, done)
}

func newService(t *testing.T, ps engine.Policies) (*service.Service, *recorder) {
	t.Helper()
	return newServiceWith(t, service.Config{Policies: ps})
}

func decide(svc *service.Service, bs ...*service.Batch) {
	done := false
	svc.Decide(bs, func() { done = true })
	if !done {
		panic("Decide returned before done ran: the tests assume a store that answers at once")
	}
}

// A policy's request reaches the store under its prefix, with its limit
// and failure mode; an inline one as it came.
func TestResolvesPolicies(t *testing.T) {
	svc, rec := newService(t, testPolicies)
	b := svc.NewBatch()
	for _, r := range []service.Request{
		{ByPolicy: true, Policy: "api", Key: "u1", Cost: 1},
		{ByPolicy: true, Policy: "closed", Key: "u1", Cost: 1},
		{Key: "u1", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 5, Period: time.Second}, Cost: 2},
	} {
		if _, err := b.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	decide(svc, b)
	want := []engine.Request{
		{Key: "api:u1", Limit: oneAnHour, Cost: 1},
		{Key: "closed:u1", Limit: oneAnHour, Cost: 1, OnFailure: engine.FailClosed},
		{Key: "u1", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 5, Period: time.Second}, Cost: 2},
	}
	if len(rec.seen) != len(want) {
		t.Fatalf("store saw %d requests; want %d", len(rec.seen), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(rec.seen[i], want[i]) {
			t.Errorf("request %d reached the store as %+v; want %+v", i, rec.seen[i], want[i])
		}
	}
}

// Requests that cannot be decided are refused at Add, with an error a
// door can word, and counted; they never reach the store.
func TestAddRefuses(t *testing.T) {
	svc, rec := newService(t, testPolicies)
	none, _ := newService(t, nil)
	for _, tc := range []struct {
		name string
		svc  *service.Service
		req  service.Request
		want string
	}{
		{"no policies loaded", none, service.Request{ByPolicy: true, Policy: "api", Key: "k"}, "no policies are loaded"},
		{"unknown policy", svc, service.Request{ByPolicy: true, Policy: "nope", Key: "k"}, "invalid policy nope: no such policy"},
		// An inline limit beside it would be decided, were the empty name
		// taken for the inline form.
		{"empty policy name", svc, service.Request{ByPolicy: true, Key: "victim", Limit: oneAnHour, Cost: 1}, `invalid policy "": no such policy`},
		{"policy name without ByPolicy", svc, service.Request{Policy: "api", Key: "k", Limit: oneAnHour, Cost: 1}, `names policy "api" without ByPolicy`},
		{"empty key under a policy", svc, service.Request{ByPolicy: true, Policy: "api", Key: ""}, `invalid key "": must not be empty`},
		{"key too long under a policy", svc, service.Request{ByPolicy: true, Policy: "api", Key: strings.Repeat("k", engine.MaxKeyLen)}, "at most 1024 bytes"},
		{"cost above capacity", svc, service.Request{ByPolicy: true, Policy: "api", Key: "k", Cost: 2}, "invalid cost 2"},
		{"bad inline limit", svc, service.Request{Key: "k", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 0, Period: time.Second}, Cost: 1}, "invalid rate 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.svc.Totals().Errors
			_, err := tc.svc.NewBatch().Add(tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Add = %v; want an error saying %q", err, tc.want)
			}
			if got := tc.svc.Totals().Errors - before; got != 1 {
				t.Errorf("%d errors counted; want 1", got)
			}
		})
	}
	var unknown *service.UnknownPolicyError
	if _, err := svc.NewBatch().Add(service.Request{ByPolicy: true, Policy: "nope", Key: "k"}); !errors.As(err, &unknown) || unknown.Name != "nope" {
		t.Errorf("unknown policy error %v; want an *UnknownPolicyError naming it", err)
	}
	if rec.calls != 0 {
		t.Errorf("the store was called %d times for requests that cannot be decided", rec.calls)
	}
}

// Shadow mode answers a refusal as an admission and counts it apart.
func TestShadowMode(t *testing.T) {
	svc, _ := newService(t, testPolicies)
	b := svc.NewBatch()
	for range 3 {
		if _, err := b.Add(service.Request{ByPolicy: true, Policy: "trial", Key: "k", Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	decide(svc, b)
	for i := range 3 {
		d, err := b.Result(i)
		if err != nil || !d.Allowed || d.RetryAfter != 0 {
			t.Errorf("shadow request %d: %+v, %v; want allowed with no retry-after", i, d, err)
		}
		if want := i > 0; b.Shadowed(i) != want {
			t.Errorf("shadow request %d: Shadowed %v, want %v", i, b.Shadowed(i), want)
		}
	}
	tot := svc.Totals()
	if tot.Outcomes[service.Allowed] != 1 || tot.Outcomes[service.Shadow] != 2 || tot.Outcomes[service.Refused] != 0 {
		t.Errorf("counted %v; want 1 allowed and 2 shadow", tot.Outcomes)
	}
}

// Several batches are decided in one store call, each getting its own
// results; counts are by policy.
func TestBatchesJoin(t *testing.T) {
	svc, rec := newService(t, testPolicies)
	a, b, empty := svc.NewBatch(), svc.NewBatch(), svc.NewBatch()
	for _, key := range []string{"x", "x"} {
		if _, err := a.Add(service.Request{ByPolicy: true, Policy: "api", Key: key, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Add(service.Request{ByPolicy: true, Policy: "api", Key: "y", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	decide(svc, a, empty, b)
	if rec.calls != 1 {
		t.Errorf("%d store calls for three batches; want 1", rec.calls)
	}
	allowed := func(b *service.Batch, i int) bool {
		d, err := b.Result(i)
		return err == nil && d.Allowed
	}
	if !allowed(a, 0) || allowed(a, 1) || !allowed(b, 0) {
		t.Errorf("results: a = %t %t, b = %t; want true false true", allowed(a, 0), allowed(a, 1), allowed(b, 0))
	}
	var got []string
	svc.EachDecision(func(policy string, alg engine.Algorithm, o service.Outcome, p engine.Path, n uint64) {
		got = append(got, policy+" "+alg.String()+" "+o.String()+" "+p.String()+" "+string(rune('0'+n)))
	})
	if strings.Join(got, ",") != "api gcra allowed store 2,api gcra refused store 1" {
		t.Errorf("counters %q", got)
	}
}

// A whole batch's failure is every request's error, counted as the
// store's.
func TestBatchError(t *testing.T) {
	svc, rec := newService(t, testPolicies)
	rec.err = errors.New("upstream: i/o timeout")
	b := svc.NewBatch()
	for range 2 {
		if _, err := b.Add(service.Request{ByPolicy: true, Policy: "api", Key: "k", Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	decide(svc, b)
	for i := range 2 {
		if _, err := b.Result(i); err == nil || !strings.Contains(err.Error(), "i/o timeout") {
			t.Errorf("request %d: %v; want the batch's error", i, err)
		}
	}
	var store uint64
	svc.EachError(func(k service.ErrorKind, n uint64) {
		if k == service.ErrStore {
			store = n
		}
	})
	if store != 2 {
		t.Errorf("%d store errors counted; want 2", store)
	}
	b.Clear()
	if b.Len() != 0 {
		t.Errorf("Clear left %d requests", b.Len())
	}
}

// Reset checks every key before resetting any.
func TestReset(t *testing.T) {
	svc, _ := newService(t, testPolicies)
	b := svc.NewBatch()
	add := func() {
		if _, err := b.Add(service.Request{Key: "k", Limit: oneAnHour, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	add()
	decide(svc, b)
	if err := svc.Reset(context.Background(), []string{"k", ""}); err == nil || !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("Reset with an empty key: %v; want an invalid-argument error", err)
	}
	b.Clear()
	add()
	decide(svc, b)
	if d, _ := b.Result(0); d.Allowed {
		t.Fatal("a refused Reset reset the valid key before it")
	}
	if err := svc.Reset(context.Background(), []string{"k"}); err != nil {
		t.Fatal(err)
	}
	b.Clear()
	add()
	decide(svc, b)
	if d, _ := b.Result(0); !d.Allowed {
		t.Error("after Reset the key is still refused")
	}
}

// later is a store that answers on a goroutine of its own once released,
// as Redis's round trips complete.
type later struct {
	engine.Store
	release chan struct{}
}

func (l later) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	go func() {
		<-l.release
		l.Store.Submit(reqs, res, deadline, done)
	}()
}

// DecideWait returns only once the store has answered, with the results
// in place, and a batch waits again and again on what it keeps. In a
// synctest bubble "not returned" is exact: synctest.Wait returns once
// every goroutine is blocked, so one that would return has.
func TestDecideWaitWaitsForTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		l := later{Store: mem, release: make(chan struct{})}
		defer close(l.release) // a failed round's store goroutine ends too
		svc, err := service.New(service.Config{Store: l})
		if err != nil {
			t.Fatal(err)
		}
		b := svc.NewBatch()
		one := engine.Limit{Algorithm: engine.FixedWindow, Rate: 1, Period: time.Hour}
		for round, allowed := range []bool{true, false} {
			if _, err := b.Add(service.Request{Key: "k", Limit: one, Cost: 1}); err != nil {
				t.Fatal(err)
			}
			returned := make(chan struct{})
			go func() {
				svc.DecideWait(b)
				close(returned)
			}()
			synctest.Wait()
			select {
			case <-returned:
				t.Fatalf("round %d: DecideWait returned before the store answered", round)
			default:
			}
			l.release <- struct{}{}
			<-returned
			if d, err := b.Result(0); err != nil || d.Allowed != allowed {
				t.Errorf("round %d: %+v, %v; want allowed %v", round, d, err, allowed)
			}
			b.Clear()
		}
	})
}

// BenchmarkDecideWait is the blocking doors' wait: nothing allocated once
// the batch is warm.
func BenchmarkDecideWait(b *testing.B) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: mem})
	if err != nil {
		b.Fatal(err)
	}
	batch := svc.NewBatch()
	r := service.Request{Key: "k", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1_000_000, Period: time.Second}, Cost: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := batch.Add(r); err != nil {
			b.Fatal(err)
		}
		svc.DecideWait(batch)
		batch.Clear()
	}
}

// A policy's durability reaches the store with its requests; the inline
// requests take the service's (the --durable flag's).
func TestDurability(t *testing.T) {
	inline := engine.Limit{Algorithm: engine.FixedWindow, Rate: 5, Period: time.Second}
	for _, tc := range []struct {
		name       string
		inline     engine.Durability
		wantPolicy []engine.Durability // api, kept, inline
	}{
		{"inline not durable", engine.DurableNone, []engine.Durability{engine.DurableNone, engine.DurableReplica, engine.DurableNone}},
		{"inline on disk", engine.DurableDisk, []engine.Durability{engine.DurableNone, engine.DurableReplica, engine.DurableDisk}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{Store: mem}
			svc, err := service.New(service.Config{Store: rec, Policies: testPolicies, Durable: tc.inline})
			if err != nil {
				t.Fatal(err)
			}
			b := svc.NewBatch()
			for _, r := range []service.Request{
				{ByPolicy: true, Policy: "api", Key: "u1", Cost: 1},
				{ByPolicy: true, Policy: "kept", Key: "u1", Cost: 1},
				{Key: "u1", Limit: inline, Cost: 1},
			} {
				if _, err := b.Add(r); err != nil {
					t.Fatal(err)
				}
			}
			decide(svc, b)
			for i, want := range tc.wantPolicy {
				if got := rec.seen[i].Durable; got != want {
					t.Errorf("request %d reached the store with durability %v, want %v", i, got, want)
				}
			}
		})
	}
}
