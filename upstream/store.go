// Package upstream is Sluice's Redis store: an engine.Store that decides
// requests with the scripts of package lua on a central Redis (standalone,
// Sentinel or Cluster, through go-redis's UniversalClient), so that every
// sidecar shares one truth and every decision is one atomic script run.
//
// A batch is one round trip. On standalone and Sentinel Redis one EVALSHA of
// the batch script decides the whole batch, so Redis pays its per-command
// cost once for many decisions; it goes on the store's own pipelined
// connection (pipe.go), which its sender writes without waiting, and
// whose replies an event loop may read (UseLoop: the loop app gives it,
// package evloop), so that they land where the clients are answered. On
// Cluster the batch is grouped by the master that serves each key, one
// EVALSHA per master, each on that master's own pipe (masters.go); the
// few requests whose key a master no longer serves go again one call per
// hash slot through go-redis, which follows Redis's redirects
// (cluster.go). A Redis that lost its scripts (restarted, SCRIPT FLUSH)
// answers NOSCRIPT; the store then sends the same calls as EVAL, which
// loads the scripts again, invisibly to the caller.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisurl"
	"github.com/sluice-rl/sluice/lua"
)

// Config configures a Store. Zero values mean the documented defaults.
type Config struct {
	// Client reaches Redis: a *redis.Client (standalone, or Sentinel through
	// a failover client) or a *redis.ClusterClient. Required. A *redis.Ring
	// is refused: it shards on the client, where one script call cannot
	// follow.
	Client redis.UniversalClient
	// Prefix starts every key. Empty means redisurl.DefaultPrefix. A request's state
	// lives at Prefix + "{" + key + "}:" + the algorithm's short name, and
	// a multi-limit request's limit at Prefix + "{" + key + "}:" + the
	// limit's name + ":" + the short name. The hash tag keeps all of a
	// key's algorithms and limits in one Cluster slot, so that one script
	// call decides them together; a prefix should hold no '{'.
	Prefix string
	// Now pins the clock, for tests only. Nil means Redis's own clock
	// (TIME), which keeps sidecars with skewed clocks in agreement.
	Now func() time.Time
	// Log gets the line that says whether batches call a Redis function
	// or EVALSHA (functions.go). Nil means slog.Default().
	Log *slog.Logger
}

// Store decides requests on Redis. It is safe for concurrent use.
type Store struct {
	client  redis.UniversalClient
	cluster bool // client is a *redis.ClusterClient: group batches by master, or by slot
	prefix  string
	now     func() time.Time
	bufs    sync.Pool // *buffers
	pipe    *pipe     // nil on Cluster
	// masters holds a pipe per Cluster master (masters.go); nil off
	// Cluster, and where a pipe cannot stand in for go-redis.
	masters *masterPipes
	// functions is set while batches call the batch library (FCALL);
	// refusedAt is when Redis last refused to load it (UnixNano, 0:
	// never, or loaded since), and retrying is set while a retry runs
	// (functions.go).
	functions, retrying atomic.Bool
	refusedAt           atomic.Int64
	// reloading holds the pipes with a FUNCTION LOAD under way: the
	// batches in flight when a master lost the library all meet its
	// absence, and one load is enough.
	reloading sync.Map // *pipe → struct{}
	log       *slog.Logger
	// clock is the offset to Redis's clock where no pipe keeps one: a
	// standalone Redis reached through go-redis (clock.go).
	clock redisClock
	// late counts the batch calls Redis started after their deadline, and
	// so skipped; overdue those it ran after their callers had been
	// answered without them (deadline.go). lastNote rate-limits their log
	// line (UnixNano).
	late, overdue atomic.Uint64
	lastNote      atomic.Int64
}

var _ engine.Store = (*Store)(nil)

