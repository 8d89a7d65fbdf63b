package respserver

import (
	"context"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisadmin"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/service"
)

// The concurrency limiter's commands:
//
//	RL.ACQUIRE key limit lease_ttl [id]      RL.ACQUIRE POLICY name key [id]
//	RL.RELEASE key lease_id                  RL.RELEASE POLICY name key lease_id
//
// They wait on Redis and are not batched, so they run as RL.RESET does: on
// an event loop, off the loop in a goroutine that lands its reply through
// the loop; the connection's later commands wait for it, and every other
// connection is served meanwhile. A first argument POLICY (in any case)
// starts the policy form, so an inline key cannot be named "policy".

// Field names of the lease reply (RESP3 map), in the order of the RESP2
// array.
var leaseFields = [...]string{"allowed", "limit", "remaining", "retry_after_ms", "lease_id"}

func leaseCommands() []*command {
	return []*command{
		{
			name: "rl.acquire", minArgs: 4, maxArgs: 5, flags: []string{"write"},
			firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice",
			summary: "Concurrency limiter: take one of limit leases of key, held for lease_ttl unless released; an id that is held is renewed. Or POLICY name key [id].",
			args: []redisadmin.Arg{{Name: "key", Type: "key"}, {Name: "limit", Type: "integer"}, {Name: "lease_ttl", Type: "string"},
				{Name: "id", Type: "string", Optional: true}},
			run: runAcquire,
		},
		{
			name: "rl.release", minArgs: 3, maxArgs: 5, flags: []string{"write", "fast"},
			firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice",
			summary: "Free a lease taken by RL.ACQUIRE: 1 if it was held, 0 if not (released already, or expired). Or POLICY name key lease_id.",
			args:    []redisadmin.Arg{{Name: "key", Type: "key"}, {Name: "lease_id", Type: "string"}},
			run:     runRelease,
		},
	}
}

// parseAcquire reads RL.ACQUIRE's arguments, copied: they outlive the
// read buffer when the command runs off the loop.
func parseAcquire(args [][]byte) (service.LeaseRequest, string) {
	var r service.LeaseRequest
	if resp.Is(args[1], "policy") {
		r.ByPolicy, r.Policy, r.Key = true, string(args[2]), string(args[3])
	} else {
		r.Key = string(args[1])
		n, why := resp.ParseInt(args[2])
		if why != "" {
			return r, invalidArg("limit", args[2], why)
		}
		r.Limit = n
		ttl, why := engine.ParsePeriod(str(args[3]))
		if why != "" {
			return r, invalidArg("lease_ttl", args[3], why)
		}
		r.TTL = ttl
	}
	if len(args) > 4 { // the id: fifth in both forms
		var msg string
		if r.ID, msg = parseID(args[4]); msg != "" {
			return r, msg
		}
	}
	return r, ""
}

// parseID reads a lease's or a reservation's id, copied.
func parseID(arg []byte) (string, string) {
	if len(arg) == 0 {
		return "", invalidArg("id", arg, "must not be empty")
	}
	return string(arg), ""
}

// parseRelease reads RL.RELEASE's arguments, copied.
func parseRelease(args [][]byte) (service.LeaseRequest, string) {
	switch {
	case len(args) == 3:
		return service.LeaseRequest{Key: string(args[1]), ID: string(args[2])}, ""
	case len(args) == 5 && resp.Is(args[1], "policy"):
		return service.LeaseRequest{ByPolicy: true, Policy: string(args[2]), Key: string(args[3]), ID: string(args[4])}, ""
	case resp.Is(args[1], "policy"):
		return service.LeaseRequest{}, errReleasePolicy
	}
	return service.LeaseRequest{}, errReleaseUsage
}

func runAcquire(c *client, args [][]byte) {
	r, msg := parseAcquire(args)
	if msg != "" {
		c.fail(msg)
		return
	}
	svc, form := c.s.cfg.Service, c.form()
	answerOffLoop(c, nil, func() (engine.LeaseDecision, error) { return svc.Acquire(context.Background(), r) },
		func(out []byte, d *engine.LeaseDecision) []byte { return appendLease(out, d, form) })
}

func runRelease(c *client, args [][]byte) {
	r, msg := parseRelease(args)
	if msg != "" {
		c.fail(msg)
		return
	}
	svc := c.s.cfg.Service
	answerOffLoop(c, nil, func() (bool, error) { return svc.Release(context.Background(), r) },
		func(out []byte, held *bool) []byte {
			if *held {
				return redcon.AppendInt(out, 1)
			}
			return redcon.AppendInt(out, 0)
		})
}

// answerOffLoop runs work off the loop (offLoop) and answers what it
// returns by enc, or its error, which the service counted, worded with
// cmd's names (nil: the service's).
func answerOffLoop[T any](c *client, cmd *command, work func() (T, error), enc func(out []byte, v *T) []byte) {
	var v T
	var err error
	answer := func(out []byte) []byte {
		if err != nil {
			return redcon.AppendError(out, requestError(err, cmd))
		}
		return enc(out, &v)
	}
	c.offLoop(answer, func() { v, err = work() })
}

// offLoop runs work, which may wait on Redis, and then owes answer's
// reply: at once where the connection may wait (blocking); else in a
// goroutine, landing through its transport as RL.RESET does. work must not
// touch the client; answer runs on the connection's goroutine or loop.
func (c *client) offLoop(answer func([]byte) []byte, work func()) {
	if c.conn.Blocking() {
		work()
		c.out = answer(c.out)
		return
	}
	g := c.newSegment()
	g.answer = answer
	c.flying = g
	go func() {
		work()
		c.conn.Land(g)
	}()
}

// appendLease encodes a lease decision in form (see arrayForm): a map of
// leaseFields after RL.REPLY MAP, else an array in their order.
func appendLease(dst []byte, d *engine.LeaseDecision, form int) []byte {
	vals := [4]int64{0, d.Limit, d.Remaining, ceilMillis(d.RetryAfter)}
	if d.Allowed {
		vals[0] = 1
	}
	if form != arrayForm {
		dst = resp.AppendMapLen(dst, len(leaseFields), form)
	} else {
		dst = redcon.AppendArray(dst, len(leaseFields))
	}
	for i, v := range vals {
		if form != arrayForm {
			dst = redcon.AppendBulkString(dst, leaseFields[i])
		}
		dst = redcon.AppendInt(dst, v)
	}
	if form != arrayForm {
		dst = redcon.AppendBulkString(dst, leaseFields[4])
	}
	return redcon.AppendBulkString(dst, d.ID)
}
