package respserver

import (
	"context"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisadmin"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/service"
)

// Reservations, for a cost known only after the work:
//
//	RL.RESERVE RL.TOKEN key capacity rate period estimate [TTL ttl]
//	RL.RESERVE POLICY name key estimate [TTL ttl]
//	RL.SETTLE id actual
//
// RL.RESERVE is an inline decision command with RL.RESERVE before it (as
// RL.EXPLAIN reads one), its cost the estimate, which must be given; or,
// by a named policy, the POLICY form RL.ACQUIRE and RL.RESET take. It is a
// decision, queued and batched as RL.ALLOW is, answered with the usual
// fields and the reservation's id. RL.SETTLE waits on Redis and is not
// batched, so it runs off the loop as RL.RELEASE does.

// shapeReserve: RL.RESERVE's reply, the decision's fields then the
// reservation's id (nil when refused): the array's sixth element, or the
// map's "reservation".
const shapeReserve = shapeThrottleOver + 2 // after RL.EXPLAIN's

func reserveCommands() []*command {
	return []*command{
		{
			name: "rl.reserve", minArgs: 5, maxArgs: 10, flags: []string{"write"}, group: "sluice",
			summary: "Reserve an estimate of a cost known after the work: RL.RESERVE RL.<algorithm> key … period estimate [TTL ttl], or POLICY name key estimate [TTL ttl]. Taken from the budget at once, all or nothing; replies the decision and a reservation id to settle with RL.SETTLE.",
			args: []redisadmin.Arg{{Name: "command", Type: "string"}, {Name: "arg", Type: "string", Multiple: true},
				{Name: "ttl", Type: "string", Optional: true}},
			parse: parseReserve,
		},
		{
			name: "rl.settle", minArgs: 3, maxArgs: 3, flags: []string{"write"}, group: "sluice",
			summary: "Settle a reservation at its actual cost: the excess over the estimate is charged (even over the limit), the rest given back. Replies the decision; a second settle, or one after the TTL, is an error.",
			args:    []redisadmin.Arg{{Name: "id", Type: "string"}, {Name: "actual", Type: "integer"}},
			run:     runSettle,
		},
	}
}

// parseReserve reads RL.RESERVE's two forms. TTL ttl, when given, ends
// the command; the inline form's own arguments are read by its command's
// parser, and must end with the estimate (its cost), with no PEEK or
// CHARGE.
func parseReserve(_ *command, args [][]byte) (service.Request, shape, string) {
	var ttl []byte
	if n := len(args); n >= 6 && resp.Is(args[n-2], "ttl") {
		ttl, args = args[n-1], args[:n-2]
	}
	var req service.Request
	if resp.Is(args[1], "policy") {
		if len(args) != 5 {
			return req, 0, errReserveUsage
		}
		req = service.Request{ByPolicy: true, Policy: str(args[2]), Key: str(args[3])}
		n, why := resp.ParseInt(args[4])
		if why != "" {
			return req, 0, invalidArg("estimate", args[4], why)
		}
		req.Cost = n
	} else {
		inner := lookup(args[1])
		if inner == nil || inner.parse == nil || !reservable[inner.name] {
			return req, 0, errReserveUsage
		}
		inArgs := args[1:]
		if len(inArgs) < inner.minArgs || (inner.maxArgs > 0 && len(inArgs) > inner.maxArgs) {
			return req, 0, arityError(inner.name)
		}
		var msg string
		if req, _, msg = inner.parse(inner, inArgs); msg != "" {
			return req, 0, msg
		}
		if req.Peek || req.Charge {
			return req, 0, errReserveOption
		}
		// The estimate is the command's cost, which it defaults to 1:
		// here it must be given. What follows the period is the cost
		// and, for RL.SLIDING, PRECISION n.
		tail := inArgs[inner.minArgs:]
		if inner.name == "rl.sliding" {
			tail, _, _ = parsePrecision(tail) // read already: it parsed
		}
		if len(tail) == 0 {
			return req, 0, errReserveEstimate
		}
	}
	if ttl != nil {
		d, why := engine.ParsePeriod(str(ttl))
		if why != "" {
			return req, 0, invalidArg("ttl", ttl, why)
		}
		req.ReserveTTL = d
	}
	req.Reserve = true
	return req, shapeReserve, ""
}

// reservable are the inline commands RL.RESERVE takes; the store refuses
// the algorithms that cannot give units back (the sliding log, the leaky
// bucket), with the reason.
var reservable = map[string]bool{"rl.fixed": true, "rl.sliding": true, "rl.log": true, "rl.token": true, "rl.leaky": true, "rl.gcra": true}

// appendReservation encodes RL.RESERVE's reply in form (see arrayForm):
// the decision's fields, then the reservation's id, nil when refused.
func appendReservation(dst []byte, d *engine.Decision, id string, form int) []byte {
	dst = appendFields(dst, d, shapeRL, form, 1)
	if form != arrayForm {
		dst = redcon.AppendBulkString(dst, "reservation")
	}
	if id == "" {
		return redcon.AppendNull(dst)
	}
	return redcon.AppendBulkString(dst, id)
}

// parseSettle reads RL.SETTLE id actual, the id copied: it outlives the
// read buffer when the settle runs off the loop.
func parseSettle(args [][]byte) (string, int64, string) {
	if len(args[1]) > maxReservationID {
		return "", 0, invalidArg("id", args[1], "no reservation id is that long")
	}
	id, msg := parseID(args[1])
	if msg != "" {
		return "", 0, msg
	}
	n, why := resp.ParseInt(args[2])
	if why != "" {
		return "", 0, invalidArg("actual", args[2], why)
	}
	return id, n, ""
}

// maxReservationID bounds an id a settle reads: ids are 16 hex digits, and
// an error reply quotes what it was given.
const maxReservationID = 128

func runSettle(c *client, args [][]byte) {
	id, actual, msg := parseSettle(args)
	if msg != "" {
		c.fail(msg)
		return
	}
	svc, form := c.s.cfg.Service, c.form()
	answerOffLoop(c, nil, func() (engine.Decision, error) { return svc.Settle(context.Background(), id, actual) },
		func(out []byte, d *engine.Decision) []byte { return appendFields(out, d, shapeRL, form, 0) })
}