// New returns a Store over cfg.Client. It does not talk to Redis.
func New(cfg Config) (*Store, error) {
	switch cfg.Client.(type) {
	case nil:
		return nil, errors.New("upstream: Config.Client is required")
	case *redis.Ring:
		return nil, errors.New("upstream: a *redis.Ring shards keys on the client, which one script call cannot follow; use a Redis Cluster")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = redisurl.DefaultPrefix
	}
	_, cluster := cfg.Client.(*redis.ClusterClient)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Store{client: cfg.Client, cluster: cluster, prefix: cfg.Prefix, now: cfg.Now, log: cfg.Log}
	if cc, ok := cfg.Client.(*redis.ClusterClient); ok {
		s.masters = newMasterPipes(s, cc)
	} else if s.pipe = newPipe(cfg.Client); s.pipe != nil {
		s.pipe.stray = s.strayReply
	}
	return s, nil
}

// Key returns the Redis key that holds key's state under algorithm a.
//
// A key's last part, the algorithm's short name, also names the layout of
// the state it holds: state format 1, what every Sluice so far has
// written. A change of layout gets a new name (say "gcra2"), so that a
// sidecar of one version never reads state that one of another wrote in
// a layout it does not know; see the README's "Rolling updates".
func (s *Store) Key(key string, a engine.Algorithm) string {
	return s.keyString(keyRef{key: key, alg: a})
}

// LimitKey returns the Redis key that holds the state of limit l of a
// multi-limit request on key: after the hash tag, the limit's name, then
// its algorithm as in Key. A name holds no brace or colon
// (engine.ValidateLimitName), so no two (key, name) pairs and no
// single-limit key ever meet.
func (s *Store) LimitKey(key string, l engine.NamedLimit) string {
	return s.keyString(keyRef{key: key, name: l.Name, alg: l.Limit.Algorithm})
}

// keyRef is a Redis key in its parts: Key's (name empty) or LimitKey's,
// not yet joined. A batch's keys are written out only as they are sent,
// so that the pipe sends them without making a string of each.
type keyRef struct {
	key  string // the request's key
	name string // a multi-limit request's limit's name
	alg  engine.Algorithm
}

// keyString is k joined: what Key or LimitKey returns. A peer window's
// key is the peer's own, stored as it is (engine/peer.go).
func (s *Store) keyString(k keyRef) string {
	if k.alg == engine.PeerWindow {
		return k.key
	}
	if k.name == "" {
		return s.prefix + "{" + k.key + "}:" + k.alg.Short()
	}
	return s.prefix + "{" + k.key + "}:" + k.name + ":" + k.alg.Short()
}

// appendKey appends k joined, as a RESP bulk string.
func (s *Store) appendKey(buf []byte, k keyRef) []byte {
	if k.alg == engine.PeerWindow {
		return redcon.AppendBulkString(buf, k.key)
	}
	short := k.alg.Short()
	n := len(s.prefix) + len(k.key) + 3 + len(short)
	if k.name != "" {
		n += len(k.name) + 1
	}
	buf = append(buf, '$')
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, "\r\n"...)
	buf = append(buf, s.prefix...)
	buf = append(buf, '{')
	buf = append(buf, k.key...)
	buf = append(buf, "}:"...)
	if k.name != "" {
		buf = append(buf, k.name...)
		buf = append(buf, ':')
	}
	buf = append(buf, short...)
	return append(buf, "\r\n"...)
}

// keyOf is the Redis key of request r's first (or only) limit: all of a
// request's keys share its slot.
func (s *Store) keyOf(r *engine.Request) string {
	if r.Multi() {
		return s.LimitKey(r.Key, r.Limits[0])
	}
	return s.Key(r.Key, r.Limit.Algorithm)
}

// call is one script call: a part of a batch (or one request) and where its
// replies go.
type call struct {
	script *lua.Script
	keys   []keyRef
	batch  lua.BatchCall // the arguments after the keys
	reqs   []int         // indices into the caller's reqs, in order
	cmd    *redis.Cmd
}

