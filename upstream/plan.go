package upstream

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redispipe"
	"github.com/sluice-rl/sluice/lua"
)

// The plan: a batch's valid requests as calls of the batch script
// (lua.BatchCall), each key's requests together so that the script reads
// and writes a key once however many requests it has. A pipe's batch is
// one call (a Cluster master's covers every slot it serves); go-redis on
// Cluster takes one call per hash slot (goredis.go).

// call is one script call: a part of a batch (or one request) and where its
// replies go.
type call struct {
	script *lua.Script
	keys   []keyRef
	batch  lua.BatchCall // the arguments after the keys
	reqs   []int         // indices into the caller's reqs, in order
	cmd    *redis.Cmd
}

// batch is one Submit's plan, and what its replies complete, pooled so
// that the hot path reuses it.
type batch struct {
	valid []int // indices of the requests to send, in order
	// go-redis on Cluster only: the valid requests regrouped by slot (order), each
	// one's slot, and slot → group number.
	slotted   []slotted
	order     []int
	slots     []uint16
	slotGroup map[uint16]int

	keys  []keyRef
	calls []call
	// The calls' arguments (lua.BatchCall), each call's a part of these.
	wireLimits  []lua.Limit
	runs        []lua.Run
	keyRuns     []lua.KeyRun
	multis      []lua.Multi
	multiLimits []int64
	anchors     []int64
	// Batch script only: each call's requests with a key's together
	// (grouped; each call's reqs is a part of it), the distinct keys'
	// group numbers (keyGroup) and their requests (groupSize), each
	// request's group (reqGroup), and where each group starts in grouped
	// (groupAt).
	grouped   []int
	keyGroup  map[keyRef]int
	groupSize []int
	reqGroup  []int
	groupAt   []int
	// Batch script only: one call's distinct limits, and each request's
	// (1-based) index among them.
	limits     []engine.Limit
	limitIndex map[engine.Limit]int64
	reqLimit   []int64
	// multi holds one call's multi-limit requests while its single-limit
	// ones are grouped; multiKey and multiBy bring each key's together.
	multi    []int
	multiKey map[string]int
	multiBy  []keyed
	// reply holds a batch reply's decisions, one per request, or per
	// limit of a multi-limit request.
	reply lua.BatchReply
	// pinned is set when the calls carry now, the pinned clock
	// (Config.Now), for tests.
	pinned bool
	now    int64

	// What the batch completes, and how it goes (send.go).
	send     sender
	reqs     []engine.Request
	res      []engine.Result
	deadline time.Time
	done     func(error)
	// A pipe's batch only: its pipe, whether its one call's keys are
	// undeclared (a Cluster master's), the call as written, whether it
	// went again as EVAL after NOSCRIPT, and gotReply bound to b.
	pipe       *redispipe.Pipe
	undeclared bool
	out        []byte
	evaled     bool
	got        redispipe.Done
	// A durable batch only (durable.go): its durability, the replies it
	// awaits (its call's and the WAIT's after it, two more for each
	// NOSCRIPT), its call's outcome, why the replicas fell short, if they
	// did, and waitReply bound to b.
	durable   engine.Durability
	waited    time.Duration // the WAITs' timeouts so far
	awaiting  atomic.Int32
	callErr   error
	shortMu   sync.Mutex
	short     error // guarded by shortMu
	waitReply redispipe.Done
}

type slotted struct {
	group int
	slot  uint16
	req   int
}

// keyed is a multi-limit request and its key's group, in order of the
// keys' first requests.
type keyed struct {
	group, req int
}

// newBatch makes a batch for the pool (Store.batches' New).
func (s *Store) newBatch() any {
	b := &batch{slotGroup: map[uint16]int{}, limitIndex: map[engine.Limit]int64{}, keyGroup: map[keyRef]int{}, multiKey: map[string]int{}}
	b.got = func(reply any, err error) { s.gotReply(b, reply, err) }
	b.waitReply = func(reply any, err error) { s.gotWait(b, reply, err) }
	return b
}

