package upstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redispipe"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/lua"
)

// The send path. Every batch goes one way: Submit validates it, plans it
// (plan.go), hands it to a sender, and decodes the replies (collect).
// Where it goes is the sender's business alone:
//
//   - a pipe (package redispipe): standalone and Sentinel Redis, and each
//     Cluster master, whose batch is one call with its keys undeclared so
//     that it may span every slot the master serves (lua/batch.lua);
//   - go-redis (goredis.go), which blocks, so on a goroutine: a client no
//     pipe can stand in for (a streaming credentials provider), and the
//     requests a master's call found on a slot that moved, sent again one
//     call per slot with declared keys so that Redis redirects them.

// A sender sends a planned batch's calls by b.deadline and completes the
// batch once (finish), with every call decoded, without waiting for
// Redis on the caller's goroutine.
type sender func(b *batch)

var _ engine.Store = (*Store)(nil)

// Submit implements engine.Store. On standalone and Sentinel Redis the
// batch goes on the store's pipe, written by the caller itself, and done
// runs by deadline (zero: the client's read timeout). On Cluster each
// master's part goes on that master's pipe (Shards), and a batcher with
// Shards sends each master's batches to that master's store directly.
func (s *Store) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	if s.masters != nil || anyDurable(reqs) {
		engine.SubmitSplit(s.shardOf, reqs, res, deadline, done)
		return
	}
	s.submit(s.send, s.cluster, reqs, res, deadline, done)
}

// anyDurable tells whether a request of reqs waits for replicas, and so
// goes to a shard of its own.
func anyDurable(reqs []engine.Request) bool {
	for i := range reqs {
		if reqs[i].Durable != engine.DurableNone {
			return true
		}
	}
	return false
}

// submit is the one path to Redis. It validates each request, the one
// check on the way to Redis (a door's requests were checked by the
// service already, but the store keeps engine.Store's contract for every
// caller), fails the invalid ones alone, plans the others (one call, or
// one per slot when bySlot), and hands the batch to send.
func (s *Store) submit(send sender, bySlot bool, reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	b := s.batches.Get().(*batch)
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			res[i] = engine.Result{Err: err}
			continue
		}
		b.valid = append(b.valid, i)
	}
	if len(b.valid) == 0 {
		s.release(b)
		done(nil)
		return
	}
	if s.now != nil {
		b.now, b.pinned = s.now().UnixMicro(), true
	}
	b.send, b.reqs, b.res, b.deadline, b.done = send, reqs, res, deadline, done
	if bySlot {
		s.planBySlot(b, reqs)
	} else {
		b.appendCall(reqs, b.valid)
	}
	send(b)
}

// finish completes b with err and puts it back in the pool.
func (s *Store) finish(b *batch, err error) {
	done := b.done
	s.release(b)
	done(err)
}

// onPipe is the sender of pipe p: the batch's one call, its keys
// declared, or undeclared for a Cluster master's.
func (s *Store) onPipe(p *redispipe.Pipe, undeclared bool) sender {
	return func(b *batch) {
		if b.deadline.IsZero() {
			b.deadline = time.Now().Add(p.Timeout())
		}
		b.pipe, b.undeclared = p, undeclared
		b.out = s.encode(b.out[:0], &b.calls[0], undeclared, b.evaled)
		p.SendStamped(b.out, b.deadline, b.got)
	}
}