// buffers is one Decide's scratch space, pooled so that the hot path
// reuses it.
type buffers struct {
	valid []int // indices of the requests to send, in order
	// Cluster only: the valid requests regrouped by slot (order), each
	// one's slot, and slot → group number.
	slotted []slotted
	order   []int
	slots   []uint16
	group   map[uint16]int

	keys  []keyRef
	calls []call
	// The calls' arguments (lua.BatchCall), each call's a part of these.
	wireLimits  []lua.Limit
	runs        []lua.Run
	keyRuns     []lua.KeyRun
	multis      []lua.Multi
	multiLimits []int64
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
	// Pipe only: the batch's command as written, what its reply
	// completes, and gotReply bound to these buffers.
	out     []byte
	sending sending
	got     func(reply any, err error)
	// now is the pinned clock (Config.Now) of the batch, for tests.
	now int64
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

func (s *Store) buffers() *buffers {
	if b, ok := s.bufs.Get().(*buffers); ok {
		return b
	}
	b := &buffers{group: map[uint16]int{}, limitIndex: map[engine.Limit]int64{}, keyGroup: map[keyRef]int{}, multiKey: map[string]int{}}
	b.got = func(reply any, err error) { s.gotReply(b, reply, err) }
	return b
}

func (s *Store) release(b *buffers) {
	clear(b.keys)
	clear(b.calls)
	clear(b.wireLimits)
	b.valid, b.slotted, b.slots, b.order = b.valid[:0], b.slotted[:0], b.slots[:0], b.order[:0]
	b.keys, b.calls = b.keys[:0], b.calls[:0]
	b.wireLimits, b.runs, b.keyRuns, b.multis, b.multiLimits = b.wireLimits[:0], b.runs[:0], b.keyRuns[:0], b.multis[:0], b.multiLimits[:0]
	clear(b.group)
	clear(b.limitIndex)
	b.limits, b.reqLimit, b.multi, b.multiBy = b.limits[:0], b.reqLimit[:0], b.multi[:0], b.multiBy[:0]
	b.reply.Decisions = b.reply.Decisions[:0]
	clear(b.keyGroup)
	clear(b.multiKey)
	b.grouped, b.groupSize, b.reqGroup, b.groupAt = b.grouped[:0], b.groupSize[:0], b.reqGroup[:0], b.groupAt[:0]
	s.bufs.Put(b)
}

// Decide decides reqs into res and waits: Submit for a caller that may
// block (Cluster's round trips, tools, tests). Each request is validated
// first; an invalid one gets its own error and is not sent. A Redis error that only
// some requests met (a key of the wrong type) is theirs alone; the returned
// error means the round trip failed (ctx done, Redis unreachable or unable
// to serve), and then no result may be trusted.
//
// Off Cluster the batch goes on the store's pipe, as Submit sends it, by
// ctx's deadline or else the client's read timeout; ctx's cancellation
// alone does not end the wait, since the reply still comes to res.
func (s *Store) Decide(ctx context.Context, reqs []engine.Request, res []engine.Result) error {
	if s.pipe != nil || s.masters != nil {
		return s.decideOnPipe(ctx, reqs, res)
	}
	return s.decideBySlot(ctx, reqs, res)
}

// decideBySlot is Decide through go-redis: on Cluster one call per hash
// slot, with declared keys, so that Redis redirects a call whose slot
// moved and go-redis follows (see cluster.go). It decides the requests a
// master's call met a key it does not serve (masters.go), and every batch
// where no pipe can stand in for go-redis.
func (s *Store) decideBySlot(ctx context.Context, reqs []engine.Request, res []engine.Result) error {
	b := s.buffers()
	defer s.release(b)
	now, ok := s.prepare(b, reqs, res)
	if !ok {
		return nil
	}
	s.stampCalls(ctx, b.calls, reqs)
	sent := time.Now()
	s.run(ctx, b.calls)
	if s.cluster {
		s.settle(ctx, b, reqs, now)
	} else if len(b.calls) == 1 {
		if t, ok := lua.ReplyTime(b.calls[0].cmd.Val()); ok {
			s.clock.observe(sent, time.Now(), t)
		}
	}
	for k := range b.calls {
		c := &b.calls[k]
		reply, err := c.cmd.Slice()
		if err := s.collect(b, c, reqs, res, reply, err); err != nil {
			s.reloadSlots(ctx)
			return err
		}
	}
	return nil
}

// prepare validates reqs, failing the invalid ones in res, and plans the
// calls that decide the others. It returns the clock argument the calls
// take (nil: Redis's own), and false when no request is left to send.
func (s *Store) prepare(b *buffers, reqs []engine.Request, res []engine.Result) (now *int64, ok bool) {
	if now, ok = s.prepareArgs(b, reqs, res); ok {
		s.plan(b, reqs, now)
	}
	return now, ok
}

// prepareArgs is prepare but for the plan: it validates reqs and makes
// room for the calls' arguments.
func (s *Store) prepareArgs(b *buffers, reqs []engine.Request, res []engine.Result) (now *int64, ok bool) {
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			res[i] = engine.Result{Err: err}
			continue
		}
		b.valid = append(b.valid, i)
	}
	if len(b.valid) == 0 {
		return nil, false
	}
	if s.now != nil {
		b.now = s.now().UnixMicro()
		now = &b.now
	}
	return now, true
}

