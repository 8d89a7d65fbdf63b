package upstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/evloop"
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
		s.submitByMaster(reqs, res, deadline, done)
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
	if deadline.IsZero() {
		deadline = time.Now().Add(s.pipe.timeout())
	}
	b := s.buffers()
	if _, ok := s.prepare(b, reqs, res); !ok {
		s.release(b)
		done(nil)
		return
	}
	// Off Cluster, plan makes one call of the whole batch.
	b.sending = sending{reqs: reqs, res: res, done: done, deadline: deadline}
	name, ref := s.scriptRef(b.calls[0].script)
	b.out = s.appendScriptCall(b.out[:0], name, ref, &b.calls[0])
	s.pipe.sendCall(b.out, deadline, b.got)
}

// decideOnPipe is Decide off Cluster: Submit, and wait.
func (s *Store) decideOnPipe(ctx context.Context, reqs []engine.Request, res []engine.Result) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	return engine.Wait(s, reqs, res, deadline)
}

// sending is a batch on the pipe: what its reply completes.
type sending struct {
	reqs     []engine.Request
	res      []engine.Result
	done     func(error)
	deadline time.Time
	evaled   bool // sent again as EVAL after NOSCRIPT
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
		case replyError:
			if isNoScript(v) && !x.evaled {
				x.evaled = true
				if isNoFunction(v) {
					s.reloadOn(s.pipe, x.deadline)
				}
				b.out = s.appendScriptCall(b.out[:0], "EVAL", c.script.Source, c)
				s.pipe.sendCall(b.out, x.deadline, b.got)
				return
			}
			err = v
		default:
			err = fmt.Errorf("the reply is a %T, not an array", reply)
		}
	}
	err = s.collect(b, c, x.reqs, x.res, list, err)
	if redis.HasErrorPrefix(err, "READONLY") || redis.HasErrorPrefix(err, "MASTERDOWN") {
		// Sentinel moved the master away: dial again, to the new one.
		s.pipe.drop(err)
	}
	done := x.done
	b.sending = sending{}
	s.release(b)
	done(err)
}

// appendScriptCall appends call c as a RESP command: name (EVALSHA, FCALL
// or EVAL), body (the script's SHA, the function's name or the script's
// source), its keys, its arguments.
func (s *Store) appendScriptCall(buf []byte, name, body string, c *call) []byte {
	buf = redcon.AppendArray(buf, 3+len(c.keys)+c.batch.Args())
	buf = redcon.AppendBulkString(buf, name)
	buf = redcon.AppendBulkString(buf, body)
	buf = appendBulkInt(buf, int64(len(c.keys)))
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
