package upstream

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/lua"
)

// goRedis is the sender through go-redis, for a client no pipe can stand
// in for (a streaming credentials provider) and for the requests a
// master's call found on a slot that moved (resend): on Cluster one call
// per hash slot, with declared keys, so that Redis redirects a call
// whose slot moved and go-redis follows (see Resharding below), the
// calls in one pipeline. It blocks on go-redis, so on a goroutine of its
// own, bounded by the batch's deadline, or else by the client's
// timeouts.
func (s *Store) goRedis(b *batch) {
	go func() {
		ctx := context.Background()
		if !b.deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, b.deadline)
			defer cancel()
		}
		s.stampCalls(ctx, b.calls, b.reqs)
		sent := time.Now()
		s.run(ctx, b.calls)
		if s.cluster {
			s.settle(ctx, b)
		} else if len(b.calls) == 1 {
			if t, ok := lua.ReplyTime(b.calls[0].cmd.Val()); ok {
				s.clock.Observe(sent, time.Now(), t)
			}
		}
		for k := range b.calls {
			c := &b.calls[k]
			reply, err := c.cmd.Slice()
			if err := s.collect(b, c, reply, err); err != nil {
				s.reloadSlots(ctx)
				s.finish(b, err)
				return
			}
		}
		s.finish(b, nil)
	}()
}

