package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/service"
)

// A concurrency policy is refused by a decision, which is what a door
// without a release (a gateway check) relies on; a rate policy is refused
// by a lease. Leases by policy go under the policy's prefix and are
// counted per policy.
func TestLeasesByPolicy(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mem, _ := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	ps := policies{
		"api":  {Name: "api", Limit: oneAnHour, Prefix: "api:"},
		"jobs": {Name: "jobs", Prefix: "j/", Concurrency: engine.Concurrency{Limit: 1, TTL: time.Minute}},
	}
	s, err := service.New(service.Config{Store: mem, Policies: ps})
	if err != nil {
		t.Fatal(err)
	}
	var kind *service.PolicyKindError
	if _, err := s.NewBatch().Add(service.Request{ByPolicy: true, Policy: "jobs", Key: "k"}); !errors.As(err, &kind) || !kind.Concurrency {
		t.Errorf("a decision by a concurrency policy: %v", err)
	}
	ctx := context.Background()
	if _, err := s.Acquire(ctx, service.LeaseRequest{ByPolicy: true, Policy: "api", Key: "k"}); !errors.As(err, &kind) || kind.Concurrency {
		t.Errorf("a lease by a rate policy: %v", err)
	}
	d, err := s.Acquire(ctx, service.LeaseRequest{ByPolicy: true, Policy: "jobs", Key: "k"})
	if err != nil || !d.Allowed || len(d.ID) != 16 {
		t.Fatalf("acquire: %+v %v", d, err)
	}
	// Under the prefix: the inline key j/k is the same lease set.
	if d2, _ := s.Acquire(ctx, service.LeaseRequest{Key: "j/k", Limit: 1, TTL: time.Minute, ID: "other"}); d2.Allowed {
		t.Errorf("the inline j/k found a free slot: %+v", d2)
	}
	stats := map[string]service.LeaseStats{}
	s.EachLeasePolicy(func(p string, st service.LeaseStats) { stats[p] = st })
	if st := stats["jobs"]; st.Held != 1 || st.Events[service.LeaseAcquired] != 1 {
		t.Errorf("jobs after one acquire: %+v", st)
	}
	if st := stats[service.Inline]; st.Events[service.LeaseRefused] != 1 {
		t.Errorf("inline after one refusal: %+v", st)
	}
	if held, err := s.Release(ctx, service.LeaseRequest{ByPolicy: true, Policy: "jobs", Key: "k", ID: d.ID}); !held || err != nil {
		t.Errorf("release: %v %v", held, err)
	}
	if held, _ := s.Release(ctx, service.LeaseRequest{ByPolicy: true, Policy: "jobs", Key: "k", ID: d.ID}); held {
		t.Error("released twice")
	}
	if t2 := s.LeaseTotals(); t2.Held != 0 || t2.Events[service.LeaseReleased] != 1 {
		t.Errorf("after the release: %+v", t2)
	}
	if _, err := s.Release(ctx, service.LeaseRequest{ByPolicy: true, Policy: "nosuch", Key: "k", ID: "x"}); err == nil {
		t.Error("release by an unknown policy: no error")
	}
}

// An empty policy name is an unknown policy for every kind of request, the
// same error each time, and never reaches the inline key of that name.
func TestEmptyPolicyName(t *testing.T) {
	mem, _ := memstore.New(memstore.Config{})
	ps := policies{"jobs": {Name: "jobs", Prefix: "j/", Concurrency: engine.Concurrency{Limit: 1, TTL: time.Minute}}}
	s, err := service.New(service.Config{Store: mem, Policies: ps})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The inline key victim spends its one slot of each kind.
	inline := service.LeaseRequest{Key: "victim", Limit: 1, TTL: time.Minute, ID: "held"}
	if d, err := s.Acquire(ctx, inline); err != nil || !d.Allowed {
		t.Fatalf("inline acquire: %+v %v", d, err)
	}
	spend := func() *engine.Decision {
		t.Helper()
		b := s.NewBatch()
		i, err := b.Add(service.Request{Key: "victim", Limit: oneAnHour, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		s.DecideWait(b)
		d, err := b.Result(i)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := spend(); !d.Allowed {
		t.Fatalf("the inline victim's first decision refused: %+v", d)
	}
	byEmpty := map[string]func() error{
		"decide": func() error {
			_, err := s.NewBatch().Add(service.Request{ByPolicy: true, Key: "victim", Limit: oneAnHour, Cost: 1})
			return err
		},
		"acquire": func() error {
			_, err := s.Acquire(ctx, service.LeaseRequest{ByPolicy: true, Key: "victim", Limit: 2, TTL: time.Minute})
			return err
		},
		"release": func() error {
			_, err := s.Release(ctx, service.LeaseRequest{ByPolicy: true, Key: "victim", ID: "held"})
			return err
		},
		"reset": func() error { return s.ResetPolicy(ctx, "", []string{"victim"}) },
	}
	for name, call := range byEmpty {
		var unknown *service.UnknownPolicyError
		if err := call(); !errors.As(err, &unknown) || unknown.Name != "" || err.Error() != `invalid policy "": no such policy` {
			t.Errorf("%s by the empty policy name: %v; want an *UnknownPolicyError saying so", name, err)
		}
	}
	if d := spend(); d.Allowed {
		t.Errorf("the inline victim was reset through the empty policy name: %+v", d)
	}
	if d, _ := s.Acquire(ctx, service.LeaseRequest{Key: "victim", Limit: 1, TTL: time.Minute, ID: "other"}); d.Allowed {
		t.Errorf("the inline victim's lease was released through the empty policy name: %+v", d)
	}
}
