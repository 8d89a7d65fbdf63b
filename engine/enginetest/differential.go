package enginetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Scenario is a random limit and a sequence of operations on a few keys,
// decoded from fuzz input so that `go test -fuzz` can explore it.
type Scenario struct {
	Limit engine.Limit
	// Limits, in a third of the scenarios, are a multi-limit policy's:
	// Limit, named "a", and one or two more. Ops with Multi use them.
	Limits []engine.NamedLimit
	Ops    []Op
}

// Op is one operation of a Scenario.
type Op struct {
	Advance time.Duration // may be negative: the clock stepping back
	Key     int           // which of the scenario's keys
	Cost    int64         // may exceed the capacity or be negative: bad input
	Peek    bool
	Charge  bool // a cost known after the work, taken even over the limit
	// Grant takes the cost for a holder to spend later; Refund gives it
	// back to the key's last admitted grant (Differential keeps its
	// anchor), or, before any, to a made-up one.
	Grant, Refund bool
	Reset         bool
	Multi         bool // decided by the scenario's Limits, not its Limit
	// Batch joins the operation to the batch of the one before it: a
	// request at the same instant (Advance is 0), decided in one Submit
	// with it. Runs of them on one key are the hot runs a tenant-wide
	// limit makes.
	Batch bool
}

// NewScenario derives a scenario from seed bytes. Parameters stay small
// enough that interesting things (refusals, refills, window edges) happen
// within a few operations, and include invalid ones now and then.
func NewScenario(seed []byte) Scenario {
	var s [32]byte
	copy(s[:], seed)
	extra := uint64(len(seed))
	for i, b := range seed {
		extra = extra*131 + uint64(b) + uint64(i)
	}
	rng := rand.New(rand.NewChaCha8(s))
	rng = rand.New(rand.NewPCG(rng.Uint64(), extra))

	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond,
		time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	l := engine.Limit{
		Algorithm: engine.Algorithms[rng.IntN(len(engine.Algorithms))],
		Rate:      1 + rng.Int64N(12),
		Period:    periods[rng.IntN(len(periods))],
	}
	if rng.IntN(8) == 0 {
		l.Period += time.Duration(rng.Int64N(int64(time.Second)))
	}
	switch l.Algorithm {
	case engine.TokenBucket, engine.LeakyBucket:
		l.Burst = 1 + rng.Int64N(10)
	case engine.GCRA:
		l.Burst = rng.Int64N(10)
	}
	if rng.IntN(6) == 0 {
		// Large numbers: rates whose interval is a fraction of a µs or
		// close to one, long periods, capacities and costs in the millions,
		// so that products pass 2^53 and the scripts' exact paths run.
		large := []struct {
			rate   int64
			period time.Duration
		}{{700_000, time.Second}, {600, time.Millisecond}, {999_983, time.Hour}, {7, time.Second},
			{1_000_000, time.Second}, {86_399_999, 24 * time.Hour}, {123_457, time.Minute}}
		x := large[rng.IntN(len(large))]
		l.Rate, l.Period = x.rate, x.period
		switch l.Algorithm {
		case engine.TokenBucket, engine.LeakyBucket, engine.GCRA:
			l.Burst = 1 + rng.Int64N(100*x.rate)
		case engine.SlidingLog:
			l.Rate = min(l.Rate, engine.MaxLogRate)
		}
	}
	if l.Algorithm == engine.SlidingWindow && rng.IntN(2) == 0 {
		for _, n := range rng.Perm(100) {
			if us := int64(l.Period / time.Microsecond); n > 1 && us%int64(n) == 0 {
				l.Precision = int64(n)
				break
			}
		}
	}
	if rng.IntN(40) == 0 {
		l.Rate = 0 // invalid now and then
	}
	sc := Scenario{Limit: l}
	n := 5 + rng.IntN(60)
	for range n {
		op := Op{Key: rng.IntN(3), Cost: rng.Int64N(l.Capacity() + 2), Peek: rng.IntN(5) == 0}
		switch rng.IntN(6) {
		case 0: // same instant
		case 1: // a little
			op.Advance = time.Duration(rng.Int64N(int64(l.Period)/max(l.Rate, 1)+1)) / time.Microsecond * time.Microsecond
		case 2: // up to two periods
			op.Advance = time.Duration(rng.Int64N(2*int64(l.Period))) / time.Microsecond * time.Microsecond
		case 3: // one microsecond
			op.Advance = time.Microsecond
		case 4: // up to a window edge exactly
			op.Advance = -1
		default:
			op.Advance = time.Duration(rng.Int64N(1000)) * time.Microsecond
		}
		if rng.IntN(50) == 0 {
			op.Advance = -time.Duration(rng.Int64N(int64(time.Second)))
			op.Advance = op.Advance / time.Microsecond * time.Microsecond
		}
		op.Reset = rng.IntN(40) == 0
		if rng.IntN(30) == 0 {
			op.Cost = -1
		}
		sc.Ops = append(sc.Ops, op)
	}
	// Hot runs, from a stream of their own so that the operations above
	// stay what each seed made before: now and then a burst of requests
	// at one instant, mostly on one key, with mixed costs and peeks, sent
	// as one batch; and now and then a request at the same instant joins
	// the batch before it.
	hot := rand.New(rand.NewPCG(rng.Uint64(), extra+1))
	ops := make([]Op, 0, len(sc.Ops))
	for _, op := range sc.Ops {
		if op.Advance == 0 && !op.Reset && len(ops) > 0 && !ops[len(ops)-1].Reset && hot.IntN(3) == 0 {
			op.Batch = true
		}
		ops = append(ops, op)
		if op.Reset || hot.IntN(6) != 0 {
			continue
		}
		for range 2 + hot.IntN(30) {
			b := Op{Key: op.Key, Cost: 1, Peek: hot.IntN(5) == 0, Batch: true}
			if hot.IntN(4) == 0 {
				b.Key = hot.IntN(3)
			}
			if hot.IntN(3) == 0 {
				b.Cost = hot.Int64N(l.Capacity() + 2)
			}
			if hot.IntN(30) == 0 {
				b.Cost = -1
			}
			ops = append(ops, b)
		}
	}
	sc.Ops = ops
	multiLimits(&sc, rand.New(rand.NewPCG(rng.Uint64(), extra+2)), periods)
	charges(&sc, rand.New(rand.NewPCG(rng.Uint64(), extra+3)))
	peerWindows(&sc, rand.New(rand.NewPCG(rng.Uint64(), extra+4)))
	grants(&sc, rand.New(rand.NewPCG(rng.Uint64(), extra+5)))
	return sc
}

