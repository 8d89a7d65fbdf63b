package engine

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Shards routes each request to the store that decides it: on Redis
// Cluster, the store of the master that serves the request's key. It
// returns the same value for every request one store decides (stores are
// compared with ==), or an error when it cannot tell (no slot map).
type Shards func(r *Request) (Store, error)

// SubmitSplit is Submit over shards: it sends each store its requests
// alone, all at once, and calls done once every part is decided, with
// the first part's error if any failed. A batch whose requests all go to
// one store is submitted to it as it is, with nothing copied; otherwise
// each part is copied out and its results copied back. Requests of one
// key go to one store in their order, so the batch decides as Submit
// would. A routing error fails the whole batch before anything is sent.
func SubmitSplit(shard Shards, reqs []Request, res []Result, deadline time.Time, done func(error)) {
	if len(reqs) == 0 {
		done(nil)
		return
	}
	first, err := shard(&reqs[0])
	if err != nil {
		done(err)
		return
	}
	i, st := 1, first
	for ; i < len(reqs); i++ {
		if st, err = shard(&reqs[i]); err != nil {
			done(err)
			return
		}
		if st != first {
			break
		}
	}
	if i == len(reqs) {
		first.Submit(reqs, res, deadline, done)
		return
	}
	sp := splits.Get().(*split)
	sp.add(first, reqs[:i], 0)
	sp.add(st, reqs[i:i+1], i) // the first of another store's, routed above
	for i++; i < len(reqs); i++ {
		if st, err = shard(&reqs[i]); err != nil {
			sp.release()
			done(err)
			return
		}
		sp.add(st, reqs[i:i+1], i)
	}
	sp.res, sp.done = res, done
	// One more than the parts, taken back once all are sent: a part that
	// completes while later ones are still being sent must not complete
	// the batch under the loop below.
	sp.pending.Store(int32(len(sp.parts)) + 1)
	for _, p := range sp.parts {
		p.res = slices.Grow(p.res[:0], len(p.reqs))[:len(p.reqs)]
		p.store.Submit(p.reqs, p.res, deadline, p.landed)
	}
	sp.landed(nil)
}

// split is a batch cut into parts by store, pooled with each part's
// completion bound once.
type split struct {
	parts   []*part
	res     []Result // the caller's
	done    func(error)
	pending atomic.Int32
	mu      sync.Mutex
	err     error // the first part's error; guarded by mu
}

// part is one store's requests of a split batch, and where each came from.
type part struct {
	sp     *split
	store  Store
	idx    []int // in the caller's reqs, in order
	reqs   []Request
	res    []Result
	landed func(error) // split.partLanded bound to this part
}

var splits = sync.Pool{New: func() any { return new(split) }}

// add appends reqs, the caller's from index at, to store's part.
func (sp *split) add(store Store, reqs []Request, at int) {
	var p *part
	for _, q := range sp.parts {
		if q.store == store {
			p = q
			break
		}
	}
	if p == nil {
		n := len(sp.parts)
		if n < cap(sp.parts) && sp.parts[:n+1][n] != nil {
			p = sp.parts[:n+1][n] // a pooled part, its landed bound
		} else {
			p = &part{sp: sp}
			p.landed = func(err error) { p.sp.partLanded(p, err) }
		}
		sp.parts = append(sp.parts, p)
		p.store = store
	}
	for k := range reqs {
		p.idx = append(p.idx, at+k)
	}
	p.reqs = append(p.reqs, reqs...)
}

// partLanded copies a part's results back to the caller's, and completes
// the batch when it was the last part.
func (sp *split) partLanded(p *part, err error) {
	if err != nil {
		sp.mu.Lock()
		if sp.err == nil {
			sp.err = err
		}
		sp.mu.Unlock()
	} else {
		for k, i := range p.idx {
			sp.res[i] = p.res[k]
		}
	}
	sp.landed(nil)
}

// landed counts one part (or the sender) in; the last completes the batch.
func (sp *split) landed(error) {
	if sp.pending.Add(-1) != 0 {
		return
	}
	sp.mu.Lock()
	err := sp.err
	sp.mu.Unlock()
	done := sp.done
	sp.release()
	done(err)
}

// release clears sp for the pool: no request's strings kept.
func (sp *split) release() {
	for _, p := range sp.parts {
		clear(p.reqs)
		clear(p.res)
		p.store, p.idx, p.reqs, p.res = nil, p.idx[:0], p.reqs[:0], p.res[:0]
	}
	sp.parts = sp.parts[:0]
	sp.res, sp.done, sp.err = nil, nil, nil
	splits.Put(sp)
}
