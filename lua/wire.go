package lua

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/resp"
)

// This file is the batch script's wire format in Go: BatchCall is what one
// call carries after the script's reference and keys, BatchReply what it
// answers. batch.lua's header comment describes both in prose; the two
// change together, and TestBatchRoundTrip runs one through the other.

// Mode is what a request does with its cost.
type Mode int64

const (
	Take   Mode = 0 // take the cost if it fits, else refuse
	Peek   Mode = 1 // say whether it would fit, taking nothing
	Charge Mode = 2 // take it even past the limit: a cost known after the work
	// Grant takes the cost as Take does, for the caller to spend later:
	// an admitted grant's reply carries its hold in RetryAfter and its
	// anchor in Delay (see GrantOf).
	Grant Mode = 3
	// Refund gives the cost back to the grant named by its anchor (one
	// per request in BatchCall.Anchors; a multi-limit request's, one per
	// limit). Never refused.
	Refund Mode = 4
)

// Limit is a row of a batch's limits table. Algorithm is a short name
// (fixed, log, sliding, token, leaky, gcra, or peer: the peer's window,
// peer.lua); Burst carries the sliding window's precision, and the peer
// window's expiry jitter in seconds.
type Limit struct {
	Algorithm           string
	Rate, Period, Burst int64 // Period in µs
}

// Run is consecutive single-limit requests that share a limit (its 1-based
// index in the table), a cost and a mode.
type Run struct {
	Requests, Limit, Cost int64
	Mode                  Mode
}

// KeyRun is consecutive keys that each have as many requests.
type KeyRun struct {
	Keys, Requests int64
}

// Multi is a run of consecutive multi-limit requests, Requests of them,
// that share their limits, cost and mode: how many limits each has (their
// indexes are the next Limits of BatchCall.MultiLimits), its cost and mode.
// Each request has keys of its own, one per limit.
type Multi struct {
	Requests int64
	Limits   int
	Cost     int64
	Mode     Mode
}

// BatchCall is the batch script's arguments. Its slices are the caller's,
// so that a warm caller builds and sends one without allocating.
type BatchCall struct {
	Limits      []Limit
	Runs        []Run
	KeyRuns     []KeyRun
	Multis      []Multi
	MultiLimits []int64 // each Multi's limit indexes, once a run, in order
	// Anchors are the refunds' anchors (µs): one per single-limit
	// request of a Refund run, in request order, then one per limit of
	// each multi-limit Refund request, in request order. Empty when the
	// call has no refund.
	Anchors []int64
	// Now pins the clock (µs), for tests only, when Pinned.
	Now    int64
	Pinned bool
	// Deadline is the time (µs on Redis's clock; 0: none) after which
	// the call's requests have been answered without it: a call Redis
	// starts later is late, and charges nothing. Append writes it last,
	// DeadlineDigits wide, so that a connection can fill it in
	// (PutDeadline) as it writes the call.
	Deadline int64
}

// deadlineField is the deadline as Append writes it, before it is filled in.
const deadlineField = "$17\r\n00000000000000000\r\n"

// DeadlineDigits is the width of the deadline Append writes: µs since
// the epoch have 16 digits until the year 2286.
const DeadlineDigits = 17

// PutDeadline writes d (µs; 0 or less: none) over the deadline of a call
// that Append wrote and that ends cmd.
func PutDeadline(cmd []byte, d int64) {
	field := cmd[len(cmd)-2-DeadlineDigits : len(cmd)-2]
	d = max(d, 0)
	for j := len(field) - 1; j >= 0; j-- {
		field[j] = byte('0' + d%10)
		d /= 10
	}
}

// Args is how many arguments c is.
func (c *BatchCall) Args() int {
	n := 1 + 4*len(c.Limits) + 1 + 4*len(c.Runs) + 1 + 2*len(c.KeyRuns) + 1 + 4*len(c.Multis) + len(c.MultiLimits) + len(c.Anchors) + 1
	if c.Pinned {
		n++
	}
	return n
}

// Rows is how many decisions c's reply holds: one per single-limit
// request, one per limit of a multi-limit request.
func (c *BatchCall) Rows() int {
	n := 0
	for _, m := range c.Multis {
		n += int(m.Requests) * m.Limits
	}
	for _, r := range c.Runs {
		n += int(r.Requests)
	}
	return n
}

// Append appends c's arguments to buf as RESP bulk strings, after a
// command's name, script reference and keys.
func (c *BatchCall) Append(buf []byte) []byte {
	c.each(func(s string) { buf = redcon.AppendBulkString(buf, s) }, func(n int64) { buf = resp.AppendBulkInt(buf, n) })
	buf = append(buf, deadlineField...)
	PutDeadline(buf, c.Deadline)
	return buf
}

// Values appends c's arguments to args, for a client that takes them
// boxed (go-redis). It allocates; the hot path uses Append.
func (c *BatchCall) Values(args []any) []any {
	c.each(func(s string) { args = append(args, s) }, func(n int64) { args = append(args, n) })
	d := []byte(deadlineField)
	PutDeadline(d, c.Deadline)
	return append(args, string(d[5:5+DeadlineDigits]))
}

