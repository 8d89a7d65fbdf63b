package chain

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/sluice-rl/sluice/engine"
)

// DenyCacheConfig configures a DenyCache. Zero values mean the documented
// defaults.
type DenyCacheConfig struct {
	// Store decides what the cache cannot: the batcher in front of Redis.
	Store engine.Store
	// MaxEntries bounds the refusals remembered; the least recently used
	// goes first. Zero means 50,000 (about 17 MB).
	MaxEntries int
	// Now is the clock; nil means time.Now. Only durations are taken from
	// it, so it need not agree with Redis's clock.
	Now func() time.Time
}

// DenyCache is a Store that remembers refusals. Once a key is refused with
// a retry-after, a later request for that key with the same limit and no
// smaller cost is refused here, without a round trip, until the retry-after
// runs out. It can never refuse what the store would admit: every algorithm
// only frees capacity as time passes, so until the retry-after the same
// request would be refused there too — unless the key is reset, which is
// why Reset and Forget drop the remembered refusal.
type DenyCache struct {
	store   engine.Store
	now     func() time.Time
	entries *lru.Cache[stateKey, denial]
	scratch sync.Pool // *misses
	hits    atomic.Uint64
	misses  atomic.Uint64
	evicted atomic.Uint64
}

// stateKey is where a refusal is remembered: a key under one algorithm,
// or under alg 0 a multi-limit request's key.
type stateKey struct {
	alg engine.Algorithm
	key string
}

// denial is a remembered refusal. A multi-limit request's is kept under
// its key alone (stateKey.alg 0), with its limits and their decisions.
type denial struct {
	limit    engine.Limit
	limits   []engine.NamedLimit // a multi-limit request's: the policy's, shared
	detail   []engine.Decision   // and each limit's decision, a copy
	cost     int64
	until    time.Time // retry-after runs out
	resetsAt time.Time
	decision engine.Decision
}

var _ engine.Store = (*DenyCache)(nil)

// defaultDenyCacheSize is DenyCacheConfig.MaxEntries's default.
const defaultDenyCacheSize = 50_000

// NewDenyCache returns an empty cache in front of cfg.Store.
func NewDenyCache(cfg DenyCacheConfig) (*DenyCache, error) {
	if cfg.Store == nil {
		return nil, errors.New("chain: deny cache needs a store")
	}
	if cfg.MaxEntries < 0 {
		return nil, errors.New("chain: deny cache size must not be negative")
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = defaultDenyCacheSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	entries, err := lru.New[stateKey, denial](cfg.MaxEntries)
	if err != nil {
		return nil, err
	}
	c := &DenyCache{store: cfg.Store, now: cfg.Now, entries: entries}
	c.scratch.New = func() any {
		m := &misses{c: c}
		m.submitted = m.finishAndCallDone
		return m
	}
	return c, nil
}

// Submit answers remembered refusals locally and sends the rest on.
func (c *DenyCache) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	m := c.answer(reqs, res)
	if m == nil {
		done(nil)
		return
	}
	m.done = done
	c.store.Submit(m.reqs, m.res, deadline, m.submitted)
}

// misses is what a batch sends on: the requests the cache could not
// answer, and where their results go.
type misses struct {
	c     *DenyCache
	now   time.Time
	index []int            // misses' places in the batch; nil when all missed
	reqs  []engine.Request // the misses: the batch's own when all missed
	res   []engine.Result
	out   []engine.Result // the batch's results
	done  func(error)

	// Owned buffers, reused for batches of some of each.
	bufIndex []int
	bufReqs  []engine.Request
	bufRes   []engine.Result

	submitted func(error) // finishAndCallDone, bound once
}

// answer answers what the cache remembers and returns the misses, or nil
// when there are none.
func (c *DenyCache) answer(reqs []engine.Request, res []engine.Result) *misses {
	now := c.now()
	hits := 0
	// An empty cache, the usual state while nothing is refused, answers
	// nothing: one look at its size spares a locked lookup per request. A
	// refusal remembered meanwhile is missed, and Redis decides instead.
	if c.entries.Len() > 0 {
		var last lastLookup
		for i := range reqs {
			// Every result is set here, so that the hits can be told from
			// the misses below by their path alone.
			res[i] = engine.Result{}
			if d, ok := c.lookup(&reqs[i], now, &last); ok {
				res[i] = engine.Result{Decision: d, Path: engine.PathDenyCache}
				hits++
			}
		}
	}
	c.hits.Add(uint64(hits))
	c.misses.Add(uint64(len(reqs) - hits))
	if hits == len(reqs) {
		return nil
	}
	m := c.scratch.Get().(*misses)
	m.now, m.out = now, res
	if hits == 0 {
		m.index, m.reqs, m.res = nil, reqs, res
		return m
	}
	// Some of each: send only the misses, and put their results in place
	// once they are in.
	m.bufIndex, m.bufReqs = m.bufIndex[:0], m.bufReqs[:0]
	for i := range reqs {
		if res[i].Path != engine.PathDenyCache {
			m.bufIndex = append(m.bufIndex, i)
			m.bufReqs = append(m.bufReqs, reqs[i])
		}
	}
	if cap(m.bufRes) < len(m.bufReqs) {
		m.bufRes = make([]engine.Result, len(m.bufReqs))
	}
	m.bufRes = m.bufRes[:len(m.bufReqs)]
	m.index, m.reqs, m.res = m.bufIndex, m.bufReqs, m.bufRes
	return m
}