// reloadSlots asks a Cluster client to reload its slot map after a failed
// round trip. go-redis reloads it on MOVED, but a master that died answers
// nothing, so its slots stay mapped to it until the periodic reload (60s by
// default), long after its replica took over. go-redis runs one reload at a
// time, at most one every 200ms, in the background.
func (s *Store) reloadSlots(ctx context.Context) {
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		if s.masters != nil {
			s.masters.forget()
		}
		cc.ReloadState(ctx)
	}
}

// plan turns the valid requests into calls.
func (s *Store) plan(b *buffers, reqs []engine.Request, now *int64) {
	order := b.valid
	if s.cluster {
		order = s.bySlot(b, reqs)
	}
	// One call per run of order that shares a slot: the whole batch unless
	// on Cluster.
	for start := 0; start < len(order); {
		end := len(order)
		if s.cluster {
			end = start + 1
			for end < len(order) && b.slots[end] == b.slots[start] {
				end++
			}
		}
		s.appendCall(b, reqs, order[start:end], now)
		start = end
	}
}

// appendCall appends to b.calls one call of the batch script that decides
// the requests idx, which share a slot on Cluster.
func (s *Store) appendCall(b *buffers, reqs []engine.Request, idx []int, now *int64) {
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
	s.group(b, reqs, single)
	b.groupMulti(reqs)
	singles := len(b.grouped) - g
	b.grouped = append(b.grouped, b.multi...)
	for _, i := range b.multi {
		for _, l := range reqs[i].Limits {
			b.keys = append(b.keys, keyRef{key: reqs[i].Key, name: l.Name, alg: l.Limit.Algorithm})
		}
	}
	batch := b.appendBatchCall(reqs, b.grouped[g:g+singles], b.grouped[g+singles:])
	if now != nil {
		batch.Now, batch.Pinned = *now, true
	}
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
func (s *Store) bySlot(b *buffers, reqs []engine.Request) []int {
	for _, i := range b.valid {
		r := &reqs[i]
		slot := Slot(s.keyOf(r))
		g, ok := b.group[slot]
		if !ok {
			g = len(b.group)
			b.group[slot] = g
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
func (s *Store) group(b *buffers, reqs []engine.Request, idx []int) {
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
func (b *buffers) groupMulti(reqs []engine.Request) {
	if len(b.multi) < 2 {
		return
	}
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
func (b *buffers) appendBatchCall(reqs []engine.Request, idx, multi []int) lua.BatchCall {
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
	l0, r0, k0, m0, ml0 := len(b.wireLimits), len(b.runs), len(b.keyRuns), len(b.multis), len(b.multiLimits)
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
	return lua.BatchCall{
		Limits:      b.wireLimits[l0:len(b.wireLimits):len(b.wireLimits)],
		Runs:        b.runs[r0:len(b.runs):len(b.runs)],
		KeyRuns:     b.keyRuns[k0:len(b.keyRuns):len(b.keyRuns)],
		Multis:      b.multis[m0:len(b.multis):len(b.multis)],
		MultiLimits: b.multiLimits[ml0:len(b.multiLimits):len(b.multiLimits)],
	}
}

// run sends the calls in one round trip, then sends again as EVAL, in a
// second one, those that met NOSCRIPT or a missing function. Errors stay
// in each call's cmd; a missing function is loaded again first.
func (s *Store) run(ctx context.Context, calls []call) {
	s.send(ctx, calls, func(p redis.Cmdable, c *call) *redis.Cmd {
		name, ref := s.scriptRef(c.script)
		return s.eval(ctx, p, name, ref, c)
	})
	if !hasNoScript(calls) {
		return
	}
	// Send every call again that met NOSCRIPT, in order; EVAL loads its
	// script into the node's cache for the next EVALSHA.
	retry := make([]call, 0, len(calls))
	noFunction := false
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			retry = append(retry, c)
			noFunction = noFunction || isNoFunction(c.cmd.Err())
		}
	}
	if noFunction {
		s.reload(ctx)
	}
	s.send(ctx, retry, func(p redis.Cmdable, c *call) *redis.Cmd {
		return s.eval(ctx, p, "EVAL", c.script.Source, c)
	})
	for k, j := 0, 0; k < len(calls); k++ {
		if isNoScript(calls[k].cmd.Err()) {
			calls[k].cmd = retry[j].cmd
			j++
		}
	}
}

// send issues one command per call: alone when there is one, else in one
// pipeline. Errors stay in each call's cmd.
func (s *Store) send(ctx context.Context, calls []call, issue func(redis.Cmdable, *call) *redis.Cmd) {
	if len(calls) == 1 {
		calls[0].cmd = issue(s.client, &calls[0])
		return
	}
	pipe := s.client.Pipeline()
	for k := range calls {
		calls[k].cmd = issue(pipe, &calls[k])
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
}

func hasNoScript(calls []call) bool {
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			return true
		}
	}
	return false
}

// isNoScript says whether err is Redis's answer to a call of a script it
// does not have: NOSCRIPT to EVALSHA, or an FCALL's missing function
// (functions.go). EVAL runs the script either way.
func isNoScript(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "NOSCRIPT") || isNoFunction(err))
}

// unavailable lists the prefixes of Redis errors that mean the server
// cannot serve at all now, rather than that a request met a problem of its
// own: they fail the batch, so that the caller falls back as its policy
// says. A MOVED or ASK left is one go-redis did not follow in time: the
// script did not run. Nor did it after a protocol error (an
// unauthenticated client's long command), after which Redis closes the
// connection.
var unavailable = []string{"LOADING", "BUSY", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "MASTERDOWN", "READONLY", "NOAUTH", "WRONGPASS", "NOPERM", "NOSCRIPT", "OOM", "Protocol error"}

// collect turns one call's reply, or the error it met, into results. It returns an error only
// when the call failed as a whole in a way that fails the batch.
func (s *Store) collect(b *buffers, c *call, reqs []engine.Request, res []engine.Result, reply []any, err error) error {
	if err != nil {
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return fmt.Errorf("upstream: eval %s: %w", c.script.Name, err)
		}
		for _, p := range unavailable {
			if redis.HasErrorPrefix(err, p) {
				return fmt.Errorf("upstream: eval %s: %w", c.script.Name, err)
			}
		}
		// The server ran the script and it failed: every request of this
		// call meets the error.
		for _, i := range c.reqs {
			res[i] = engine.Result{Err: fmt.Errorf("upstream: eval %s: %s: %w", c.script.Name, s.keyOf(&reqs[i]), err)}
		}
		return nil
	}
	return s.collectBatch(b, c, reqs, res, reply)
}

