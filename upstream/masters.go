package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/evloop"
)

// Cluster by master. With many keys almost every hash slot of a batch
// holds one request, so a call per slot is a call per request: Redis's
// fixed cost of a script call, paid per decision. A batch is grouped
// instead by the master that serves each key (go-redis's slot map), and
// each master's part is one call of the batch script, which the flag
// allow-cross-slot-keys lets reach keys of every slot that master serves;
// the keys travel in ARGV (see lua/batch.lua), since a call may declare
// one slot's keys only. Each call goes on that master's own pipe (one
// pipelined connection per master, pipe.go), read by the event loop
// UseLoop gives, as the standalone store's: no goroutine on the decision
// path. A TLS connection (rediss+cluster://), or a store whose loop has
// ended or was never given (--io-loops 0), has a reader goroutine per
// master's connection instead, as the standalone pipe has.
//
// The map can be behind: a slot moved, or migrating, and a key already
// gone to its target. Inside a script such a key shows only as "Script
// attempted to access a non local key", with no target; its request
// fails alone before anything of it is written (batch.lua reads every key
// of a request before it writes). Those requests alone are sent again,
// through go-redis, as calls of one slot with declared keys (Decide's
// slot path, cluster.go), so that Redis answers MOVED, ASK or TRYAGAIN
// and go-redis follows; the slot map is reloaded. A request that the
// script decided is never sent again.

// masterPipes is one pipe per Cluster master, by address.
type masterPipes struct {
	cc    *redis.ClusterClient
	stray func(reply any) // each pipe's (pipe.stray)

	mu     sync.Mutex
	pipes  map[string]*pipe // guarded by mu
	loop   *evloop.Loop     // guarded by mu
	closed bool             // guarded by mu
}

// errNoPipe: the master's client is one a pipe cannot stand in for.
var errNoPipe = errors.New("upstream: no pipe for this master")

// newMasterPipes returns the pipes of client's masters, or nil when the
// client's connections are ones a pipe cannot stand in for (a streaming
// credentials provider): the store then sends through go-redis.
func newMasterPipes(cc *redis.ClusterClient, stray func(reply any)) *masterPipes {
	if cc.Options().StreamingCredentialsProvider != nil {
		return nil
	}
	return &masterPipes{cc: cc, stray: stray, pipes: map[string]*pipe{}}
}

// of returns the pipe of the master that serves key, by go-redis's slot
// map, loading the map first if it has none yet.
func (m *masterPipes) of(ctx context.Context, key string) (*pipe, error) {
	node, err := m.cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("upstream: the master of %s: %w", key, err)
	}
	opt := node.Options()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errPipeClosed
	}
	p := m.pipes[opt.Addr]
	if p == nil {
		if p = pipeOver(opt); p == nil {
			return nil, errNoPipe
		}
		p.stray = m.stray
		if m.loop != nil {
			p.useLoop(m.loop)
		}
		m.pipes[opt.Addr] = p
	}
	return p, nil
}

func (m *masterPipes) useLoop(l *evloop.Loop) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loop = l
	for _, p := range m.pipes {
		p.useLoop(l)
	}
}

func (m *masterPipes) close() {
	m.mu.Lock()
	m.closed = true
	pipes := m.pipes
	m.pipes = nil
	m.mu.Unlock()
	for _, p := range pipes {
		p.close()
	}
}

