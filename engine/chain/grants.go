package chain

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Grants: a hot key decided in this sidecar, exactly.
//
// A key this sidecar decides often is hot (hotCount requests within
// hotInterval), found by a table that keeps nothing per cold key
// (hotness.go); a hot key gets an entry, which counts it exactly. A hot
// key's request that no grant covers goes down as
// usual and, in the same Submit, a Grant request for k units goes with it
// (engine.Request.Grant): the store takes the k units from the key's
// budget, as a take of cost k, and hands them to this sidecar. Until the
// grant is spent, ends or is revoked, requests of the key whose cost fits
// what the grant may still spend (engine.Limit.Spendable) are admitted
// here, with no round trip (engine.PathGrant). Nothing is ever refused
// here: a request that does not fit goes down, where other units may be.
//
// Exact: the granted units were taken from the key's budget at the store,
// so every other sidecar sees them as spent; this one spends them only
// while the store's own rules would still count them as taken (the
// window they were taken in; for the buckets, until they would have
// refilled, which is why a bucket's held units lapse one by one). So the
// fleet never admits more than the limit. The price is the other way:
// while units sit in one sidecar's grant, another may be refused although
// the fleet has not spent them. Those units are bounded, per limit, by
// the sum over sidecars of their grants outstanding, each at most
// maxGrantShare of the capacity (wantUnits).
//
// Giving back: the windows (fixed, sliding counter) take back what a
// grant did not spend while its (sub-)window is still current
// (engine.Request.Refund), so a grant that is replaced, ends early (its
// key went cold here, or grantLife passed) or is dropped sends its unspent
// units back in the next Submit that goes down, or within flushEvery by a
// flush of its own. The buckets (token bucket, GCRA) give nothing back:
// their held units lapse as the bucket refills (engine.Decision.Hold),
// and a refund would move the bucket's time back under another sidecar's
// grant, which could then spend units the bucket also admits again.
//
// Revocation: a reset (Reset, or one announced by another sidecar:
// Forget) drops this sidecar's grants of the key without giving anything
// back (the state they were taken from is gone); a policy reload drops
// them all (DropAll). What a killed sidecar held comes back by itself:
// at the window's end, or as the bucket refills.
//
// Peeks, charges, durable requests, the sliding log and the leaky bucket
// always go down: a peek changes nothing to spend from, a charge is taken
// even when it does not fit, a durable decision waits for a replica, and
// the log and the leaky bucket keep a time per request that units spent
// later would falsify (engine.Request.Grant).

// Hot detection and grant sizing.
const (
	// hotInterval and hotCount: a key this sidecar saw hotCount times
	// within hotInterval is hot. Fewer requests than that gain little
	// from a grant (one round trip saved per few requests, paid for by
	// units held away from the fleet), and 50ms is long beside a round
	// trip (well under a millisecond), short beside any limit's period.
	hotInterval = 50 * time.Millisecond
	hotCount    = 4
	// holdTarget is how long a grant should last at the sidecar's own
	// recent rate of the key: k = rate × holdTarget. Long enough that a
	// hot key costs Redis a call every few hundred milliseconds instead
	// of one per batch; short enough that units held when the load moves
	// elsewhere come back soon.
	holdTarget = 200 * time.Millisecond
	// maxGrantShare bounds k to this fraction of the capacity (the
	// least capacity of a multi-limit policy's limits): the units one
	// sidecar may hold, and so the refusals other sidecars may meet
	// while it holds them. A capacity below 1/maxGrantShare gets no
	// grants at all.
	maxGrantShare = 4
	// grantLife ends a window's grant this long after it was taken,
	// whatever its window says, so that units left in a grant that its
	// sidecar stopped spending go back to the fleet: 2.5 holdTargets,
	// so that a steady load spends its grant before.
	grantLife = 500 * time.Millisecond
	// flushEvery is how often the flush runs: it ends the grants whose
	// key went cold or whose life passed, sends what they give back, and
	// forgets keys no longer seen. It bounds how long given-back units
	// wait for a Submit to carry them.
	flushEvery = 100 * time.Millisecond
	// grantShards spreads the keys over independently locked shards.
	grantShards = 32
	// GrantsReturnWithin bounds how long after a window's grant was taken
	// its unspent units may come back to the window: its life, then the
	// flush that gives them back, and its round trip. The deny cache
	// remembers a window's refusal no longer than this with grants on
	// (DenyCacheConfig.WindowHold), so that units given back are found.
	GrantsReturnWithin = grantLife + 2*flushEvery
)