// collectBatch reads the batch script's reply (lua.BatchReply) into the
// results of c's requests.
func (s *Store) collectBatch(b *buffers, c *call, reqs []engine.Request, res []engine.Result, reply []any) error {
	if err := b.reply.Decode(reply, &c.batch); err != nil {
		return fmt.Errorf("upstream: eval %s: %w", c.script.Name, err)
	}
	if b.reply.Late {
		s.noteLate()
		return fmt.Errorf("upstream: eval %s: %w", c.script.Name, errLate)
	}
	k := 0
	for _, i := range c.reqs {
		r := &reqs[i]
		if !r.Multi() {
			v := &b.reply.Decisions[k]
			k++
			if v.Allowed < 0 {
				res[i] = engine.Result{Err: fmt.Errorf("upstream: eval %s: %s: %w", c.script.Name, s.Key(r.Key, r.Limit.Algorithm), b.reply.Err(*v))}
				continue
			}
			res[i] = engine.Result{Decision: decision(v, r.Limit)}
			continue
		}
		var parts [engine.MaxLimits]engine.Decision
		n := len(r.Limits)
		res[i] = engine.Result{}
		for j := range n {
			v := &b.reply.Decisions[k+j]
			if v.Allowed < 0 {
				res[i].Err = fmt.Errorf("upstream: eval %s: %s: %w", c.script.Name, s.LimitKey(r.Key, r.Limits[j]), b.reply.Err(*v))
				break
			}
			parts[j] = decision(v, r.Limits[j].Limit)
		}
		k += n
		if res[i].Err == nil {
			copy(r.Detail, parts[:n])
			res[i].Decision = engine.Combine(parts[:n])
		}
	}
	return nil
}