// submitByMaster is Submit on Cluster: one call per master, each on its
// master's pipe.
func (s *Store) submitByMaster(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	if deadline.IsZero() {
		deadline = time.Now().Add(readTimeout(s.client))
	}
	b := s.buffers()
	now, ok := s.prepareArgs(b, reqs, res)
	if !ok {
		s.release(b)
		done(nil)
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := s.byMaster(ctx, b, reqs)
	cancel()
	if err != nil {
		s.reloadSlots(context.Background())
		s.release(b)
		done(err)
		return
	}
	for start := 0; start < len(b.order); {
		end := start + 1
		for end < len(b.order) && b.slotted[end].group == b.slotted[start].group {
			end++
		}
		s.appendCall(b, reqs, b.order[start:end], now)
		start = end
	}
	b.sending = sending{reqs: reqs, res: res, done: done, deadline: deadline}
	for len(b.gots) < len(b.calls) {
		k := len(b.gots)
		b.gots = append(b.gots, func(reply any, err error) { s.gotFromMaster(b, k, reply, err) })
	}
	b.callReply = slices.Grow(b.callReply[:0], len(b.calls))[:len(b.calls)]
	b.callErr = slices.Grow(b.callErr[:0], len(b.calls))[:len(b.calls)]
	b.callEvaled = slices.Grow(b.callEvaled[:0], len(b.calls))[:len(b.calls)]
	// One more than the calls, taken back once all are sent: a reply that
	// comes (or fails) while later calls are still being sent must not
	// complete the batch under the loop below.
	b.pending.Store(int32(len(b.calls)) + 1)
	for k := range b.calls {
		c := &b.calls[k]
		name, ref := s.scriptRef(c.script)
		b.out = s.appendUndeclared(b.out[:0], name, ref, c)
		b.masters[k].sendCall(b.out, deadline, b.gots[k])
	}
	if b.pending.Add(-1) == 0 {
		s.finishByMaster(b)
	}
}

// readTimeout is the client's read timeout (go-redis's default is 3s):
// how long a batch may take when its caller set no deadline.
func readTimeout(client redis.UniversalClient) time.Duration {
	if cc, ok := client.(*redis.ClusterClient); ok && cc.Options().ReadTimeout > 0 {
		return cc.Options().ReadTimeout
	}
	return 3 * time.Second
}

// byMaster orders the valid requests by the master that serves each: the
// masters in order of first appearance, each one's requests in request
// order. b.order holds them, b.slotted[k].group the master of the k-th
// (an index into b.masters, the masters' pipes); the k-th master's
// requests become the k-th call.
func (s *Store) byMaster(ctx context.Context, b *buffers, reqs []engine.Request) error {
	for _, i := range b.valid {
		p, err := s.masters.of(ctx, s.keyOf(&reqs[i]))
		if err != nil {
			return err
		}
		g := slices.Index(b.masters, p) // a few masters: a scan beats a map
		if g < 0 {
			g = len(b.masters)
			b.masters = append(b.masters, p)
		}
		b.slotted = append(b.slotted, slotted{group: g, req: i})
	}
	slices.SortStableFunc(b.slotted, func(x, y slotted) int { return x.group - y.group })
	for _, e := range b.slotted {
		b.order = append(b.order, e.req)
	}
	return nil
}

// gotFromMaster takes the reply to call k of a batch sent by master. A
// master that lost its scripts gets the call again as EVAL, which loads
// the script for the next EVALSHA; one that lost the batch library gets
// FUNCTION LOAD first, for the next FCALL.
func (s *Store) gotFromMaster(b *buffers, k int, reply any, err error) {
	if v, ok := reply.(replyError); ok && err == nil && isNoScript(v) && !b.callEvaled[k] {
		b.callEvaled[k] = true
		c := &b.calls[k]
		if isNoFunction(v) {
			s.reloadOn(b.masters[k], b.sending.deadline)
		}
		out := s.appendUndeclared(nil, "EVAL", c.script.Source, c)
		b.masters[k].sendCall(out, b.sending.deadline, b.gots[k])
		return
	}
	b.callReply[k], b.callErr[k] = reply, err
	if b.pending.Add(-1) == 0 {
		s.finishByMaster(b)
	}
}

// finishByMaster reads every call's reply, once all are in, and sends
// again the requests that met a key their master does not serve.
func (s *Store) finishByMaster(b *buffers) {
	x := b.sending
	var err error
	for k := range b.calls {
		list, cerr := replyList(b.callReply[k], b.callErr[k])
		if cerr = s.collect(b, &b.calls[k], x.reqs, x.res, list, cerr); cerr != nil {
			if redis.HasErrorPrefix(cerr, "READONLY") || redis.HasErrorPrefix(cerr, "MASTERDOWN") {
				// A failover made the master a replica: dial again, to the
				// master the reloaded map names.
				b.masters[k].drop(cerr)
			}
			if err == nil {
				err = cerr
			}
		}
	}
	var moved []int
	if err == nil {
		for _, i := range b.valid {
			if notHere(x.res[i].Err) {
				moved = append(moved, i)
			}
		}
	}
	b.sending = sending{}
	s.release(b)
	if err != nil || len(moved) > 0 {
		s.reloadSlots(context.Background())
	}
	if err != nil || len(moved) == 0 {
		x.done(err)
		return
	}
	// The slot path blocks on go-redis: off the caller's loop, which only
	// a slot that moves ever brings here.
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), x.deadline)
		defer cancel()
		x.done(s.decideAgain(ctx, x.reqs, x.res, moved))
	}()
}

// decideAgain decides the requests idx of reqs alone, by slot with
// declared keys, through go-redis, which follows the redirects their
// masters answer.
func (s *Store) decideAgain(ctx context.Context, reqs []engine.Request, res []engine.Result, idx []int) error {
	sub := make([]engine.Request, len(idx))
	subRes := make([]engine.Result, len(idx))
	for k, i := range idx {
		sub[k] = reqs[i] // a multi-limit request's Detail still points at the caller's
	}
	if err := s.decideBySlot(ctx, sub, subRes); err != nil {
		return err
	}
	for k, i := range idx {
		res[i] = subRes[k]
	}
	return nil
}

// notHere tells whether a request's error is a key its master does not
// serve (now): what a script sees of MOVED and ASK, or a cluster down.
// The request was not decided; declared, Redis redirects it, or says
// CLUSTERDOWN, which fails its batch.
func notHere(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "Script attempted to access a non local key") ||
		strings.Contains(msg, "Script attempted to execute a command while the cluster is down")
}

// replyList is a reply read on a pipe as collect takes it: the batch
// script's array, or the error.
func replyList(reply any, err error) ([]any, error) {
	if err != nil {
		return nil, err
	}
	switch v := reply.(type) {
	case []any:
		return v, nil
	case replyError:
		return nil, v
	}
	return nil, fmt.Errorf("the reply is a %T, not an array", reply)
}

// appendUndeclared appends call c as a RESP command whose keys are not
// declared: no keys, and ARGV the number of keys, the keys, then c's
// arguments (see lua/batch.lua).
func (s *Store) appendUndeclared(buf []byte, name, body string, c *call) []byte {
	buf = redcon.AppendArray(buf, 4+len(c.keys)+c.batch.Args())
	buf = redcon.AppendBulkString(buf, name)
	buf = redcon.AppendBulkString(buf, body)
	buf = appendBulkInt(buf, 0)
	buf = appendBulkInt(buf, int64(len(c.keys)))
	for _, k := range c.keys {
		buf = s.appendKey(buf, k)
	}
	return c.batch.Append(buf)
}
