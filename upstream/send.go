package upstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/evloop"
	"github.com/sluice-rl/sluice/internal/resp"
)

var _ engine.Store = (*Store)(nil)

// Submit implements engine.Store: it decides reqs into res as Decide does,
// but returns once the batch is written, and calls done when the results
// are in or by deadline (zero: the client's read timeout). On standalone
// and Sentinel Redis the batch goes on the store's pipe, written by the
// caller itself; on Cluster each master's part of it on that master's
// pipe (masters.go). Only where no pipe can stand in for go-redis (a
// streaming credentials provider) does Decide run on a goroutine of its
// own.
func (s *Store) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	if s.masters != nil {
		engine.SubmitSplit(s.shardOf, reqs, res, deadline, done)
		return
	}
	if s.pipe == nil {
		go func() {
			ctx := context.Background()
			if !deadline.IsZero() {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, deadline)
				defer cancel()
			}
			done(s.Decide(ctx, reqs, res))
		}()
		return
	}
	s.sendOn(s.pipe, false, reqs, res, deadline, done)
}

// sendOn sends the batch on pipe p as one call: with its keys declared
// (one Redis), or undeclared (a Cluster master's part of a batch, which
// may span every slot that master serves).
func (s *Store) sendOn(p *pipe, undeclared bool, reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	if deadline.IsZero() {
		deadline = time.Now().Add(p.timeout())
	}
	b := s.buffers()
	now, ok := s.prepareArgs(b, reqs, res)
	if !ok {
		s.release(b)
		done(nil)
		return
	}
	s.appendCall(b, reqs, b.valid, now)
	b.sending = sending{pipe: p, undeclared: undeclared, reqs: reqs, res: res, done: done, deadline: deadline}
	b.out = s.appendSent(b)
	p.sendCall(b.out, deadline, b.got)
}

// appendSent writes the batch's one call as sending says: the
// function's or script's reference, or the script itself once Redis
// answered NOSCRIPT (evaled).
func (s *Store) appendSent(b *buffers) []byte {
	c := &b.calls[0]
	name, ref := s.scriptRef(c.script)
	if b.sending.evaled {
		name, ref = "EVAL", c.script.Source
	}
	if b.sending.undeclared {
		return s.appendUndeclared(b.out[:0], name, ref, c)
	}
	return s.appendScriptCall(b.out[:0], name, ref, c)
}

// decideOnPipe is Decide off Cluster: Submit, and wait.
func (s *Store) decideOnPipe(ctx context.Context, reqs []engine.Request, res []engine.Result) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	return engine.Wait(s, reqs, res, deadline)
}

// sending is a batch on a pipe: what its reply completes.
type sending struct {
	pipe       *pipe
	undeclared bool // a Cluster master's call (sendOn)
	reqs       []engine.Request
	res        []engine.Result
	done       func(error)
	deadline   time.Time
	evaled     bool // sent again as EVAL after NOSCRIPT
}

// gotReply completes a batch sent on the pipe with its reply. A Redis that
// lost its scripts gets the call again as EVAL, which loads the script for
// the next EVALSHA; one that lost the batch library gets FUNCTION LOAD
// first, for the next FCALL.
func (s *Store) gotReply(b *buffers, reply any, err error) {
	x, c := &b.sending, &b.calls[0]
	var list []any
	if err == nil {
		switch v := reply.(type) {
		case []any:
			list = v
		case resp.ReplyError:
			if isNoScript(v) && !x.evaled {
				x.evaled = true
				if isNoFunction(v) {
					s.reloadOn(x.pipe, x.deadline)
				}
				b.out = s.appendSent(b)
				x.pipe.sendCall(b.out, x.deadline, b.got)
				return
			}
			err = v
		default:
			err = fmt.Errorf("the reply is a %T, not an array", reply)
		}
	}
	err = s.collect(b, c, x.reqs, x.res, list, err)
	if redis.HasErrorPrefix(err, "READONLY") || redis.HasErrorPrefix(err, "MASTERDOWN") {
		// A failover (Sentinel's or Cluster's) made the master a replica:
		// dial again, to the master the reloaded map names.
		x.pipe.drop(err)
	}
	var moved []int
	if err == nil && x.undeclared {
		for _, i := range c.reqs {
			if notHere(x.res[i].Err) {
				moved = append(moved, i)
			}
		}
	}
	sent := *x
	b.sending = sending{}
	s.release(b)
	if sent.undeclared && (err != nil || len(moved) > 0) {
		s.reloadSlots(context.Background())
	}
	if len(moved) == 0 {
		sent.done(err)
		return
	}
	// The slot path blocks on go-redis: off the caller's loop, which only
	// a slot that moves ever brings here.
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), sent.deadline)
		defer cancel()
		sent.done(s.decideAgain(ctx, sent.reqs, sent.res, moved))
	}()
}

// appendScriptCall appends call c as a RESP command: name (EVALSHA, FCALL
// or EVAL), body (the script's SHA, the function's name or the script's
// source), its keys, its arguments.
func (s *Store) appendScriptCall(buf []byte, name, body string, c *call) []byte {
	buf = redcon.AppendArray(buf, 3+len(c.keys)+c.batch.Args())
	buf = redcon.AppendBulkString(buf, name)
	buf = redcon.AppendBulkString(buf, body)
	buf = resp.AppendBulkInt(buf, int64(len(c.keys)))
	for _, k := range c.keys {
		buf = s.appendKey(buf, k)
	}
	return c.batch.Append(buf)
}

// Close closes the store's own connection; the client is the caller's to
// close.
func (s *Store) Close() {
	if s.pipe != nil {
		s.pipe.close()
	}
	if s.masters != nil {
		s.masters.close()
	}
}

// UseLoop has an event loop read the replies to batches from now on:
// the store watches its connection's descriptor on l, and its replies are
// read and their batches completed on l's goroutine. app hands it the
// loop that serves the RESP door's first connections, so that a reply
// reaches the loop that answers it with no thread woken in between; the
// loop holds for a small batch's reply (evloop.Owing). On Cluster the
// loop reads every master's pipe. On a connection with no descriptor
// (TLS), a goroutine of the store's reads the replies as before, and so
// it does again once l ends.
func (s *Store) UseLoop(l *evloop.Loop) {
	if s.pipe != nil {
		s.pipe.useLoop(l)
	}
	if s.masters != nil {
		s.masters.useLoop(l)
	}
}