// GrantsConfig configures Grants. Zero values mean the documented
// defaults.
type GrantsConfig struct {
	// Store decides what no grant covers, and the grants themselves: the
	// guard in front of Redis.
	Store engine.Store
	// MaxKeys bounds the hot keys this sidecar keeps an entry for (the
	// keys it counts exactly, and may hold a grant of); past it, a key
	// that turns hot goes down as a cold one until the flush forgets
	// entries of keys gone cold. Cold keys take none: they are counted
	// in a table of fixed size (hotness.go). Zero means 10,000 (about
	// 350 bytes each, with its key).
	MaxKeys int
	// Now is the clock; nil means time.Now. Only durations are taken from
	// it: a grant's time is measured from when it was asked for, which is
	// no later than when the store decided it.
	Now func() time.Time
	// Away, if set, charges a request's cost to this sidecar's local share
	// of its limits (Guard.ChargeLocal): the units a key's grants admitted
	// since the store last answered for it, once the guard refuses the
	// key's grant request because the store is away. A sidecar that loses
	// the store spends its grants first, then decides by its share; so
	// that the two together stay within the share, the share counts what
	// the grants admitted during the outage (before the outage was
	// noticed, too: a stalled store is noticed only at the deadline).
	Away func(engine.Request)
	// Failing, if set, reports whether the store behind is failing
	// (Guard.Failing). With Away: once it starts failing, what every
	// key's grants admitted since the store last answered for the key is
	// charged to the share at once, and while it fails, what they admit
	// is charged as they admit it, so that a key whose load falls below
	// hot during the outage (and so asks for no grant that could fail)
	// is charged all the same.
	Failing func() bool
	// Sidecars, if set, is how many sidecars the fleet's limits are
	// divided among while the store is away (Guard's share): a grant is
	// never more than this sidecar's share of the capacity, so that the
	// grants it holds when the store goes away, which Away charges to
	// that share, fit in it. Nil: 1, the whole limit.
	Sidecars func() int64
}

// Grants is a Store that decides hot keys from units granted by the store
// behind it (see above). Safe for concurrent use.
type Grants struct {
	next    engine.Store
	now     func() time.Time
	perSlot int // MaxKeys per shard
	// sidecars is GrantsConfig.Sidecars, or 1.
	sidecars func() int64
	// failing is GrantsConfig.Failing, or never; wasFailing says the
	// layer has seen it fail and charged what the grants held.
	failing    func() bool
	wasFailing atomic.Bool
	seed       maphash.Seed
	hot        *hotTable // counts every key until it turns hot
	shards     [grantShards]grantShard
	flights    sync.Pool // *grantFlight

	away func(engine.Request) // GrantsConfig.Away; nil: none

	refundMu sync.Mutex
	refunds  []engine.Request // what ended grants give back; guarded by refundMu
	pending  atomic.Int64     // len(refunds), read without the lock on every Submit

	decided  atomic.Uint64 // decisions made from grants
	taken    atomic.Uint64 // grants taken
	given    atomic.Uint64 // units sent back
	asked    atomic.Uint64 // grant requests sent
	refusedG atomic.Uint64 // grant requests the store refused
	revoked  atomic.Uint64 // grants dropped by a reset or a reload
	charged  atomic.Uint64 // units charged to the local share (GrantsConfig.Away)
}

var _ engine.Store = (*Grants)(nil)

type grantShard struct {
	mu   sync.Mutex
	keys map[grantKey]*grantEntry // guarded by mu
}

// grantKey is where a key's count and grant are kept: a key under one
// algorithm, or under alg 0 a multi-limit request's key, whose limits
// then must match too (as the deny cache's stateKey).
type grantKey struct {
	alg engine.Algorithm
	key string
}