// finish remembers the misses' refusals, puts their results in place and
// returns m to the pool.
func (m *misses) finish(err error) error {
	if err == nil {
		m.c.remember(m.reqs, m.res, m.now)
		for j, i := range m.index {
			m.out[i] = m.res[j]
		}
	}
	clear(m.bufReqs) // drop the keys, which alias the caller's buffers
	clear(m.bufRes)
	m.index, m.reqs, m.res, m.out, m.done = nil, nil, nil, nil, nil
	m.c.scratch.Put(m)
	return err
}

func (m *misses) finishAndCallDone(err error) {
	done := m.done
	done(m.finish(err))
}

// lastLookup is the entry a batch's last lookup found, or that there was
// none: a hot key's requests come in a row, and one look into the LRU (a
// lock, a hash, a move to the front) serves the whole row.
type lastLookup struct {
	key   stateKey
	e     denial
	found bool
	set   bool
}

// lookup returns the local refusal for r, if one applies at now; last is
// the batch's lookup before.
func (c *DenyCache) lookup(r *engine.Request, now time.Time, last *lastLookup) (engine.Decision, bool) {
	if r.Charge || r.Refund || r.Cost == 0 || r.Cost > r.Capacity() {
		// A charge or a refund is never refused, so never answered here;
		// a look, or a cost the store refuses as invalid.
		return engine.Decision{}, false
	}
	if k := denialKey(r); !last.set || k != last.key {
		last.e, last.found = c.entries.Get(k)
		last.key, last.set = k, true
	}
	e, ok := &last.e, last.found
	if !ok || e.limit != r.Limit || !engine.SameLimits(e.limits, r.Limits) || r.Cost < e.cost || !now.Before(e.until) ||
		(r.Detail != nil && e.detail == nil) {
		return engine.Decision{}, false
	}
	d := e.decision
	d.RetryAfter = e.until.Sub(now)
	d.ResetAfter = max(e.resetsAt.Sub(now), d.RetryAfter)
	if r.Detail != nil {
		// Each limit's own decision, its times run down by as long as the
		// refusal has been remembered.
		gone := e.until.Sub(now) - e.decision.RetryAfter
		for j, p := range e.detail {
			p.RetryAfter = max(p.RetryAfter+gone, 0)
			p.ResetAfter = max(p.ResetAfter+gone, 0)
			r.Detail[j] = p
		}
	}
	return d, true
}

// denialKey is where r's refusal is remembered: under its algorithm and
// key, or for a multi-limit request under its key alone, whose limits
// then must match too.
func denialKey(r *engine.Request) stateKey {
	if r.Multi() {
		return stateKey{key: r.Key}
	}
	return stateKey{r.Limit.Algorithm, r.Key}
}

// remember records the refusals among res and forgets keys now admitted.
func (c *DenyCache) remember(reqs []engine.Request, res []engine.Result, now time.Time) {
	for i := range reqs {
		r, d := &reqs[i], res[i].Decision
		if res[i].Err != nil || r.Cost == 0 || (r.Grant && !d.Allowed) {
			// A refused grant of k units says nothing of a request of
			// fewer: it is not remembered.
			continue
		}
		sk := denialKey(r)
		if d.Allowed {
			// An admission proves the key has room again (another
			// sidecar's reset may not have been announced yet).
			c.entries.Remove(sk)
			continue
		}
		cost := r.Cost
		if r.Charge {
			// A charge that did not fit was taken all the same, and its
			// decision is the one a request of cost 1 now gets (engine's
			// charge), but for its remaining, floored at 0 for every
			// decision but a charge's: remembered as that, it refuses
			// every cost, for longer than a refusal remembered before
			// the charge.
			cost = 1
		}
		if d.Remaining < 0 && (r.Multi() || r.Limit.Algorithm != engine.FixedWindow) {
			// Over the budget, the key's remaining rises as it refills,
			// which a remembered decision would not say; a fixed window's
			// stays as it is until the window ends, its retry-after.
			c.entries.Remove(sk)
			continue
		}
		if d.RetryAfter > 0 {
			sk.key = strings.Clone(sk.key) // the caller may reuse the key's bytes
			d.Remaining = max(d.Remaining, 0)
			e := denial{limit: r.Limit, limits: r.Limits, cost: cost, decision: d,
				until: now.Add(d.RetryAfter), resetsAt: now.Add(d.ResetAfter)}
			if r.Detail != nil {
				e.detail = append([]engine.Decision(nil), r.Detail...)
				for j := range e.detail {
					e.detail[j].Remaining = max(e.detail[j].Remaining, 0)
				}
			}
			if c.entries.Add(sk, e) {
				c.evicted.Add(1)
			}
		}
	}
}

// Reset drops the key's remembered refusals, then resets it in the store.
func (c *DenyCache) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	c.Forget(key)
	return c.store.Reset(ctx, key, limits...)
}

// Forget drops the key's remembered refusals: called when another sidecar
// announces a reset.
func (c *DenyCache) Forget(key string) {
	for _, a := range engine.Algorithms {
		c.entries.Remove(stateKey{a, key})
	}
	c.entries.Remove(stateKey{key: key}) // a multi-limit request's
}

// DenyCacheStats counts what the cache did, for INFO and metrics.
type DenyCacheStats struct {
	Hits, Misses uint64
	Evictions    uint64 // refusals dropped to make room
	Entries      int
}

// Stats returns the counts so far.
func (c *DenyCache) Stats() DenyCacheStats {
	return DenyCacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evicted.Load(), Entries: c.entries.Len()}
}