// release puts b back in the pool, keeping no request's strings.
func (s *Store) release(b *batch) {
	clear(b.keys)
	clear(b.calls)
	clear(b.wireLimits)
	b.valid, b.slotted, b.slots, b.order = b.valid[:0], b.slotted[:0], b.slots[:0], b.order[:0]
	b.keys, b.calls = b.keys[:0], b.calls[:0]
	b.wireLimits, b.runs, b.keyRuns, b.multis, b.multiLimits = b.wireLimits[:0], b.runs[:0], b.keyRuns[:0], b.multis[:0], b.multiLimits[:0]
	b.anchors = b.anchors[:0]
	clear(b.slotGroup)
	clear(b.limitIndex)
	b.limits, b.reqLimit, b.multi, b.multiBy = b.limits[:0], b.reqLimit[:0], b.multi[:0], b.multiBy[:0]
	b.reply.Decisions = b.reply.Decisions[:0]
	clear(b.keyGroup)
	clear(b.multiKey)
	b.grouped, b.groupSize, b.reqGroup, b.groupAt = b.grouped[:0], b.groupSize[:0], b.reqGroup[:0], b.groupAt[:0]
	b.pinned, b.send, b.reqs, b.res, b.deadline, b.done = false, nil, nil, nil, time.Time{}, nil
	b.pipe, b.undeclared, b.evaled = nil, false, false
	b.durable, b.waited, b.callErr, b.short = engine.DurableNone, 0, nil, nil
	s.batches.Put(b)
}

// planBySlot turns the valid requests into one call per hash slot, for
// go-redis on Cluster (goredis.go); a pipe's batch is one call
// (appendCall).
func (s *Store) planBySlot(b *batch, reqs []engine.Request) {
	order := s.bySlot(b, reqs)
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && b.slots[end] == b.slots[start] {
			end++
		}
		b.appendCall(reqs, order[start:end])
		start = end
	}
}

// appendCall appends to b.calls one call of the batch script that decides
// the requests idx: the whole batch on a pipe, one slot's through
// go-redis on Cluster.
func (b *batch) appendCall(reqs []engine.Request, idx []int) {
	k, g := len(b.keys), len(b.grouped)
	// The multi-limit requests go last, keys and all (see batch.lua).
	b.multi = b.multi[:0]
	single := idx[:0]
	for _, i := range idx {
		if reqs[i].Multi() {
			b.multi = append(b.multi, i)
		} else {
			single = append(single, i) // in place: single never passes i
		}
	}
	b.group(reqs, single)
	if len(b.multi) > 1 {
		b.groupMulti(reqs)
	}
	singles := len(b.grouped) - g
	b.grouped = append(b.grouped, b.multi...)
	for _, i := range b.multi {
		for _, l := range reqs[i].Limits {
			b.keys = append(b.keys, keyRef{key: reqs[i].Key, name: l.Name, alg: l.Limit.Algorithm})
		}
	}
	batch := b.appendBatchCall(reqs, b.grouped[g:g+singles], b.grouped[g+singles:])
	batch.Now, batch.Pinned = b.now, b.pinned
	b.calls = append(b.calls, call{
		script: lua.Batch,
		keys:   b.keys[k:len(b.keys):len(b.keys)],
		batch:  batch,
		reqs:   b.grouped[g:len(b.grouped):len(b.grouped)],
	})
}

// bySlot returns the valid requests grouped by hash slot: the groups in
// order of first appearance, each in request order (all of a key's
// requests share a slot, so their order holds). b.slots[k] is then the slot
// of the k-th one returned.
func (s *Store) bySlot(b *batch, reqs []engine.Request) []int {
	for _, i := range b.valid {
		r := &reqs[i]
		slot := s.slotOf(r)
		g, ok := b.slotGroup[slot]
		if !ok {
			g = len(b.slotGroup)
			b.slotGroup[slot] = g
		}
		b.slotted = append(b.slotted, slotted{group: g, slot: slot, req: i})
	}
	slices.SortStableFunc(b.slotted, func(x, y slotted) int { return x.group - y.group })
	for _, e := range b.slotted {
		b.order = append(b.order, e.req)
		b.slots = append(b.slots, e.slot)
	}
	return b.order
}