// grantEntry is what this sidecar knows of a key: its recent requests
// and the grant it holds. Guarded by its shard's mu.
type grantEntry struct {
	shard  *grantShard
	key    grantKey // its own copy of the key
	slot   uint64   // its hotHash: the table's slot pinned to it while it is in shard.keys
	gone   bool     // no longer in shard.keys: a Submit's last entry is looked up again
	limit  engine.Limit
	limits []engine.NamedLimit // a multi-limit request's: the policy's, shared

	// Requests and units in hotInterval number tick, and in the one
	// before it.
	tick                int64
	cur, prev           int64
	curUnits, prevUnits int64

	asking   bool      // a grant request is in flight
	askAfter time.Time // no grant is asked for before (a refused one's retry-after)
	askMost  int64     // a refused grant's remaining: the most worth asking next; 0: no bound

	// unanswered: the units admitted from grants since the store last
	// answered one of the key's grant requests, and the failure mode of
	// the last request admitted, for GrantsConfig.Away.
	unanswered int64
	onFailure  engine.FailureMode

	// The grant held, if held.
	held   bool
	at     time.Time     // when it was asked for: no later than the store's decision
	left   int64         // units not spent
	hold   time.Duration // engine.Decision.Hold (the binding limit's, multi)
	anchor int64         // engine.Decision.Anchor, for a refund
	reset  time.Duration // the grant's decision's ResetAfter
	parts  []engine.Decision
	// parts: a multi-limit grant's decision per limit (Hold, ResetAfter),
	// the entry's own copy.
}

// NewGrants returns the grant layer in front of cfg.Store. It holds no
// grant until a key is hot.
func NewGrants(cfg GrantsConfig) (*Grants, error) {
	if cfg.Store == nil {
		return nil, errors.New("chain: grants need a store")
	}
	if cfg.MaxKeys < 0 {
		return nil, errors.New("chain: grants' MaxKeys must not be negative")
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = 10_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Grants{next: cfg.Store, now: cfg.Now, away: cfg.Away, perSlot: max(cfg.MaxKeys/grantShards, 1), seed: maphash.MakeSeed(),
		hot: new(hotTable), sidecars: cfg.Sidecars, failing: cfg.Failing}
	if g.sidecars == nil {
		g.sidecars = func() int64 { return 1 }
	}
	if g.failing == nil || g.away == nil {
		g.failing = func() bool { return false }
	}
	for i := range g.shards {
		g.shards[i].keys = map[grantKey]*grantEntry{}
	}
	g.flights.New = func() any {
		f := &grantFlight{g: g}
		f.landed = f.land
		return f
	}
	return g, nil
}

// grantable reports whether r may be decided from a grant, and asks for
// one: a plain take of the algorithms that offer grants.
func grantable(r *engine.Request) bool {
	if r.Peek || r.Charge || r.Grant || r.Refund || r.Durable != engine.DurableNone || r.Cost < 1 ||
		r.Key == "" || len(r.Key) > engine.MaxKeyLen {
		return false
	}
	if !r.Multi() {
		return grantAlgorithm(r.Limit.Algorithm) && r.Cost <= r.Limit.Capacity()
	}
	if len(r.Limits) > engine.MaxLimits {
		return false
	}
	for _, l := range r.Limits {
		if !grantAlgorithm(l.Limit.Algorithm) {
			return false
		}
	}
	return r.Cost <= r.Capacity()
}

func grantAlgorithm(a engine.Algorithm) bool {
	switch a {
	case engine.FixedWindow, engine.SlidingWindow, engine.TokenBucket, engine.GCRA:
		return true
	}
	return false
}

// isWindow reports whether a grant under a gives back what it did not
// spend: the windows do, the buckets' units lapse.
func isWindow(a engine.Algorithm) bool { return a == engine.FixedWindow || a == engine.SlidingWindow }

func keyOf(r *engine.Request) grantKey {
	if r.Multi() {
		return grantKey{key: r.Key}
	}
	return grantKey{r.Limit.Algorithm, r.Key}
}

func (g *Grants) shardOf(key string) *grantShard {
	return &g.shards[maphash.String(g.seed, key)%grantShards]
}

// forget takes e out of its shard's keys (e.shard.mu held) and frees its slot
// in the hot table.
func (g *Grants) forget(e *grantEntry) {
	e.gone = true
	delete(e.shard.keys, e.key)
	g.hot.unpin(e.slot)
}

// Submit admits what grants cover and sends the rest down, with the grant
// requests of hot keys and what ended grants give back.
func (g *Grants) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	g.noticeFailing()
	now := g.now()
	var f *grantFlight
	var last *grantEntry // the entry of the request before: a hot key's come in a row
	for i := range reqs {
		r := &reqs[i]
		if !grantable(r) {
			if f != nil {
				f.index = append(f.index, i)
			}
			continue
		}
		served, ask := g.decide(r, &res[i], now, &last)
		if served || ask.e != nil {
			if f == nil {
				f = g.flights.Get().(*grantFlight)
				for j := range i {
					f.index = append(f.index, j)
				}
			}
			if ask.e != nil {
				f.asks = append(f.asks, ask)
			}
		}
		if served {
			f.local++
		} else if f != nil {
			f.index = append(f.index, i)
		}
	}
	if f == nil && g.pending.Load() == 0 {
		g.next.Submit(reqs, res, deadline, done) // the usual case: nothing hot, nothing to give back
		return
	}
	if f == nil {
		f = g.flights.Get().(*grantFlight)
		for j := range reqs {
			f.index = append(f.index, j)
		}
	}
	f.takeRefunds()
	if len(f.index) == 0 && len(f.refunds) == 0 && len(f.asks) == 0 {
		f.release()
		done(nil) // all admitted from grants
		return
	}
	f.out, f.done = res, done
	f.build(reqs, now)
	g.next.Submit(f.reqs, f.res, deadline, f.landed)
}

