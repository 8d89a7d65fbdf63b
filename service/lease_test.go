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
	if _, err := s.NewBatch().Add(service.Request{Policy: "jobs", Key: "k"}); !errors.As(err, &kind) || !kind.Concurrency {
		t.Errorf("a decision by a concurrency policy: %v", err)
	}
	ctx := context.Background()
	if _, err := s.Acquire(ctx, service.LeaseRequest{Policy: "api", Key: "k"}); !errors.As(err, &kind) || kind.Concurrency {
		t.Errorf("a lease by a rate policy: %v", err)
	}
	d, err := s.Acquire(ctx, service.LeaseRequest{Policy: "jobs", Key: "k"})
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
	if held, err := s.Release(ctx, "jobs", "k", d.ID); !held || err != nil {
		t.Errorf("release: %v %v", held, err)
	}
	if held, _ := s.Release(ctx, "jobs", "k", d.ID); held {
		t.Error("released twice")
	}
	if t2 := s.LeaseTotals(); t2.Held != 0 || t2.Events[service.LeaseReleased] != 1 {
		t.Errorf("after the release: %+v", t2)
	}
	if _, err := s.Release(ctx, "nosuch", "k", "x"); err == nil {
		t.Error("release by an unknown policy: no error")
	}
}
