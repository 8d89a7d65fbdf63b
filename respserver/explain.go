package respserver

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/redisadmin"
	"github.com/sluice-rl/sluice/service"
)

func explainCommands() []*command {
	return []*command{{
		name: "rl.explain", minArgs: 3, flags: []string{"readonly", "fast"},
		firstKey: 0, lastKey: 0, keyStep: 0, group: "sluice",
		summary: "Explain the decision a decision command (RL.ALLOW, RL.<algorithm>, CL.THROTTLE) would get now, as a peek that takes nothing: the policy, each limit's own decision and state, the path that decided and why, the configuration's digest, as JSON.",
		args: []redisadmin.Arg{{Name: "command", Type: "string"},
			{Name: "arg", Type: "string", Optional: true, Multiple: true}},
		run: runExplain,
	}}
}

// RL.EXPLAIN runs off the decision path, as RL.ACQUIRE does (offLoop):
// it decides its peek in a batch of its own, then reads each limit's
// state back from the store (service.Batch.ExplainHeld), a read no plain
// decision ever makes and which must not hold an event loop. The
// connection's replies keep their order: a command after it waits for
// its answer.
func runExplain(c *client, args [][]byte) {
	cmd := lookup(args[0])
	req, msg := parseExplain(args)
	if msg != "" {
		c.fail(msg)
		return
	}
	// The request aliases the connection's input, which the work below
	// may outlive.
	req.Key, req.Policy = strings.Clone(req.Key), strings.Clone(req.Policy)
	svc := c.s.cfg.Service
	b := svc.NewBatch().From("resp")
	b.Trace = c.trace
	i, err := b.Add(req)
	if err != nil {
		c.owe(requestError(err, cmd)) // the service counted it
		return
	}
	answerOffLoop(c, cmd, func() (service.Explanation, error) {
		svc.DecideWait(b)
		return b.ExplainHeld(context.Background(), i)
	}, func(out []byte, e *service.Explanation) []byte {
		// An Explanation holds strings, numbers, booleans and maps of
		// numbers only, which always encode (invalid UTF-8 as U+FFFD);
		// the JSON escapes every control byte, so the document is one
		// line however odd the key.
		doc, _ := json.Marshal(e)
		return redcon.AppendBulk(out, doc)
	})
}

// parseExplain reads RL.EXPLAIN command arg …: the command's own parser
// reads its arguments, and the request becomes a peek, so that asking why
// never spends what it asks about.
func parseExplain(args [][]byte) (service.Request, string) {
	inner := lookup(args[1])
	if inner == nil || inner.parse == nil || inner.name == "rl.explain" {
		return service.Request{}, errExplainUsage
	}
	inArgs := args[1:]
	if len(inArgs) < inner.minArgs || (inner.maxArgs > 0 && len(inArgs) > inner.maxArgs) {
		return service.Request{}, arityError(inner.name)
	}
	req, _, msg := inner.parse(inner, inArgs)
	if msg != "" {
		return req, msg
	}
	if req.Charge {
		return req, errExplainCharge
	}
	req.Peek, req.Detail = true, false
	return req, ""
}
