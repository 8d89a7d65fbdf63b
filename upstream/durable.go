package upstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redispipe"
	"github.com/sluice-rl/sluice/internal/resp"
)

// Durable decisions. Redis replicates asynchronously: a master that dies
// takes with it the charges it had not yet sent to its replica, and the
// promoted replica admits them again. A request under a durable policy
// (engine.Durability) is answered only once Store.Replicas replicas
// acknowledge its charge: its batch's call goes on the twin of its
// master's pipe (redispipe.Pipe.Twin), followed on that connection by
//
//	WAIT replicas timeout              (engine.DurableReplica), or
//	WAITAOF 0 replicas timeout         (engine.DurableDisk, Redis 7.2),
//
// which Redis answers once that many replicas have everything the
// connection wrote, or at the timeout with how many have. One WAIT per
// call, not per request. Durable requests come in batches of their own
// (Shards: a shard per durability), on a connection of their own, because
// WAIT holds its connection up: Redis runs nothing else sent on it until
// it answers, so a plain request never waits for a replica.
//
// A WAIT that falls short (no replica, a replica paused or too far
// behind, an error such as WAITAOF on a Redis before 7.2) fails its batch
// with engine.ErrNotDurable: the requests get their failure mode's
// answer, as a timed-out call's do, and the call is counted
// (UnreplicatedCalls). The charges may still be on the master; they are
// not undone. The WAIT's timeout is what is left of the batch's deadline
// once its call is written, less a quarter for the reply to come back,
// so that the pipe's own deadline does not give the connection up. A
// call whose own reply is an error (NOREPLICAS, a lost connection)
// answers its caller at once; its WAIT only returns the batch to the
// pool. One case waits anyway: a call sent again as EVAL after NOSCRIPT
// (Redis lost the scripts) runs after the first call's WAIT, which, with
// no replica, waits out its timeout first.

// unpiped is a durable shard where no pipe can stand in for go-redis (a
// streaming credentials provider): go-redis takes a pooled connection
// per command, so no WAIT can follow a call on its connection, and its
// batches get their failure mode's answer.
type unpiped struct{}

var errNoPipe = fmt.Errorf("upstream: durable requests need the store's own connection, which a streaming credentials provider rules out: %w", engine.ErrNotDurable)

func (unpiped) Submit(_ []engine.Request, _ []engine.Result, _ time.Time, done func(error)) {
	done(errNoPipe)
}

func (unpiped) Reset(context.Context, string, ...engine.NamedLimit) error {
	return errors.New("upstream: no reset through a durable shard")
}

// onDurablePipe is the sender of a durable shard on pipe p (a pipe's
// twin): the batch's one call, then the WAIT for d.
func (s *Store) onDurablePipe(p *redispipe.Pipe, undeclared bool, d engine.Durability) sender {
	return func(b *batch) {
		if b.deadline.IsZero() {
			b.deadline = time.Now().Add(p.Timeout())
		}
		b.pipe, b.undeclared, b.durable = p, undeclared, d
		b.out = s.encode(b.out[:0], &b.calls[0], undeclared, b.evaled)
		b.awaiting.Add(2) // before either reply can come
		if !b.evaled {    // sent again as EVAL after NOSCRIPT: counted once
			s.durableCalls.Add(1)
		}
		p.SendStamped(b.out, b.deadline, b.got)
		// A call sent again after NOSCRIPT runs once the WAIT sent after
		// the first has timed out, which it may well do: its own WAIT
		// has what is left after that one.
		left := time.Until(b.deadline) - b.waited
		ms := max(left*3/4/time.Millisecond, 1) // 0 would wait for ever
		b.waited += ms * time.Millisecond
		var buf [64]byte
		p.Send(s.appendWait(buf[:0], d, ms), b.deadline, b.waitReply)
	}
}

// appendWait appends the WAIT (or WAITAOF) that follows a durable call,
// with a timeout of ms milliseconds.
func (s *Store) appendWait(buf []byte, d engine.Durability, ms time.Duration) []byte {
	if d == engine.DurableDisk {
		buf = resp.AppendCommand(buf, "WAITAOF", "0", strconv.Itoa(s.replicas), strconv.FormatInt(int64(ms), 10))
		return buf
	}
	return resp.AppendCommand(buf, "WAIT", strconv.Itoa(s.replicas), strconv.FormatInt(int64(ms), 10))
}

// gotWait reads a WAIT's reply: how many replicas hold everything the
// connection wrote (WAITAOF: how many have it on disk, second).
func (s *Store) gotWait(b *batch, reply any, err error) {
	var held int64 = -1
	switch v := reply.(type) {
	case int64:
		held = v
	case []any:
		if len(v) == 2 {
			held, _ = v[1].(int64)
		}
	case resp.ReplyError:
		err = v
	}
	var short error
	switch {
	case err != nil:
		short = fmt.Errorf("upstream: %s: %w (%w)", waitName(b.durable), err, engine.ErrNotDurable)
	case held < int64(s.replicas):
		short = fmt.Errorf("upstream: %s: %d of %d replicas acknowledged: %w", waitName(b.durable), max(held, 0), s.replicas, engine.ErrNotDurable)
	}
	if short != nil {
		b.shortMu.Lock()
		if b.short == nil {
			b.short = short
		}
		b.shortMu.Unlock()
	}
	s.replied(b)
}

func waitName(d engine.Durability) string {
	if d == engine.DurableDisk {
		return "WAITAOF"
	}
	return "WAIT"
}

// complete completes a batch whose call was decoded: at once, or, for a
// durable one, once its WAIT has answered too.
func (s *Store) complete(b *batch, err error) {
	if b.durable == engine.DurableNone {
		s.finish(b, err)
		return
	}
	b.callErr = err
	if err != nil {
		// Nothing to wait for: the caller gets the call's error now (a
		// NOREPLICAS, a lost connection), and the WAIT's reply only
		// puts the batch back in the pool.
		done := b.done
		b.done = func(error) {}
		done(err)
	}
	s.replied(b)
}

// replied counts one reply of a durable batch in; the last completes it:
// with its call's error, else with the WAIT's shortfall, if any.
func (s *Store) replied(b *batch) {
	if b.awaiting.Add(-1) != 0 {
		return
	}
	err := b.callErr
	b.shortMu.Lock()
	short := b.short
	b.shortMu.Unlock()
	if err == nil && short != nil {
		err = short
		s.noteShort(short)
	} else if err != nil && errors.Is(err, engine.ErrNotDurable) {
		s.noteShort(err)
	}
	s.finish(b, err)
}

// noteShort counts a durable call its replicas did not acknowledge, and
// logs it at most once every noteEvery.
func (s *Store) noteShort(cause error) {
	n := s.unreplicated.Add(1)
	now := time.Now().UnixNano()
	last := s.lastShort.Load()
	if now-last < int64(noteEvery) || !s.lastShort.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("durable requests answered by their failure mode: the replicas did not acknowledge their charges in time",
		"err", cause, "upstream_calls_unreplicated", n)
}

// DurableCalls is how many batch calls of durable requests were sent:
// INFO's upstream_calls_durable.
func (s *Store) DurableCalls() uint64 { return s.durableCalls.Load() }

// UnreplicatedCalls is how many of them the replicas did not acknowledge
// by their deadline, so that their requests got their failure mode's
// answer: INFO's upstream_calls_unreplicated.
func (s *Store) UnreplicatedCalls() uint64 { return s.unreplicated.Load() }
