package respserver

import (
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/resp"
)

// shape is how a decision is written back.
type shape uint8

const (
	// shapeRL: [allowed, limit, remaining, retry_after_ms, reset_after_ms],
	// or a map of those names after RL.REPLY MAP.
	shapeRL shape = iota
	// shapeLeaky: shapeRL plus delay_ms.
	shapeLeaky
	// shapeThrottle: redis-cell's CL.THROTTLE reply, always an array:
	// [limited, limit, remaining, retry_after_s, reset_after_s].
	shapeThrottle
	// shapeThrottleOver: CL.THROTTLE for a quantity above max_burst+1,
	// which redis-cell refuses without taking anything.
	shapeThrottleOver
)

// Field names of the decision map (RL.REPLY MAP) and of the table in docs/commands.md.
var decisionFields = [...]string{"allowed", "limit", "remaining", "retry_after_ms", "reset_after_ms", "delay_ms"}

// A decision's reply is an array under RESP2 and RESP3 alike, unless the
// connection asked for the named map (RL.REPLY MAP). HELLO 3 alone does
// not turn it into a map: node-redis 6 says HELLO 3 by default, and code
// written for the array (r[0] === 0: refused) would read a map's r[0] as
// undefined and admit everything. A form is what appendDecision is told:
// arrayForm, or the protocol (2 or 3) a map is written in (resp's
// AppendMapLen: RESP2 writes a map as a flat array of name, value pairs).
const arrayForm = 0

// runReply is RL.REPLY ARRAY|MAP: the connection's decision replies from
// now on, arrays (the default) or maps of decisionFields' names.
func runReply(c *client, args [][]byte) {
	switch {
	case resp.Is(args[1], "array"):
		c.named = false
	case resp.Is(args[1], "map"):
		c.named = true
	default:
		c.fail(invalidArg("form", args[1], "must be ARRAY or MAP"))
		return
	}
	c.out = redcon.AppendOK(c.out)
}

// form is how the connection's decisions are written (see arrayForm).
func (c *client) form() int {
	if c.named {
		return c.proto
	}
	return arrayForm
}

// appendDecision encodes d in form (see arrayForm). It allocates nothing
// when dst has room.
func appendDecision(dst []byte, d *engine.Decision, sh shape, form int) []byte {
	switch sh {
	case shapeThrottle, shapeThrottleOver:
		limited, retry := int64(0), int64(-1)
		if !d.Allowed {
			limited, retry = 1, cellSeconds(d.RetryAfter)
		}
		if sh == shapeThrottleOver {
			limited, retry = 1, -1
		}
		dst = redcon.AppendArray(dst, 5)
		dst = redcon.AppendInt(dst, limited)
		dst = redcon.AppendInt(dst, d.Limit)
		dst = redcon.AppendInt(dst, d.Remaining)
		dst = redcon.AppendInt(dst, retry)
		return redcon.AppendInt(dst, cellSeconds(d.ResetAfter))
	}
	return appendFields(dst, d, sh, form, 0)
}

// appendFields encodes d's fields as RL.* replies them, announcing extra
// more entries after them (DETAIL's).
func appendFields(dst []byte, d *engine.Decision, sh shape, form, extra int) []byte {
	n := 5
	if sh == shapeLeaky {
		n = 6
	}
	vals := [6]int64{0, d.Limit, d.Remaining, ceilMillis(d.RetryAfter), ceilMillis(d.ResetAfter), ceilMillis(d.Delay)}
	if d.Allowed {
		vals[0] = 1
	}
	if form != arrayForm {
		dst = resp.AppendMapLen(dst, n+extra, form)
		for i := range n {
			dst = redcon.AppendBulkString(dst, decisionFields[i])
			dst = redcon.AppendInt(dst, vals[i])
		}
		return dst
	}
	dst = redcon.AppendArray(dst, n+extra)
	for i := range n {
		dst = redcon.AppendInt(dst, vals[i])
	}
	return dst
}

// appendDetail encodes RL.ALLOW … DETAIL's reply: d as usual, then each
// limit's own reply under its name, in the policy's order. As a map, it
// gains one entry, "detail", a map of name → reply; as an array, one
// trailing element, a flat array of name, reply pairs, as RESP2 writes a
// map, under RESP3 too (one shape for both).
func appendDetail(dst []byte, d *engine.Decision, sh shape, form int, names []engine.NamedLimit, parts []engine.Decision) []byte {
	dst = appendFields(dst, d, sh, form, 1)
	if form != arrayForm {
		dst = redcon.AppendBulkString(dst, "detail")
	}
	dst = resp.AppendMapLen(dst, len(names), max(form, 2))
	for j, l := range names {
		psh := shapeRL
		if l.Limit.Algorithm == engine.LeakyBucket {
			psh = shapeLeaky
		}
		dst = redcon.AppendBulkString(dst, l.Name)
		dst = appendFields(dst, &parts[j], psh, form, 0)
	}
	return dst
}

// ceilMillis rounds up to whole milliseconds, so that a client that waits
// retry_after_ms is never early.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// cellSeconds rounds as redis-cell does: whole seconds, plus one when the
// sub-second part holds at least a millisecond.
func cellSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second >= time.Millisecond {
		s++
	}
	return s
}