// run sends the calls in one round trip, then sends again as EVAL, in a
// second one, those that met NOSCRIPT or a missing function. Errors stay
// in each call's cmd; a missing function is loaded again first.
func (s *Store) run(ctx context.Context, calls []call) {
	s.issue(ctx, calls, func(p redis.Cmdable, c *call) *redis.Cmd {
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
	s.issue(ctx, retry, func(p redis.Cmdable, c *call) *redis.Cmd {
		return s.eval(ctx, p, "EVAL", c.script.Source, c)
	})
	for k, j := 0, 0; k < len(calls); k++ {
		if isNoScript(calls[k].cmd.Err()) {
			calls[k].cmd = retry[j].cmd
			j++
		}
	}
}

// issue issues one command per call: alone when there is one, else in one
// pipeline. Errors stay in each call's cmd.
func (s *Store) issue(ctx context.Context, calls []call, issue func(redis.Cmdable, *call) *redis.Cmd) {
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

// Resharding. While a hash slot moves from one master to another, its keys
// move one MIGRATE at a time, and a key lives on exactly one of the two.
// The source runs a script whose keys it all still holds; it redirects one
// whose keys have all left with ASK, which go-redis follows (also inside a
// pipeline), and the target runs it. A script over keys on both sides gets
// TRYAGAIN, for as long as the migration takes, however long that is (an
// operator's tool that stalls, a slot of many keys): retrying the same
// call can outlast any deadline. Requests on different keys are
// independent, so such a call is split into one call per key (per
// multi-limit request: its keys are decided together), and each of those
// runs where its keys live.
// Once the slot is the target's, the source answers MOVED, which go-redis
// follows and learns from.
//
// go-redis retries TRYAGAIN by itself, after a back-off, up to
// MaxRedirects times: alone, that spends the deadline; in a pipeline whose
// first command met it, it sends every command of that node again, and a
// script that had run would then run twice, charging its requests twice.
// So on Cluster each script call is marked not to be retried: go-redis
// still follows MOVED and ASK, which mean the call did not run, and the
// store handles TRYAGAIN itself, within the batch's deadline. A call
// whose connection broke is not sent again either (it may have run): its
// batch fails, and its requests get their failure mode's answer.

// noRetry is a command that go-redis must not send again after an error
// (redis.Cmder's NoRetry): a script call that ran must not run twice.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// eval issues c as EVALSHA (name "EVALSHA", body the SHA), FCALL (name
// "FCALL", body the function) or EVAL (name "EVAL", body the source) on
// p: as go-redis's EvalSha, FCall and Eval do, and on Cluster marked
// noRetry.
func (s *Store) eval(ctx context.Context, p redis.Cmdable, name, body string, c *call) *redis.Cmd {
	pr, ok := p.(processor)
	if !s.cluster || !ok {
		keys := make([]string, len(c.keys))
		for i, k := range c.keys {
			keys[i] = s.keyString(k)
		}
		args := c.values(make([]any, 0, 1+c.batch.Args()))
		switch name {
		case "EVAL":
			return p.Eval(ctx, body, keys, args...)
		case "FCALL":
			return p.FCall(ctx, body, keys, args...)
		}
		return p.EvalSha(ctx, body, keys, args...)
	}
	args := make([]any, 0, 4+len(c.keys)+c.batch.Args())
	args = append(args, name, body, len(c.keys))
	for _, k := range c.keys {
		args = append(args, s.keyString(k))
	}
	args = c.values(args)
	cmd := redis.NewCmd(ctx, args...)
	if len(c.keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = pr.Process(ctx, noRetry{cmd}) // the error stays in cmd
	return cmd
}

// values appends c's arguments boxed, for go-redis. A call that declares
// no keys (Check's) has their count, 0, first in ARGV (see lua/batch.lua).
func (c *call) values(args []any) []any {
	if len(c.keys) == 0 {
		args = append(args, 0)
	}
	return c.batch.Values(args)
}

// maxSettleRounds bounds settle's rounds when ctx has no deadline.
const maxSettleRounds = 8

// settle sends again, within ctx's deadline, the calls that met TRYAGAIN
// (see Resharding above). A call over several independent requests is
// split, at once, into one call per unit: a key's single-limit requests,
// or one multi-limit request. A call of one unit cannot be split: a
// multi-limit request's keys must be decided together, so one whose keys
// are on both sides, or missing on the target, waits until the migration
// has moved them all; it is sent again after a pause of 1ms, then 2ms, 4ms
// … while the deadline allows. (A single key cannot meet TRYAGAIN: it is
// on the source, which runs it, or not, and the target runs it after
// ASK.) A split call is replaced in b.calls by its parts, so that collect
// reads them instead.
func (s *Store) settle(ctx context.Context, b *batch) {
	reqs := b.reqs
	for round := 0; round < maxSettleRounds && hasTryAgain(b.calls); round++ {
		n := len(b.calls)
		kept := make([]call, 0, n)
		var again []call // calls of one unit, sent again as they are
		for k := range n {
			c := b.calls[k]
			if !isTryAgain(c.cmd.Err()) {
				kept = append(kept, c)
			} else if !s.split(b, reqs, &c) {
				again = append(again, c)
			}
		}
		parts := b.calls[n:]
		if len(parts) == 0 {
			t := time.NewTimer(time.Millisecond << min(round, 5))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		again = append(again, parts...)
		s.stampCalls(ctx, again, reqs)
		s.run(ctx, again)
		b.calls = append(append(b.calls[:0:0], kept...), again...)
	}
}

// split appends to b.calls one call per unit of c (see settle) and
// reports whether c had more than one.
func (s *Store) split(b *batch, reqs []engine.Request, c *call) bool {
	// c.reqs holds each key's single-limit requests together, then the
	// multi-limit ones.
	unitEnd := func(start int) int {
		r := &reqs[c.reqs[start]]
		end := start + 1
		if r.Multi() {
			return end
		}
		key := s.keyOf(r)
		for end < len(c.reqs) && !reqs[c.reqs[end]].Multi() && s.keyOf(&reqs[c.reqs[end]]) == key {
			end++
		}
		return end
	}
	if unitEnd(0) == len(c.reqs) {
		return false
	}
	for start := 0; start < len(c.reqs); {
		end := unitEnd(start)
		b.appendCall(reqs, c.reqs[start:end])
		start = end
	}
	return true
}

func hasTryAgain(calls []call) bool {
	for k := range calls {
		if isTryAgain(calls[k].cmd.Err()) {
			return true
		}
	}
	return false
}

func isTryAgain(err error) bool { return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") }