// grants makes about a sixth of the operations grants and a sixth
// refunds, from a stream of their own so that every seed's other
// operations stay what they were: a key moves between hot (grants and
// refunds) and cold (plain takes) and back, on every algorithm (those
// that take no grant must refuse it alike), now and then with a peek or
// a charge, which both stores must refuse alike.
func grants(sc *Scenario, rng *rand.Rand) {
	for i := range sc.Ops {
		op := &sc.Ops[i]
		if op.Reset || op.Charge && rng.IntN(10) != 0 {
			continue
		}
		switch rng.IntN(6) {
		case 0:
			op.Grant = true
		case 1:
			op.Refund = true
		default:
			continue
		}
		op.Peek = op.Peek && rng.IntN(4) == 0
	}
}

// peerWindows makes an eighth of the single-limit scenarios the peer's
// window (engine/peer.go), from a stream of its own so that the other
// scenarios stay what each seed made before: the same rate and
// operations, a period of whole seconds, now and then a jitter.
func peerWindows(sc *Scenario, rng *rand.Rand) {
	if sc.Limits != nil || rng.IntN(8) != 0 {
		return
	}
	l := engine.Limit{Algorithm: engine.PeerWindow, Rate: sc.Limit.Rate,
		Period: max(sc.Limit.Period/time.Second, 1) * time.Second}
	if rng.IntN(2) == 0 {
		l.Jitter = time.Duration(rng.IntN(300)) * time.Second
	}
	sc.Limit = l
}

// charges makes a sixth of the operations charges, from a stream of its
// own so that every seed's other operations stay what they were: costs
// up to three capacities, so that debts reach their bound, and now and
// then on a multi-limit operation or with a peek, which both stores must
// refuse alike.
func charges(sc *Scenario, rng *rand.Rand) {
	c := sc.Limit.Capacity()
	for i := range sc.Ops {
		op := &sc.Ops[i]
		if op.Reset || rng.IntN(6) != 0 || op.Multi && rng.IntN(10) != 0 {
			continue
		}
		op.Charge, op.Peek = true, rng.IntN(20) == 0
		if op.Cost >= 0 {
			op.Cost = rng.Int64N(3*max(c, 1) + 2)
		}
	}
}