// each walks c's arguments in order, as batch.lua reads them, but for
// the deadline, which Append and Values write each their own way.
func (c *BatchCall) each(str func(string), num func(int64)) {
	num(int64(len(c.Limits)))
	for _, l := range c.Limits {
		str(l.Algorithm)
		num(l.Rate)
		num(l.Period)
		num(l.Burst)
	}
	num(int64(len(c.Runs)))
	for _, r := range c.Runs {
		num(r.Requests)
		num(r.Limit)
		num(r.Cost)
		num(int64(r.Mode))
	}
	num(int64(len(c.KeyRuns)))
	for _, k := range c.KeyRuns {
		num(k.Keys)
		num(k.Requests)
	}
	num(int64(len(c.Multis)))
	at := 0
	for _, m := range c.Multis {
		num(m.Requests)
		num(int64(m.Limits))
		num(m.Cost)
		num(int64(m.Mode))
		for _, l := range c.MultiLimits[at : at+m.Limits] {
			num(l)
		}
		at += m.Limits
	}
	for _, a := range c.Anchors {
		num(a)
	}
	if c.Pinned {
		num(c.Now)
	}
}

// Decision is the batch script's reply to one request, or to one limit of
// a multi-limit request. Allowed is 1 or 0, or -k where the request
// failed with the reply's k-th error message.
type Decision struct {
	Allowed, Remaining, RetryAfter, ResetAfter, Delay int64 // times in µs
}

// GrantOf reads an admitted grant's anchor and hold (µs) from its reply,
// where the script carries them (RetryAfter and Delay, otherwise zero in
// an admission), and returns the reply without them.
func GrantOf(d Decision) (plain Decision, anchor, hold int64) {
	if d.Allowed != 1 {
		return d, 0, 0
	}
	anchor, hold = d.Delay, d.RetryAfter
	d.Delay, d.RetryAfter = 0, 0
	return d, anchor, hold
}

// BatchReply is a batch call's reply, decoded.
type BatchReply struct {
	// Time is Redis's clock (µs) as the call read it when it started.
	Time int64
	// Late says that the call started after its deadline and charged
	// nothing: it has no decisions.
	Late bool
	// Decisions are in the order of the call's requests: each
	// single-limit request's, then each multi-limit request's, one per
	// limit, in its limits' order.
	Decisions []Decision
	errs      []any      // the error messages
	run       []Decision // a multi-limit run's decisions as the reply has them
}

// ReplyTime is Redis's clock (µs) as a batch call read it, from its
// reply's header, read without decoding the rest.
func ReplyTime(reply any) (int64, bool) {
	list, ok := reply.([]any)
	if !ok || len(list) < 2 {
		return 0, false
	}
	t, ok := list[0].(int64)
	return t, ok
}

// Decode reads reply, the batch script's answer to c, into r, reusing
// r's room.
func (r *BatchReply) Decode(reply []any, c *BatchCall) error {
	if err := r.decode(reply, c.Rows()); err != nil {
		return err
	}
	if r.Late {
		return nil
	}
	// The reply has a multi-limit run's decisions a limit at a time (see
	// batch.lua); Decisions has them a request at a time.
	at := len(r.Decisions)
	for _, m := range c.Multis {
		at -= int(m.Requests) * m.Limits
	}
	for _, m := range c.Multis {
		reqs, n := int(m.Requests), int(m.Requests)*m.Limits
		if reqs > 1 && m.Limits > 1 {
			block := r.Decisions[at : at+n]
			r.run = append(r.run[:0], block...)
			for j := range m.Limits {
				for x := range reqs {
					block[x*m.Limits+j] = r.run[j*reqs+x]
				}
			}
		}
		at += n
	}
	return nil
}

// decode reads reply's rows decisions in the reply's order.
func (r *BatchReply) decode(reply []any, rows int) error {
	r.Decisions, r.errs = r.Decisions[:0], nil
	var v [BatchFields]int64
	if err := replyInts(v[:2], reply, 0); err != nil {
		return err
	}
	r.Time, r.Late = v[0], v[1] == 1
	if r.Late {
		return nil
	}
	at := 2
	for len(r.Decisions) < rows {
		if err := replyInts(v[:1], reply, at); err != nil {
			return err
		}
		if v[0] < 2 {
			if err := replyInts(v[:], reply, at); err != nil {
				return err
			}
			r.Decisions = append(r.Decisions, Decision{v[0], v[1], v[2], v[3], v[4]})
			at += BatchFields
			continue
		}
		// A run: r - 1 more decisions, each the one before plus the steps.
		if len(r.Decisions) == 0 {
			return errors.New("lua: batch reply repeats before it replies")
		}
		if err := replyInts(v[:], reply, at); err != nil {
			return err
		}
		if v[0]-1 > int64(rows-len(r.Decisions)) {
			return fmt.Errorf("lua: batch reply repeats %d past its %d decisions", v[0]-1, rows)
		}
		at += BatchFields
		d := r.Decisions[len(r.Decisions)-1]
		for n := v[0] - 1; n > 0; n-- {
			d.Remaining += v[1]
			d.RetryAfter += v[2]
			d.ResetAfter += v[3]
			d.Delay += v[4]
			r.Decisions = append(r.Decisions, d)
		}
	}
	r.errs = reply[at:]
	return nil
}

// Err is the error message of d, a failed decision (Allowed < 0).
func (r *BatchReply) Err(d Decision) error {
	k := -d.Allowed
	if k < 1 || k > int64(len(r.errs)) {
		return fmt.Errorf("lua: batch script error %d missing from the reply", k)
	}
	msg, _ := r.errs[k-1].(string)
	return errors.New(strings.TrimSpace(msg))
}

// replyInts reads len(v) integers of reply from at.
func replyInts(v []int64, reply []any, at int) error {
	if at+len(v) > len(reply) {
		return fmt.Errorf("lua: batch reply cut short at field %d of %d", at+len(v), len(reply))
	}
	for j := range v {
		var ok bool
		if v[j], ok = reply[at+j].(int64); !ok {
			return fmt.Errorf("lua: batch reply field %d is %T, want an integer", at+j, reply[at+j])
		}
	}
	return nil
}