// group appends idx's requests to b.grouped with each key's requests
// together, in the order of the keys' first requests and each key's in
// its own order, and each distinct key to b.keys. Requests on different
// keys are independent, so this decides the same as idx's order; a key
// then costs the script one read and one write however many requests it
// has. b.groupSize holds the keys' request counts, in that order.
func (b *batch) group(reqs []engine.Request, idx []int) {
	clear(b.keyGroup)
	b.groupSize, b.reqGroup = b.groupSize[:0], b.reqGroup[:0]
	k := len(b.keys)
	for _, i := range idx {
		key := keyRef{key: reqs[i].Key, alg: reqs[i].Limit.Algorithm}
		g, ok := b.keyGroup[key]
		if !ok {
			g = len(b.groupSize)
			b.keyGroup[key] = g
			b.keys = append(b.keys, key)
			b.groupSize = append(b.groupSize, 0)
		}
		b.groupSize[g]++
		b.reqGroup = append(b.reqGroup, g)
	}
	if len(b.keys)-k == len(idx) {
		b.grouped = append(b.grouped, idx...) // no key twice: the order stands
		return
	}
	// A counting sort by group, stable.
	b.groupAt = b.groupAt[:0]
	at := len(b.grouped)
	for _, n := range b.groupSize {
		b.groupAt = append(b.groupAt, at)
		at += n
	}
	b.grouped = slices.Grow(b.grouped, len(idx))[:at]
	for q, i := range idx {
		g := b.reqGroup[q]
		b.grouped[b.groupAt[g]] = i
		b.groupAt[g]++
	}
}

// groupMulti brings each key's multi-limit requests in b.multi together,
// in the order of the keys' first requests and each key's in its own
// order, so that the script decides a hot key's requests under a policy
// as a run, reading and writing each limit once (see batch.lua). No two
// keys' limits share a Redis key, so this decides as b.multi's order.
func (b *batch) groupMulti(reqs []engine.Request) {
	clear(b.multiKey)
	b.multiBy = b.multiBy[:0]
	for _, i := range b.multi {
		g, ok := b.multiKey[reqs[i].Key]
		if !ok {
			g = len(b.multiKey)
			b.multiKey[reqs[i].Key] = g
		}
		b.multiBy = append(b.multiBy, keyed{group: g, req: i})
	}
	if len(b.multiKey) == len(b.multi) {
		return // no key twice: the order stands
	}
	slices.SortStableFunc(b.multiBy, func(x, y keyed) int { return x.group - y.group })
	for k, e := range b.multiBy {
		b.multi[k] = e.req
	}
}

// burstArg is what a limit sends as the scripts' burst: the sliding window,
// which takes no burst, sends its precision there (see lua/sliding.lua),
// and the peer window its jitter in seconds (lua/peer.lua).
func burstArg(l engine.Limit) int64 {
	switch l.Algorithm {
	case engine.SlidingWindow:
		return l.Precision
	case engine.PeerWindow:
		return int64(l.Jitter / time.Second)
	}
	return l.Burst
}

// modeOf is the batch script's mode of a request.
func modeOf(r *engine.Request) lua.Mode {
	switch {
	case r.Charge:
		return lua.Charge
	case r.Peek:
		return lua.Peek
	case r.Grant:
		return lua.Grant
	case r.Refund:
		return lua.Refund
	}
	return lua.Take
}