// multiLimits makes a third of the scenarios multi-limit, from a stream
// of its own so that every seed's single-limit operations stay what they
// were: the scenario's limit named "a" and one or two more limits of any
// algorithm, and most operations (mixed with single-limit ones on the
// same keys) decided by all of them, at costs up to the least capacity.
func multiLimits(sc *Scenario, rng *rand.Rand, periods []time.Duration) {
	if rng.IntN(3) != 0 {
		return
	}
	sc.Limits = []engine.NamedLimit{{Name: "a", Limit: sc.Limit}}
	for k := range 1 + rng.IntN(2) {
		l := engine.Limit{
			Algorithm: engine.Algorithms[rng.IntN(len(engine.Algorithms))],
			Rate:      1 + rng.Int64N(20),
			Period:    periods[rng.IntN(len(periods))],
		}
		switch l.Algorithm {
		case engine.TokenBucket, engine.LeakyBucket:
			l.Burst = 1 + rng.Int64N(10)
		case engine.GCRA:
			l.Burst = rng.Int64N(10)
		}
		sc.Limits = append(sc.Limits, engine.NamedLimit{Name: string(rune('b' + k)), Limit: l})
	}
	c := (&engine.Request{Limits: sc.Limits}).Capacity()
	for i := range sc.Ops {
		op := &sc.Ops[i]
		if op.Reset || rng.IntN(4) == 0 {
			continue
		}
		op.Multi = true
		if op.Cost >= 0 {
			op.Cost = rng.Int64N(c + 2)
		}
	}
}

// request is op's request on key.
func (sc *Scenario) request(op Op, key string) engine.Request {
	r := engine.Request{Key: key, Limit: sc.Limit, Cost: op.Cost, Peek: op.Peek, Charge: op.Charge, Grant: op.Grant, Refund: op.Refund}
	if op.Multi {
		r.Limit, r.Limits, r.Detail = engine.Limit{}, sc.Limits, make([]engine.Decision, len(sc.Limits))
	}
	return r
}

// Differential runs seed's scenario against two stores sharing clock and
// fails at the first decision where they differ: a decides each request
// in a Submit of its own, b each batch of the scenario (see Op.Batch) in
// one, so that b's hot runs are held to a's one-by-one decisions. Keys
// are made unique with prefix, so one backing server may serve many
// scenarios.
func Differential(tb testing.TB, a, b engine.Store, clock *Clock, prefix string, seed []byte) {
	tb.Helper()
	runScenario(tb, a, b, clock, prefix, NewScenario(seed))
}

// HotCold runs, as Differential does, a scripted scenario per algorithm
// that offers grants, and one of a multi-limit policy: one key cold
// (plain takes), then hot (a grant, takes beside it, refunds within the
// grant's window and after it, a grant refused, a grant given back at
// once), then cold again, at times that fall inside and across windows
// and refills. Keys are made unique with prefix.
func HotCold(tb testing.TB, a, b engine.Store, clock *Clock, prefix string) {
	tb.Helper()
	limits := []engine.Limit{
		{Algorithm: engine.FixedWindow, Rate: 10, Period: time.Second},
		{Algorithm: engine.SlidingWindow, Rate: 10, Period: time.Second, Precision: 5},
		{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 10},
		{Algorithm: engine.GCRA, Rate: 7, Period: time.Second, Burst: 6}, // 142,857 1/7 µs a unit
	}
	ops := func(multi bool) []Op {
		var ops []Op
		add := func(op Op) {
			op.Multi = multi
			ops = append(ops, op)
		}
		for range 5 { // cold
			add(Op{Advance: 37 * time.Millisecond, Cost: 1})
		}
		add(Op{Advance: 3 * time.Millisecond, Cost: 4, Grant: true})
		for range 3 { // another sidecar's takes beside the grant
			add(Op{Cost: 1, Batch: true})
		}
		add(Op{Advance: 50 * time.Millisecond, Cost: 2, Refund: true})
		add(Op{Advance: 90 * time.Millisecond, Cost: 3, Grant: true})
		add(Op{Cost: 9, Grant: true}) // does not fit
		add(Op{Advance: 160 * time.Millisecond, Cost: 3, Refund: true})
		add(Op{Advance: -1, Cost: 1}) // to the window's edge
		add(Op{Cost: 3, Refund: true})
		add(Op{Advance: 11 * time.Millisecond, Cost: 5, Grant: true})
		add(Op{Cost: 5, Refund: true, Batch: true})
		for range 10 { // cold again
			add(Op{Advance: 13 * time.Millisecond, Cost: 1})
		}
		add(Op{Advance: 400 * time.Millisecond, Cost: 2, Grant: true})
		add(Op{Advance: time.Second, Cost: 2, Refund: true}) // long after
		add(Op{Cost: 1})
		return ops
	}
	for _, l := range limits {
		runScenario(tb, a, b, clock, prefix+":"+l.Algorithm.Short(), Scenario{Limit: l, Ops: ops(false)})
	}
	policy := []engine.NamedLimit{{Name: "a", Limit: limits[0]}, {Name: "b", Limit: limits[3]}}
	runScenario(tb, a, b, clock, prefix+":multi", Scenario{Limit: limits[0], Limits: policy, Ops: ops(true)})
}