// decide counts r in its key's recent requests and admits it from the
// key's grant if it fits, into res. Otherwise it returns the grant to ask
// for (ask.e set), if the key is hot and holds none. A cold key's request
// is counted in the hot table alone: no lock, nothing kept.
func (g *Grants) decide(r *engine.Request, res *engine.Result, now time.Time, last **grantEntry) (served bool, ask grantAsk) {
	k := keyOf(r)
	if e := *last; e != nil && e.key == k {
		// A hot key's requests come in a row: the one before found its
		// entry.
		e.shard.mu.Lock()
		if !e.gone {
			served, ask = g.fromEntry(e, r, res, now, last, false)
			e.shard.mu.Unlock()
			return served, ask
		}
		e.shard.mu.Unlock()
	}
	h := maphash.String(g.seed, r.Key)
	x := hotHash(h, k.alg)
	v, c := g.hot.count(x, now, r.Cost)
	if v == hotCold {
		return false, ask // the usual case
	}
	sh := &g.shards[h%grantShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.keys[k]
	counted := false
	if !ok {
		if v == hotPinned {
			// Another key of the same tag, or this one's entry not made
			// yet by the request that made it hot: it goes down
			// uncounted.
			return false, ask
		}
		if len(sh.keys) >= g.perSlot {
			g.hot.unpin(x)
			return false, ask
		}
		k.key = strings.Clone(k.key) // the caller may reuse the key's bytes
		e = &grantEntry{shard: sh, key: k, slot: x, limit: r.Limit, limits: r.Limits,
			tick: c.tick, cur: c.cur, curUnits: c.curUnits, prevUnits: c.prevUnits}
		sh.keys[k] = e
		counted = true // the table counted this request
	}
	return g.fromEntry(e, r, res, now, last, counted)
}

// fromEntry is decide for a key with an entry, e, locked: counted says
// whether r is already in its counts.
func (g *Grants) fromEntry(e *grantEntry, r *engine.Request, res *engine.Result, now time.Time, last **grantEntry, counted bool) (served bool, ask grantAsk) {
	if e.limit != r.Limit || !engine.SameLimits(e.limits, r.Limits) {
		// Other limits on the same state (a reloaded policy, an inline
		// command with other parameters): the grant was taken under the
		// old ones, so it ends, and the key is counted afresh (a new
		// entry, which keeps the slot: a grant asked for under the old
		// limits finds it gone).
		g.end(e, now)
		e.gone = true
		e = &grantEntry{shard: e.shard, key: e.key, slot: e.slot, limit: r.Limit, limits: r.Limits}
		e.shard.keys[e.key] = e
		counted = false
	}
	*last = e
	if !counted {
		e.count(now, r.Cost)
	}
	if e.held {
		sp := e.spendable(now)
		if sp >= r.Cost {
			e.left -= r.Cost
			e.unanswered += r.Cost
			e.onFailure = r.OnFailure
			if g.wasFailing.Load() {
				g.chargeLocked(e) // the store is away: in the share at once
			}
			g.admit(e, r, res, now, sp-r.Cost)
			g.decided.Add(1)
			return true, ask
		}
		// Spent, lapsed, or too small for this request: the grant ends,
		// what it has left goes back ahead of the request (so that the
		// store decides the request as if no grant had been taken), and
		// a new one may be asked for.
		g.end(e, now)
	}
	if e.asking || !e.hot() || now.Before(e.askAfter) {
		return false, ask
	}
	k := e.want(r, g.sidecars())
	if k < 1 {
		return false, ask
	}
	e.asking = true
	return false, grantAsk{e: e, cost: k}
}

// count adds a request of cost units to the key's recent ones.
func (e *grantEntry) count(now time.Time, cost int64) {
	t := now.UnixNano() / int64(hotInterval)
	e.roll(t)
	e.cur++
	e.curUnits += cost
}

// roll moves the counts to interval t.
func (e *grantEntry) roll(t int64) {
	switch {
	case t == e.tick:
	case t == e.tick+1:
		e.prev, e.prevUnits = e.cur, e.curUnits
		e.cur, e.curUnits = 0, 0
	case t > e.tick:
		e.prev, e.prevUnits, e.cur, e.curUnits = 0, 0, 0, 0
	default:
		return // a clock that stepped back: keep counting in the interval seen
	}
	e.tick = t
}

func (e *grantEntry) hot() bool { return e.cur >= hotCount || e.prev >= hotCount }

// want is k: the units this sidecar spends of the key in holdTarget at its
// recent rate (the busier of the last two intervals), at least 1, at most
// the capacity's 1/maxGrantShare and this sidecar's share of it (1 in
// sidecars, GrantsConfig.Sidecars), and no more than a refused grant said
// the key has left. 0: none worth asking for.
func (e *grantEntry) want(r *engine.Request, sidecars int64) int64 {
	units := max(e.curUnits, e.prevUnits)
	k := max(units*int64(holdTarget/hotInterval), 1)
	k = min(k, r.Capacity()/max(maxGrantShare, sidecars))
	if e.askMost > 0 {
		k = min(k, e.askMost)
	}
	return k
}

// spendable is how many units the held grant may still spend at now:
// engine.Limit.Spendable, the least of a multi-limit grant's limits', and
// for windows none past grantLife.
func (e *grantEntry) spendable(now time.Time) int64 {
	if !e.held {
		return 0
	}
	el := now.Sub(e.at)
	if el < 0 {
		el = 0 // a clock stepped back: as at the grant
	}
	if len(e.limits) == 0 {
		if isWindow(e.limit.Algorithm) && el >= grantLife {
			return 0
		}
		return e.limit.Spendable(e.hold, el, e.left)
	}
	sp := e.left
	for j, l := range e.limits {
		if isWindow(l.Limit.Algorithm) && el >= grantLife {
			return 0
		}
		sp = min(sp, l.Limit.Spendable(e.parts[j].Hold, el, e.left))
	}
	return sp
}

// admit writes the decision of r, admitted from e's grant, leaving rem
// units spendable. Remaining is what the grant may still spend after it:
// this sidecar's share, not the key's (the store may have more, other
// sidecars may hold more). ResetAfter is the grant's decision's, less
// the time since: the store counted the granted units as taken from the
// start. (Elapsed times are on the monotonic clock: a wall clock stepped
// back never lets a grant spend past its window.)
func (g *Grants) admit(e *grantEntry, r *engine.Request, res *engine.Result, now time.Time, rem int64) {
	el := max(now.Sub(e.at), 0)
	if !r.Multi() {
		c := r.Limit.Capacity()
		*res = engine.Result{Path: engine.PathGrant, Decision: engine.Decision{Allowed: true, Limit: c,
			Remaining: min(rem, c), ResetAfter: max(e.reset-el, 0)}}
		return
	}
	var buf [engine.MaxLimits]engine.Decision
	parts := buf[:len(r.Limits)]
	for j, l := range r.Limits {
		c := l.Limit.Capacity()
		left := l.Limit.Spendable(e.parts[j].Hold, el, e.left) // e.left is already less r.Cost
		parts[j] = engine.Decision{Allowed: true, Limit: c, Remaining: min(left, c), ResetAfter: max(e.parts[j].ResetAfter-el, 0)}
	}
	copy(r.Detail, parts)
	*res = engine.Result{Path: engine.PathGrant, Decision: engine.Combine(parts)}
}

// end ends e's grant, if held: a window's unspent units go back while its
// (sub-)window is current.
func (g *Grants) end(e *grantEntry, now time.Time) {
	if !e.held {
		return
	}
	if left := e.returnable(now); left > 0 {
		r := engine.Request{Key: e.key.key, Limit: e.limit, Limits: e.limits, Cost: left, Refund: true, Anchor: e.anchor}
		if len(e.limits) > 0 {
			// Each limit gives back by its own anchor, read from Detail,
			// where the store then writes its decisions: a copy of the
			// grant's.
			r.Detail = append([]engine.Decision(nil), e.parts...)
		}
		g.queueRefund(r)
	}
	e.held, e.left, e.parts = false, 0, nil
}

// returnable is what e's grant gives back if it ends at now: its unspent
// units, when every limit is a window whose (sub-)window the grant's hold
// says is still current; nothing when a bucket is among its limits, whose
// units lapse as it refills (a bucket refund could let another sidecar's
// later grant spend units the bucket admits again).
func (e *grantEntry) returnable(now time.Time) int64 {
	if e.left <= 0 || now.Sub(e.at) >= e.hold {
		return 0
	}
	if len(e.limits) == 0 {
		if !isWindow(e.limit.Algorithm) {
			return 0
		}
		return e.left
	}
	for j, l := range e.limits {
		if !isWindow(l.Limit.Algorithm) || now.Sub(e.at) >= e.parts[j].Hold {
			return 0
		}
	}
	return e.left
}

func (g *Grants) queueRefund(r engine.Request) {
	g.refundMu.Lock()
	g.refunds = append(g.refunds, r)
	g.pending.Store(int64(len(g.refunds)))
	g.refundMu.Unlock()
}

// keepRefunds keeps the refunds keep says to keep. refundMu is held.
func (g *Grants) keepRefunds(keep func(*engine.Request) bool) {
	kept := g.refunds[:0]
	for i := range g.refunds {
		if keep(&g.refunds[i]) {
			kept = append(kept, g.refunds[i])
		}
	}
	clear(g.refunds[len(kept):])
	g.refunds = kept
	g.pending.Store(int64(len(kept)))
}

// grantAsk is a grant asked for in a Submit: its entry and size.
type grantAsk struct {
	e    *grantEntry
	cost int64
}

// grantFlight is a Submit that went down with something of the layer's
// own (grant requests, refunds) or without what grants admitted; pooled.
type grantFlight struct {
	g       *Grants
	at      time.Time
	index   []int // the caller's requests sent down, in order
	local   int   // how many grants admitted
	asks    []grantAsk
	refunds []engine.Request
	reqs    []engine.Request // refunds, then index's requests, then asks
	res     []engine.Result
	out     []engine.Result // the caller's results
	done    func(error)
	landed  func(error) // land, bound once
}

func (f *grantFlight) takeRefunds() {
	g := f.g
	g.refundMu.Lock()
	f.refunds = append(f.refunds, g.refunds...)
	g.keepRefunds(func(*engine.Request) bool { return false })
	g.refundMu.Unlock()
}

// build lays out what goes down: refunds first, so that the requests
// after them find the units back; then the caller's requests; then the
// grant requests, which take only what those left.
func (f *grantFlight) build(reqs []engine.Request, now time.Time) {
	f.at = now
	f.reqs = append(f.reqs[:0], f.refunds...)
	for _, i := range f.index {
		f.reqs = append(f.reqs, reqs[i])
	}
	for _, a := range f.asks {
		e := a.e
		r := engine.Request{Key: e.key.key, Limit: e.limit, Limits: e.limits, Cost: a.cost, Grant: true}
		if len(e.limits) > 0 {
			r.Detail = make([]engine.Decision, len(e.limits)) // each limit's Hold
		}
		f.reqs = append(f.reqs, r)
	}
	if cap(f.res) < len(f.reqs) {
		f.res = make([]engine.Result, len(f.reqs))
	}
	f.res = f.res[:len(f.reqs)]
}

// land puts the results in place, takes the grants the store gave, and
// answers the caller.
func (f *grantFlight) land(err error) {
	g, done := f.g, f.done
	nr := len(f.refunds)
	if err == nil {
		for j, i := range f.index {
			f.out[i] = f.res[nr+j]
		}
		// A store that decides a refund never refuses it; refused, the
		// guard could not send it, and its units lapse.
		for j := range f.refunds {
			if f.res[j].Err == nil && f.res[j].Decision.Allowed {
				g.given.Add(uint64(f.refunds[j].Cost))
			}
		}
	}
	base := nr + len(f.index)
	for a, ask := range f.asks {
		var rr *engine.Result
		var req *engine.Request
		if err == nil {
			rr, req = &f.res[base+a], &f.reqs[base+a]
		}
		g.take(ask, req, rr, f.at)
	}
	f.release()
	done(err)
}

// noticeFailing charges, once the store behind starts failing, what
// every key's grants admitted since the store last answered for it (see
// GrantsConfig.Failing); once the store answers again, grants are counted
// as before.
func (g *Grants) noticeFailing() {
	if !g.failing() {
		if g.wasFailing.Load() {
			g.wasFailing.Store(false)
		}
		return
	}
	if g.wasFailing.Load() || !g.wasFailing.CompareAndSwap(false, true) {
		return
	}
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		for _, e := range sh.keys {
			g.chargeLocked(e)
		}
		sh.mu.Unlock()
	}
}

