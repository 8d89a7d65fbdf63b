package respserver

import (
	"encoding/json"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/redisadmin"
	"github.com/sluice-rl/sluice/service"
)

// shapeExplain: RL.EXPLAIN's reply, the decision's service.Explanation as
// one JSON bulk string, the same document the HTTP check and the gRPC door
// send, so that one parser reads all three.
const shapeExplain = shapeThrottleOver + 1

func explainCommands() []*command {
	return []*command{{
		name: "rl.explain", minArgs: 3, flags: []string{"readonly", "fast"},
		firstKey: 0, lastKey: 0, keyStep: 0, group: "sluice",
		summary: "Explain the decision a decision command (RL.ALLOW, RL.<algorithm>, CL.THROTTLE) would get now, as a peek that takes nothing: the policy, each limit's own decision and state, the path that decided and why, the configuration's digest, as JSON.",
		args: []redisadmin.Arg{{Name: "command", Type: "string"},
			{Name: "arg", Type: "string", Optional: true, Multiple: true}},
		parse: parseExplain,
	}}
}

// parseExplain reads RL.EXPLAIN command arg …: the command's own parser
// reads its arguments, and the request becomes a peek, so that asking why
// never spends what it asks about.
func parseExplain(_ *command, args [][]byte) (service.Request, shape, string) {
	inner := lookup(args[1])
	if inner == nil || inner.parse == nil || inner.name == "rl.explain" {
		return service.Request{}, 0, errExplainUsage
	}
	inArgs := args[1:]
	if len(inArgs) < inner.minArgs || (inner.maxArgs > 0 && len(inArgs) > inner.maxArgs) {
		return service.Request{}, 0, arityError(inner.name)
	}
	req, _, msg := inner.parse(inner, inArgs)
	if msg != "" {
		return req, 0, msg
	}
	if req.Charge {
		return req, 0, errExplainCharge
	}
	req.Peek, req.Detail = true, false
	return req, shapeExplain, ""
}

// appendExplanation encodes request i's explanation; its Result has been
// checked. The JSON escapes every control byte, so the document is one
// line however odd the key.
func appendExplanation(dst []byte, b *service.Batch, i int) []byte {
	e, err := b.Explain(i)
	if err != nil {
		return redcon.AppendError(dst, requestError(err, nil))
	}
	// An Explanation holds strings, numbers and booleans only, which
	// always encode (invalid UTF-8 as U+FFFD).
	doc, _ := json.Marshal(&e)
	return redcon.AppendBulk(dst, doc)
}