func runScenario(tb testing.TB, a, b engine.Store, clock *Clock, prefix string, sc Scenario) {
	tb.Helper()
	ctx := context.Background()
	keys := []string{prefix + ":0", prefix + ":1", prefix + ":2"}
	// The anchors of each key's last admitted grant, single-limit and
	// multi-limit (one per limit), which its refunds give back to.
	var anchors [3]int64
	var multiAnchors [3][]int64
	request := func(op Op) engine.Request {
		r := sc.request(op, keys[op.Key])
		if !op.Refund {
			return r
		}
		made := clock.Now().UnixMicro() // no grant yet: one that names none
		if r.Anchor = anchors[op.Key]; r.Anchor == 0 {
			r.Anchor = made
		}
		for j := range r.Detail {
			r.Detail[j].Anchor = made
			if j < len(multiAnchors[op.Key]) {
				r.Detail[j].Anchor = multiAnchors[op.Key][j]
			}
		}
		return r
	}
	for i := 0; i < len(sc.Ops); i++ {
		op := sc.Ops[i]
		adv := op.Advance
		if adv == -1 && sc.Limit.Period > 0 { // to the next window edge
			p := sc.Limit.Period
			adv = p - time.Duration(clock.Now().UnixNano())%p
		}
		clock.Advance(adv)
		if op.Reset {
			ea, eb := a.Reset(ctx, keys[op.Key], sc.Limits...), b.Reset(ctx, keys[op.Key], sc.Limits...)
			if ea != nil || eb != nil {
				tb.Fatalf("op %d: Reset: %v / %v", i, ea, eb)
			}
			continue
		}
		batch := []engine.Request{request(op)}
		ops := []Op{op}
		for i+1 < len(sc.Ops) && sc.Ops[i+1].Batch {
			i++
			o := sc.Ops[i]
			batch, ops = append(batch, request(o)), append(ops, o)
		}
		// a's copies, made before b decides into the batch's Detail: a
		// refund's anchors are there.
		ones := make([]engine.Request, len(batch))
		for k := range batch {
			ones[k] = batch[k]
			ones[k].Detail = slices.Clone(batch[k].Detail)
		}
		rb := make([]engine.Result, len(batch))
		if err := engine.Wait(b, batch, rb, time.Time{}); err != nil {
			tb.Fatalf("op %d: second store: %v", i, err)
		}
		for k := range batch {
			ra := make([]engine.Result, 1)
			one := ones[k]
			if err := engine.Wait(a, []engine.Request{one}, ra, time.Time{}); err != nil {
				tb.Fatalf("op %d: first store: %v", i, err)
			}
			msg := diff(ra[0], rb[k])
			for j := range one.Detail {
				if msg == "" && ra[0].Err == nil && one.Detail[j] != batch[k].Detail[j] {
					msg = "limit " + sc.Limits[j].Name + "'s decisions differ:\n  " + Format(one.Detail[j]) + "\n  " + Format(batch[k].Detail[j])
				}
			}
			if msg != "" {
				tb.Fatalf("op %d (request %d of a batch of %d) of scenario %+v %+v\n(%+v at %s): %s",
					i, k, len(batch), sc.Limit, sc.Limits, batch[k], clock.Now().Format(time.RFC3339Nano), msg)
			}
			if o := ops[k]; o.Grant && rb[k].Err == nil && rb[k].Decision.Allowed {
				if batch[k].Detail == nil {
					anchors[o.Key] = rb[k].Decision.Anchor
					continue
				}
				multiAnchors[o.Key] = multiAnchors[o.Key][:0]
				for _, d := range batch[k].Detail {
					multiAnchors[o.Key] = append(multiAnchors[o.Key], d.Anchor)
				}
			}
		}
	}
}

func diff(a, b engine.Result) string {
	if (a.Err == nil) != (b.Err == nil) {
		return fmt.Sprintf("errors differ: %v / %v", a.Err, b.Err)
	}
	if a.Err != nil {
		var pa, pb *engine.ParamError
		if errors.As(a.Err, &pa) && errors.As(b.Err, &pb) && pa.Param == pb.Param {
			return ""
		}
		if a.Err.Error() == b.Err.Error() {
			return ""
		}
		return fmt.Sprintf("errors differ: %v / %v", a.Err, b.Err)
	}
	if a.Decision != b.Decision {
		return "decisions differ:\n  " + Format(a.Decision) + "\n  " + Format(b.Decision)
	}
	return ""
}