// decision is one reply under limit l.
func decision(v *lua.Decision, l engine.Limit) engine.Decision {
	return engine.Decision{
		Allowed:    v.Allowed == 1,
		Limit:      l.Capacity(),
		Remaining:  v.Remaining,
		RetryAfter: engine.Micros(v.RetryAfter),
		ResetAfter: engine.Micros(v.ResetAfter),
		Delay:      engine.Micros(v.Delay),
	}
}

// Reset implements engine.Store: it deletes key's state under every
// algorithm, its leases and each of limits' state, in one command, then announces the reset on the channel
// ResetChannel, so that every sidecar drops what it remembers of the key
// (see Subscribe).
func (s *Store) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	keys := make([]string, len(engine.Algorithms), len(engine.Algorithms)+1+len(limits))
	for k, a := range engine.Algorithms {
		keys[k] = s.Key(key, a)
	}
	keys = append(keys, s.LeaseKey(key))
	for _, l := range limits {
		keys = append(keys, s.LimitKey(key, l))
	}
	if s.cluster && !sameSlot(keys) {
		// Only a key whose hash tag is empty (it starts with '}') spreads
		// its algorithms over slots; delete them one by one.
		pipe := s.client.Pipeline()
		for _, k := range keys {
			pipe.Del(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("upstream: reset %q: %w", key, err)
		}
	} else if err := s.client.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("upstream: reset %q: %w", key, err)
	}
	if err := s.client.Publish(ctx, s.ResetChannel(), key).Err(); err != nil {
		return fmt.Errorf("upstream: announce the reset of %q: %w", key, err)
	}
	return nil
}

// ResetChannel is the pub/sub channel resets are announced on: the prefix
// and "reset", so that sidecars sharing a prefix share resets.
func (s *Store) ResetChannel() string { return s.prefix + "reset" }

// Subscribe calls forget with each key that any sidecar resets, until ctx
// ends. go-redis reconnects the subscription by itself when Redis goes and
// comes back; a reset announced while it was away is missed, and the
// refusal it would have dropped simply runs out at its retry-after.
func (s *Store) Subscribe(ctx context.Context, forget func(key string)) {
	sub := s.client.Subscribe(ctx, s.ResetChannel())
	defer sub.Close()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			forget(m.Payload)
		}
	}
}

func sameSlot(keys []string) bool {
	for _, k := range keys[1:] {
		if Slot(k) != Slot(keys[0]) {
			return false
		}
	}
	return true
}