// chargeLocked charges what e's grants admitted since the store last
// answered for its key to this sidecar's local share (GrantsConfig.Away);
// e's shard is locked.
func (g *Grants) chargeLocked(e *grantEntry) {
	if e.unanswered > 0 && g.away != nil {
		g.away(engine.Request{Key: e.key.key, Limit: e.limit, Limits: e.limits, Cost: e.unanswered, OnFailure: e.onFailure})
		g.charged.Add(uint64(e.unanswered))
	}
	e.unanswered = 0
}

// take installs a grant the store gave, if its key is still counted here
// under the same limits (a reset or a reload drops what was asked for
// before it).
func (g *Grants) take(a grantAsk, req *engine.Request, rr *engine.Result, at time.Time) {
	g.asked.Add(1)
	e := a.e
	sh := e.shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.asking = false
	if sh.keys[e.key] != e || rr == nil || rr.Err != nil {
		return
	}
	switch rr.Path {
	case engine.PathStore:
		e.unanswered = 0 // the store answered: what the grants admitted before, it had granted
	case engine.PathFailClosed:
		// The guard could not send it: the store is away, and what the
		// grants admitted since it last answered counts in the share.
		g.chargeLocked(e)
	}
	d := rr.Decision
	if !d.Allowed {
		g.refusedG.Add(1)
		// Ask no more than the store said is left, and not before it
		// may have more: its retry-after, or sooner when units held in
		// other sidecars' grants come back.
		e.askMost = d.Remaining
		if d.Remaining < 1 {
			e.askAfter = at.Add(min(max(d.RetryAfter, hotInterval), GrantsReturnWithin))
		}
		return
	}
	if e.limit != req.Limit || !engine.SameLimits(e.limits, req.Limits) {
		return // the entry was counted afresh under other limits meanwhile: the units lapse
	}
	g.taken.Add(1)
	g.end(e, at) // none is held while one is asked for, unless a reset raced: none to give back then either
	e.held, e.at, e.left, e.hold, e.anchor, e.reset, e.askMost = true, at, req.Cost, d.Hold, d.Anchor, d.ResetAfter, 0
	if len(e.limits) > 0 {
		e.parts = append([]engine.Decision(nil), req.Detail...)
	}
}

