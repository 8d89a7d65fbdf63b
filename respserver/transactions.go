package respserver

import (
	"strings"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/resp"
)

// MULTI, EXEC and DISCARD are not offered, and CLIENT TRACKING is
// accepted and does nothing: what clients send with their default options
// gets an answer that either works or says what to change.
//
// A transaction is not offered because it would promise what no sidecar
// can keep: each decision is atomic already (one script over one key, or
// every limit of a policy at once), and a transaction across several
// would have to span the sidecar's local answers (the deny cache, the
// local fallback) and the central Redis, which nothing makes atomic. A
// client whose pipelines are transactions by default (redis-py's
// pipeline(), go-redis's TxPipeline, ioredis's multi()) is told so by
// MULTI's error, which names the plain pipeline to use instead. As Redis
// does with a transaction that failed to queue, the commands after the
// refused MULTI are refused too, and EXEC answers EXECABORT: nothing the
// client meant as one transaction is charged behind its back.
//
// Client-side caching (CLIENT TRACKING) is what rueidis, Redis's own Go
// client, turns on by default with OPTIN: it then caches only the replies
// of commands its caller asks it to cache (DoCache), and never any other.
// Its command builder offers DoCache for Redis's read-only commands, which
// Sluice has not, and a command forced into it is sent inside MULTI,
// refused above (or with CLIENT CACHING, unknown here). A decision is not
// a value to cache, so a connection that tracks nothing loses nothing,
// and accepting the command lets rueidis connect with its defaults. No
// invalidation is ever sent.

func transactionCommands() []*command {
	return []*command{
		{name: "multi", minArgs: 1, maxArgs: 1, flags: []string{"fast"}, group: "transactions", inMulti: true,
			summary: "Refused: decisions are atomic per key already, and a transaction cannot span a sidecar and its Redis; send a plain pipeline (redis-py: pipeline(transaction=False)).",
			run:     runMulti},
		{name: "exec", minArgs: 1, maxArgs: 1, flags: []string{"fast"}, group: "transactions", inMulti: true,
			summary: "Ends a refused MULTI: EXECABORT, nothing was run.", run: runExec},
		{name: "discard", minArgs: 1, maxArgs: 1, flags: []string{"fast"}, group: "transactions", inMulti: true,
			summary: "Ends a refused MULTI.", run: runDiscard},
	}
}

func runMulti(c *client, _ [][]byte) {
	c.multi = true
	c.fail(errMulti)
}

func runExec(c *client, _ [][]byte) {
	if !c.multi {
		c.fail(errExecWithoutMulti)
		return
	}
	c.multi = false
	c.fail(errExecAbort)
}

func runDiscard(c *client, _ [][]byte) {
	if !c.multi {
		c.fail(errDiscardWithoutMulti)
		return
	}
	c.multi = false
	c.out = redcon.AppendOK(c.out)
}

// runClientTracking is CLIENT TRACKING ON|OFF [options]: its arguments
// are checked as Redis checks them, and it changes nothing.
func runClientTracking(c *client, args [][]byte) {
	if len(args) < 3 {
		c.fail(arityError("client|tracking"))
		return
	}
	if !resp.Is(args[2], "on") && !resp.Is(args[2], "off") {
		c.fail(errSyntax)
		return
	}
	for i := 3; i < len(args); i++ {
		switch strings.ToLower(str(args[i])) {
		case "bcast", "optin", "optout", "noloop":
		case "redirect", "prefix":
			if i++; i == len(args) {
				c.fail(errSyntax)
				return
			}
		default:
			c.fail(errSyntax)
			return
		}
	}
	c.out = redcon.AppendOK(c.out)
}
