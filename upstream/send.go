package upstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
)

var _ engine.Store = (*Store)(nil)

// Submit implements engine.Store: it decides reqs into res as Decide does,
// but returns once the batch is written, and calls done when the results
// are in or by deadline (zero: the client's read timeout). On standalone
// and Sentinel Redis the batch goes on the store's pipe, written by the
// caller itself; on Cluster, where a batch may span nodes and meet
// redirects, Decide runs on a goroutine of its own.
func (s *Store) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
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
	b.out = s.appendScriptCall(b.out[:0], "EVALSHA", b.calls[0].script.SHA, &b.calls[0])
	s.pipe.send(b.out, deadline, b.got)
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
// the next EVALSHA.
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
				b.out = s.appendScriptCall(b.out[:0], "EVAL", c.script.Source, c)
				s.pipe.send(b.out, x.deadline, b.got)
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

// appendScriptCall appends call c as a RESP command: name (EVALSHA or
// EVAL), body (the script's SHA or source), its keys, its arguments.
func (s *Store) appendScriptCall(buf []byte, name, body string, c *call) []byte {
	buf = redcon.AppendArray(buf, 3+len(c.keys)+len(c.args))
	buf = redcon.AppendBulkString(buf, name)
	buf = redcon.AppendBulkString(buf, body)
	buf = appendBulkInt(buf, int64(len(c.keys)))
	for _, k := range c.keys {
		buf = s.appendKey(buf, k)
	}
	for _, a := range c.args {
		switch v := a.(type) {
		case string:
			buf = redcon.AppendBulkString(buf, v)
		case *int64:
			buf = appendBulkInt(buf, *v)
		case int64:
			buf = appendBulkInt(buf, v)
		case int:
			buf = appendBulkInt(buf, int64(v))
		default:
			// Every argument the store builds is one of the above.
			buf = redcon.AppendBulkString(buf, fmt.Sprint(v))
		}
	}
	return buf
}

// Close closes the store's own connection; the client is the caller's to
// close.
func (s *Store) Close() {
	if s.pipe != nil {
		s.pipe.close()
	}
}

// PollWith has an event loop read the replies to batches from now on, in
// its own epoll, instead of a goroutine of the store's: watch adds a
// descriptor to the loop's epoll, and the loop calls Pump whenever it is
// readable. A reply then reaches the loop that answers it with no thread
// woken in between. On Cluster, and on a connection with no descriptor
// (TLS), replies are read as before.
func (s *Store) PollWith(watch func(fd int) error) {
	if s.pipe != nil {
		s.pipe.pollWith(watch)
	}
}

// Pump reads the replies that have come and completes their batches, on
// the caller's goroutine: the event loop's that PollWith named.
func (s *Store) Pump() {
	if s.pipe != nil {
		s.pipe.pump()
	}
}

// Owing is the descriptor of the connection the event loop reads (see
// PollWith) while replies are owed on it, else -1: the loop may wait on it
// for a reply that is about to come (respserver's hold).
func (s *Store) Owing() int {
	if s.pipe == nil {
		return -1
	}
	return s.pipe.owing()
}

// Unpoll ends PollWith, on the event loop's goroutine, before its epoll
// closes: the store reads its replies itself again.
func (s *Store) Unpoll() {
	if s.pipe != nil {
		s.pipe.unpoll()
	}
}