func (f *grantFlight) release() {
	clear(f.reqs) // drop the keys, which alias the caller's buffers
	clear(f.res)
	clear(f.asks)
	clear(f.refunds)
	f.index, f.asks, f.refunds, f.reqs, f.res = f.index[:0], f.asks[:0], f.refunds[:0], f.reqs[:0], f.res[:0]
	f.local, f.out, f.done = 0, nil, nil
	f.g.flights.Put(f)
}

// Flush ends the window grants whose key went cold here (no request for a
// whole hotInterval) or whose life passed, and the grants that may spend
// nothing more, forgets the keys no
// longer seen, and sends down what the ended grants give back without
// waiting for a request to carry it. Run calls it every flushEvery.
func (g *Grants) Flush() {
	now := g.now()
	t := now.UnixNano() / int64(hotInterval)
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		for _, e := range sh.keys {
			e.roll(t)
			cold := e.cur == 0 && e.prev == 0
			// A bucket's grant is kept while it may spend, cold or not:
			// its units stay taken until they lapse whoever holds them,
			// and a grant taken anew beside them would hold more.
			if e.held && ((cold && e.returnable(now) > 0) || e.spendable(now) == 0) {
				g.end(e, now)
			}
			if cold && !e.held && !e.asking {
				g.forget(e)
			}
		}
		sh.mu.Unlock()
	}
	if g.pending.Load() == 0 {
		return
	}
	f := g.flights.Get().(*grantFlight)
	f.takeRefunds()
	if len(f.refunds) == 0 {
		f.release()
		return
	}
	f.out, f.done = nil, ignore
	f.build(nil, now)
	g.next.Submit(f.reqs, f.res, time.Time{}, f.landed)
}