// appendBatchCall builds the batch script's arguments for the
// single-limit requests idx of reqs, each key's together, as group left
// them and b.groupSize counts them, and the multi-limit requests multi:
// the distinct limits; runs of consecutive requests that share a limit,
// cost and mode; runs of keys with as many requests each; runs of
// multi-limit requests that share limits, cost and mode. Its slices are
// parts of b's, which it appends to.
func (b *batch) appendBatchCall(reqs []engine.Request, idx, multi []int) lua.BatchCall {
	b.limits, b.reqLimit = b.limits[:0], b.reqLimit[:0]
	clear(b.limitIndex)
	index := func(l engine.Limit) int64 {
		// Most batches share one limit: try the last one before the map.
		n := int64(len(b.limits))
		if n == 0 || b.limits[n-1] != l {
			var ok bool
			if n, ok = b.limitIndex[l]; !ok {
				b.limits = append(b.limits, l)
				n = int64(len(b.limits))
				b.limitIndex[l] = n
			}
		}
		return n
	}
	for _, i := range idx {
		b.reqLimit = append(b.reqLimit, index(reqs[i].Limit))
	}
	// The multi-limit requests' limit indexes follow, in b.reqLimit too.
	for _, i := range multi {
		for _, l := range reqs[i].Limits {
			b.reqLimit = append(b.reqLimit, index(l.Limit))
		}
	}
	l0, r0, k0, m0, ml0, a0 := len(b.wireLimits), len(b.runs), len(b.keyRuns), len(b.multis), len(b.multiLimits), len(b.anchors)
	for _, l := range b.limits {
		b.wireLimits = append(b.wireLimits, lua.Limit{Algorithm: l.Algorithm.Short(), Rate: l.Rate, Period: l.Period.Microseconds(), Burst: burstArg(l)})
	}
	// A run ends where the next request has another limit, cost or mode.
	for q := 0; q < len(idx); {
		r := &reqs[idx[q]]
		end := q + 1
		for end < len(idx) && b.reqLimit[end] == b.reqLimit[q] && reqs[idx[end]].Cost == r.Cost && modeOf(&reqs[idx[end]]) == modeOf(r) {
			end++
		}
		b.runs = append(b.runs, lua.Run{Requests: int64(end - q), Limit: b.reqLimit[q], Cost: r.Cost, Mode: modeOf(r)})
		if r.Refund {
			for _, i := range idx[q:end] {
				b.anchors = append(b.anchors, reqs[i].Anchor)
			}
		}
		q = end
	}
	// Key runs: consecutive keys with as many requests each.
	for g := 0; g < len(b.groupSize); {
		end := g + 1
		for end < len(b.groupSize) && b.groupSize[end] == b.groupSize[g] {
			end++
		}
		b.keyRuns = append(b.keyRuns, lua.KeyRun{Keys: int64(end - g), Requests: int64(b.groupSize[g])})
		g = end
	}
	// Multi-limit runs: consecutive requests with the same limits, cost
	// and mode (a batch under one policy is one), their limits once.
	at := len(idx)
	for _, i := range multi {
		r := &reqs[i]
		ls := b.reqLimit[at : at+len(r.Limits)]
		at += len(ls)
		if n := len(b.multis); n > m0 {
			last := &b.multis[n-1]
			if last.Limits == len(ls) && last.Cost == r.Cost && last.Mode == modeOf(r) && slices.Equal(b.multiLimits[len(b.multiLimits)-len(ls):], ls) {
				last.Requests++
				continue
			}
		}
		b.multis = append(b.multis, lua.Multi{Requests: 1, Limits: len(ls), Cost: r.Cost, Mode: modeOf(r)})
		b.multiLimits = append(b.multiLimits, ls...)
	}
	// The refunds' anchors, a multi-limit refund's from its Detail (see
	// engine.Request.Refund), after the single-limit ones.
	for _, i := range multi {
		if r := &reqs[i]; r.Refund {
			for j := range r.Limits {
				b.anchors = append(b.anchors, r.Detail[j].Anchor)
			}
		}
	}
	return lua.BatchCall{
		Limits:      b.wireLimits[l0:len(b.wireLimits):len(b.wireLimits)],
		Runs:        b.runs[r0:len(b.runs):len(b.runs)],
		KeyRuns:     b.keyRuns[k0:len(b.keyRuns):len(b.keyRuns)],
		Multis:      b.multis[m0:len(b.multis):len(b.multis)],
		MultiLimits: b.multiLimits[ml0:len(b.multiLimits):len(b.multiLimits)],
		Anchors:     b.anchors[a0:len(b.anchors):len(b.anchors)],
	}
}
