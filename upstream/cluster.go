package upstream

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/lua"
)

// Resharding. While a hash slot moves from one master to another, its keys
// move one MIGRATE at a time, and a key lives on exactly one of the two.
// The source runs a script whose keys it all still holds; it redirects one
// whose keys have all left with ASK, which go-redis follows (also inside a
// pipeline), and the target runs it. A script over keys on both sides gets
// TRYAGAIN, for as long as the migration takes, however long that is (an
// operator's tool that stalls, a slot of many keys): retrying the same
// call can outlast any deadline. Each key is independent, so such a call is
// split into one call per key, and each of those runs where its key lives.
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

// eval issues c as EVALSHA (name "evalsha", body the SHA) or EVAL (name
// "eval", body the source) on p: as go-redis's EvalSha and Eval do, and on
// Cluster marked noRetry.
func (s *Store) eval(ctx context.Context, p redis.Cmdable, name, body string, c *call) *redis.Cmd {
	pr, ok := p.(processor)
	if !s.cluster || !ok {
		if name == "eval" {
			return p.Eval(ctx, body, c.keys, c.args...)
		}
		return p.EvalSha(ctx, body, c.keys, c.args...)
	}
	args := make([]any, 0, 3+len(c.keys)+len(c.args))
	args = append(args, name, body, len(c.keys))
	for _, k := range c.keys {
		args = append(args, k)
	}
	args = append(args, c.args...)
	cmd := redis.NewCmd(ctx, args...)
	if len(c.keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = pr.Process(ctx, noRetry{cmd}) // the error stays in cmd
	return cmd
}

// settle sends again the calls over several keys that met TRYAGAIN (see
// Resharding above), split into one call per key, in one more round trip
// within ctx's deadline, and puts the parts in b.calls in place of the
// call, so that collect reads them instead. A call over one key cannot
// meet TRYAGAIN: its key is on the source, which runs it, or not, and the
// target runs it after ASK.
func (s *Store) settle(ctx context.Context, b *buffers, reqs []engine.Request, now any) {
	n := len(b.calls)
	split := 0
	for k := range n {
		if c := &b.calls[k]; isTryAgain(c.cmd.Err()) && c.script == lua.Batch && len(c.keys) > 1 {
			split++
		}
	}
	if split == 0 {
		return
	}
	kept := make([]call, 0, n-split)
	for k := range n {
		c := b.calls[k]
		if !isTryAgain(c.cmd.Err()) || c.script != lua.Batch || len(c.keys) < 2 {
			kept = append(kept, c)
			continue
		}
		// One call per key: c.reqs holds each key's requests together.
		for start := 0; start < len(c.reqs); {
			key := s.Key(reqs[c.reqs[start]].Key, reqs[c.reqs[start]].Limit.Algorithm)
			end := start + 1
			for end < len(c.reqs) && s.Key(reqs[c.reqs[end]].Key, reqs[c.reqs[end]].Limit.Algorithm) == key {
				end++
			}
			s.appendCall(b, reqs, c.reqs[start:end], now)
			start = end
		}
	}
	parts := b.calls[n:]
	s.run(ctx, parts)
	b.calls = append(append(b.calls[:0:0], kept...), parts...)
}

func isTryAgain(err error) bool { return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") }