// Run flushes every flushEvery until ctx ends.
func (g *Grants) Run(ctx context.Context) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.Flush()
		}
	}
}

// Reset drops this sidecar's grants of the key, then resets it below.
func (g *Grants) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	g.Forget(key)
	return g.next.Reset(ctx, key, limits...)
}

// Forget drops this sidecar's grants of the key, under every algorithm,
// and what they were to give back: a reset made the state they were taken
// from anew, so that a refund would take units off counts they were never
// in. Called for a reset another sidecar announces.
func (g *Grants) Forget(key string) {
	sh := g.shardOf(key)
	sh.mu.Lock()
	for _, a := range engine.Algorithms {
		g.drop(sh, grantKey{a, key})
	}
	g.drop(sh, grantKey{key: key})
	sh.mu.Unlock()
	g.refundMu.Lock()
	g.keepRefunds(func(r *engine.Request) bool { return r.Key != key })
	g.refundMu.Unlock()
}

// drop forgets k in sh, counting its grant revoked if it held one.
// sh.mu is held.
func (g *Grants) drop(sh *grantShard, k grantKey) {
	if e, ok := sh.keys[k]; ok {
		if e.held {
			g.revoked.Add(1)
		}
		g.forget(e)
	}
}

// DropAll drops every grant and everything counted, without giving back:
// for a policy reload, whose limits may not be the ones the grants were
// taken under. The units lapse (windows: at their window's end).
func (g *Grants) DropAll() {
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		for k := range sh.keys {
			g.drop(sh, k)
		}
		sh.mu.Unlock()
	}
	g.refundMu.Lock()
	g.keepRefunds(func(*engine.Request) bool { return false })
	g.refundMu.Unlock()
}

// GrantStats counts what the grant layer did, for INFO and metrics.
type GrantStats struct {
	Held        int    // grants held now
	Outstanding int64  // units they may still spend
	Decisions   uint64 // requests admitted from grants
	Taken       uint64 // grants the store gave
	Asked       uint64 // grants asked for
	GivenBack   uint64 // units sent back from grants that ended unspent
	Revoked     uint64 // grants dropped by a reset or a policy reload
	Keys        int    // hot keys with an entry (MaxKeys)

	// ChargedLocal counts the units admitted from grants while the store
	// was away, charged to the local share (GrantsConfig.Away).
	ChargedLocal uint64
}

// Stats returns the counts so far.
func (g *Grants) Stats() GrantStats {
	s := GrantStats{Decisions: g.decided.Load(), Taken: g.taken.Load(), Asked: g.asked.Load(), GivenBack: g.given.Load(),
		Revoked: g.revoked.Load(), ChargedLocal: g.charged.Load()}
	now := g.now()
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		s.Keys += len(sh.keys)
		for _, e := range sh.keys {
			if sp := e.spendable(now); sp > 0 {
				s.Held++
				s.Outstanding += sp
			}
		}
		sh.mu.Unlock()
	}
	return s
}
