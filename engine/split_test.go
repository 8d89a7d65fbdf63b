package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
	"github.com/sluice-rl/sluice/engine/memstore"
)

// SubmitSplit over three memory stores decides as one store does.
func TestSubmitSplitConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, now func() time.Time) engine.Store {
		var shards [3]engine.Store
		for i := range shards {
			s, err := memstore.New(memstore.Config{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			shards[i] = s
		}
		return splitStore(func(r *engine.Request) (engine.Store, error) {
			return shards[len(r.Key)%3], nil
		})
	})
}

// splitStore is a Store that submits through SubmitSplit.
type splitStore engine.Shards

func (s splitStore) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	engine.SubmitSplit(engine.Shards(s), reqs, res, deadline, done)
}

func (s splitStore) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	st, err := s(&engine.Request{Key: key})
	if err != nil {
		return err
	}
	return st.Reset(ctx, key, limits...)
}

// failing is a store whose every batch fails.
type failing struct{ err error }

func (f failing) Submit(_ []engine.Request, _ []engine.Result, _ time.Time, done func(error)) {
	done(f.err)
}
func (f failing) Reset(context.Context, string, ...engine.NamedLimit) error { return f.err }

// One part's failure is the batch's; a routing error fails the batch
// before any part is sent.
func TestSubmitSplitErrors(t *testing.T) {
	ok, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	down := failing{errors.New("master down")}
	lim := engine.Limit{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Hour}
	reqs := []engine.Request{{Key: "up", Limit: lim, Cost: 1}, {Key: "down", Limit: lim, Cost: 1}, {Key: "up", Limit: lim, Cost: 1}}
	res := make([]engine.Result, len(reqs))
	route := splitStore(func(r *engine.Request) (engine.Store, error) {
		if r.Key == "down" {
			return down, nil
		}
		return ok, nil
	})
	if err := engine.Wait(route, reqs, res, time.Time{}); !errors.Is(err, down.err) {
		t.Fatalf("a batch with a failed part = %v; want its error", err)
	}
	lost := errors.New("no slot map")
	route = splitStore(func(r *engine.Request) (engine.Store, error) {
		if r.Key == "down" {
			return nil, lost
		}
		return ok, nil
	})
	if err := engine.Wait(route, reqs, res, time.Time{}); !errors.Is(err, lost) {
		t.Fatalf("a batch with a routing error = %v; want it", err)
	}
	// The failed batches charged "up" once (the first, its part sent);
	// the routing error sent nothing: 10 - 2 left after one more.
	one := make([]engine.Result, 1)
	if err := engine.Wait(ok, reqs[:1], one, time.Time{}); err != nil || one[0].Decision.Remaining != 7 {
		t.Fatalf("after the failed batches: %v, %+v; want 7 left (2 charged by the first batch's part, none by the routing error)", err, one[0])
	}
}