// encode appends call c as a RESP command: FCALL of the batch function,
// or EVALSHA of its script, or EVAL of its source once Redis said it
// lost it (evaled); then its keys, declared, or undeclared (no keys, and
// ARGV the number of keys, the keys: see lua/batch.lua); then its
// arguments. Each key is written from its parts, with no string made.
func (s *Store) encode(buf []byte, c *call, undeclared, evaled bool) []byte {
	name, ref := s.scriptRef(c.script)
	if evaled {
		name, ref = "EVAL", c.script.Source
	}
	n := 3 + len(c.keys) + c.batch.Args()
	if undeclared {
		n++
	}
	buf = redcon.AppendArray(buf, n)
	buf = redcon.AppendBulkString(buf, name)
	buf = redcon.AppendBulkString(buf, ref)
	if undeclared {
		buf = resp.AppendBulkInt(buf, 0)
	}
	buf = resp.AppendBulkInt(buf, int64(len(c.keys)))
	for _, k := range c.keys {
		if k.alg == engine.PeerWindow {
			buf = redcon.AppendBulkString(buf, k.key)
			continue
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
		buf = append(buf, "\r\n"...)
	}
	return c.batch.Append(buf)
}

// gotReply completes a batch sent on a pipe with its reply. A Redis that
// lost its scripts gets the call again as EVAL, which loads the script for
// the next EVALSHA; one that lost the batch library gets FUNCTION LOAD
// first, for the next FCALL.
func (s *Store) gotReply(b *batch, reply any, err error) {
	c := &b.calls[0]
	var list []any
	if err == nil {
		switch v := reply.(type) {
		case []any:
			list = v
		case resp.ReplyError:
			if isNoScript(v) && !b.evaled {
				b.evaled = true
				if isNoFunction(v) {
					s.reloadOn(b.pipe, b.deadline)
				}
				b.send(b)
				if b.durable != engine.DurableNone {
					s.replied(b) // this call's reply; the sender awaits the next
				}
				return
			}
			err = v
		default:
			err = fmt.Errorf("the reply is a %T, not an array", reply)
		}
	}
	err = s.collect(b, c, list, err)
	if redis.HasErrorPrefix(err, "READONLY") || redis.HasErrorPrefix(err, "MASTERDOWN") {
		// A failover (Sentinel's or Cluster's) made the master a replica:
		// dial again, to the master the reloaded map names.
		b.pipe.Drop(err)
	}
	if !b.undeclared {
		s.complete(b, err)
		return
	}
	var moved []int
	if err == nil {
		for _, i := range c.reqs {
			if notHere(b.res[i].Err) {
				moved = append(moved, i)
			}
		}
	}
	if err != nil || len(moved) > 0 {
		s.reloadSlots(context.Background())
	}
	if len(moved) == 0 {
		s.complete(b, err)
		return
	}
	if b.durable != engine.DurableNone {
		// Sent again through go-redis, they would have no WAIT after
		// them: the batch gets its failure mode's answers.
		s.complete(b, fmt.Errorf("upstream: %d requests of a durable batch met a slot that moved: %w", len(moved), engine.ErrNotDurable))
		return
	}
	reqs, res, deadline, done := b.reqs, b.res, b.deadline, b.done
	s.release(b)
	s.resend(reqs, res, moved, deadline, done)
}

// resend decides again the requests idx of reqs, which a master's call
// found on a slot it no longer serves (masters.go): through go-redis, one
// call per slot with declared keys, so that Redis redirects them and
// go-redis follows. They were validated on their way to the master.
func (s *Store) resend(reqs []engine.Request, res []engine.Result, idx []int, deadline time.Time, done func(error)) {
	sub := make([]engine.Request, len(idx))
	subRes := make([]engine.Result, len(idx))
	for k, i := range idx {
		sub[k] = reqs[i] // a multi-limit request's Detail still points at the caller's
	}
	b := s.batches.Get().(*batch)
	for k := range sub {
		b.valid = append(b.valid, k)
	}
	if s.now != nil {
		b.now, b.pinned = s.now().UnixMicro(), true
	}
	b.send, b.reqs, b.res, b.deadline = s.goRedis, sub, subRes, deadline
	b.done = func(err error) {
		if err == nil {
			for k, i := range idx {
				res[i] = subRes[k]
			}
		}
		done(err)
	}
	s.planBySlot(b, sub)
	s.goRedis(b)
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
var unavailable = []string{"LOADING", "BUSY", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "MASTERDOWN", "READONLY", "NOAUTH", "WRONGPASS", "NOPERM", "NOSCRIPT", "OOM", "NOREPLICAS", "Protocol error"}

// collect decodes one call's reply, or the error it met, into its
// requests' results: both senders' replies come here. It returns an
// error only when the call failed as a whole in a way that fails the
// batch.
func (s *Store) collect(b *batch, c *call, reply []any, err error) error {
	reqs, res := b.reqs, b.res
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
	return s.collectBatch(b, c, reply)
}

// collectBatch reads the batch script's reply (lua.BatchReply) into the
// results of c's requests.
func (s *Store) collectBatch(b *batch, c *call, reply []any) error {
	reqs, res := b.reqs, b.res
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
			res[i] = engine.Result{Decision: decision(v, r.Limit, r.Grant)}
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
			parts[j] = decision(v, r.Limits[j].Limit, r.Grant)
		}
		k += n
		if res[i].Err == nil {
			copy(r.Detail, parts[:n])
			res[i].Decision = engine.Combine(parts[:n])
		}
	}
	return nil
}

// decision is one reply under limit l; a grant's carries its anchor and
// hold (lua.GrantOf).
func decision(v *lua.Decision, l engine.Limit, grant bool) engine.Decision {
	d := *v
	var anchor, hold int64
	if grant {
		d, anchor, hold = lua.GrantOf(d)
	}
	return engine.Decision{
		Allowed:    d.Allowed == 1,
		Limit:      l.Capacity(),
		Remaining:  d.Remaining,
		RetryAfter: engine.Micros(d.RetryAfter),
		ResetAfter: engine.Micros(d.ResetAfter),
		Delay:      engine.Micros(d.Delay),
		Anchor:     anchor,
		Hold:       engine.Micros(hold),
	}
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
