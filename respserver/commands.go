package respserver

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisadmin"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/service"
)

// command is one entry of the command table: its arity and documentation
// (for arity checks, COMMAND and COMMAND DOCS) and its handler. A decision
// command has parse, which turns arguments into a request to be queued;
// any other has run, which replies at once.
type command struct {
	name             string // lower case, as Redis names commands in errors
	minArgs, maxArgs int    // counting the name; maxArgs 0 means no maximum
	flags            []string
	firstKey         int // COMMAND's key positions, for cluster-aware clients
	lastKey          int
	keyStep          int
	group            string
	summary          string
	args             []redisadmin.Arg  // COMMAND DOCS
	noAuth           bool              // allowed before AUTH
	inMulti          bool              // run, not refused, after a refused MULTI (transactions.go)
	rename           map[string]string // engine parameter name → this command's

	parse func(cmd *command, args [][]byte) (service.Request, shape, string)
	run   func(c *client, args [][]byte)
}

// doc is what COMMAND and COMMAND DOCS say of the command.
func (cmd *command) doc() *redisadmin.Command {
	arity := -cmd.minArgs
	if cmd.minArgs == cmd.maxArgs {
		arity = cmd.minArgs
	}
	return &redisadmin.Command{Name: cmd.name, Arity: arity, Flags: cmd.flags, FirstKey: cmd.firstKey,
		LastKey: cmd.lastKey, KeyStep: cmd.keyStep, Group: cmd.group, Summary: cmd.summary, Args: cmd.args}
}

var commandTable map[string]*command

// commandList is the table in a stable order, for COMMAND and tests.
var commandList []*command

func init() {
	commandList = slices.Concat(decisionCommands(), leaseCommands(), reserveCommands(), connectionCommands(), transactionCommands(), explainCommands())
	commandTable = make(map[string]*command, len(commandList))
	for _, cmd := range commandList {
		commandTable[cmd.name] = cmd
	}
}

// lookup finds a command by name in any case, without allocating.
func lookup(name []byte) *command {
	var buf [16]byte
	if len(name) > len(buf) {
		return nil
	}
	for i, b := range name {
		buf[i] = resp.Lower(b)
	}
	return commandTable[string(buf[:len(name)])]
}

var (
	costPeekDocs = []redisadmin.Arg{{Name: "cost", Type: "integer", Optional: true}, {Name: "peek", Type: "pure-token", Optional: true},
		{Name: "charge", Type: "pure-token", Optional: true}}
	decideFlags = []string{"write", "fast"}
)

// inline describes an RL.<algorithm> command: the parameters after the key
// and before the period, in order, and which Limit field each fills.
type inline struct {
	name    string
	alg     engine.Algorithm
	params  []string // each "limit", "capacity", "burst" or "rate"
	summary string
}

func decisionCommands() []*command {
	inlines := []inline{
		{"rl.fixed", engine.FixedWindow, []string{"limit"}, "Fixed window: at most limit units per aligned window of period."},
		{"rl.sliding", engine.SlidingWindow, []string{"limit"}, "Sliding window counter: at most limit units per period, estimated from the current and previous windows (or n sub-windows with PRECISION n)."},
		{"rl.log", engine.SlidingLog, []string{"limit"}, "Sliding window log: at most limit units in any period, exactly."},
		{"rl.token", engine.TokenBucket, []string{"capacity", "rate"}, "Token bucket: bursts up to capacity, refilled at rate units per period."},
		{"rl.leaky", engine.LeakyBucket, []string{"capacity", "rate"}, "Leaky bucket: a queue of capacity drained at rate units per period; replies the delay to wait."},
		{"rl.gcra", engine.GCRA, []string{"burst", "rate"}, "GCRA: rate units per period with bursts of burst+1, as redis-cell."},
	}
	var cmds []*command
	for _, in := range inlines {
		docs := []redisadmin.Arg{{Name: "key", Type: "key"}}
		for _, p := range in.params {
			docs = append(docs, redisadmin.Arg{Name: p, Type: "integer"})
		}
		docs = append(docs, redisadmin.Arg{Name: "period", Type: "string"})
		docs = append(docs, costPeekDocs...)
		n, options := 3+len(in.params), 2
		if in.alg == engine.SlidingWindow {
			docs = append(docs, redisadmin.Arg{Name: "precision", Type: "integer", Optional: true})
			options += 2
		}
		cmds = append(cmds, &command{
			name: in.name, minArgs: n, maxArgs: n + options, flags: decideFlags,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice", summary: in.summary,
			args: docs, parse: in.parse,
		})
	}
	cmds = append(cmds,
		&command{
			name: "rl.allow", minArgs: 3, maxArgs: 6, flags: decideFlags,
			firstKey: 2, lastKey: 2, keyStep: 1, group: "sluice",
			summary: "Decide by a named policy from the policies file, by all its limits at once; the key is stored under the policy's prefix. DETAIL adds each limit's own reply.",
			args: append(append([]redisadmin.Arg{{Name: "policy", Type: "string"}, {Name: "key", Type: "key"}}, costPeekDocs...),
				redisadmin.Arg{Name: "detail", Type: "pure-token", Optional: true}),
			parse: parseAllow,
		},
		&command{
			name: "cl.throttle", minArgs: 5, maxArgs: 6, flags: decideFlags,
			firstKey: 1, lastKey: 1, keyStep: 1, group: "sluice",
			summary: "redis-cell compatible GCRA: replies [limited, limit, remaining, retry_after, reset_after] in seconds.",
			args: []redisadmin.Arg{{Name: "key", Type: "key"}, {Name: "max_burst", Type: "integer"}, {Name: "count", Type: "integer"},
				{Name: "period", Type: "integer"}, {Name: "quantity", Type: "integer", Optional: true}},
			rename: map[string]string{"burst": "max_burst", "rate": "count", "cost": "quantity"},
			parse:  parseThrottle,
		},
		&command{
			name: "rl.reset", minArgs: 2, flags: []string{"write"},
			firstKey: 1, lastKey: -1, keyStep: 1, group: "sluice",
			summary: "Forget the keys' state under every algorithm; replies the number of keys given. Or POLICY name key [key ...]: every limit and lease of the policy's keys.",
			args:    []redisadmin.Arg{{Name: "key", Type: "key", Multiple: true}},
			run:     runReset,
		},
		&command{
			name: "rl.reply", minArgs: 2, maxArgs: 2, flags: []string{"fast"}, group: "sluice",
			summary: "How this connection's decisions are replied: ARRAY (the default, under RESP2 and RESP3 alike) or MAP (named fields).",
			args:    []redisadmin.Arg{{Name: "form", Type: "string"}},
			run:     runReply,
		},
		&command{
			name: "rl.trace", minArgs: 2, maxArgs: 2, flags: []string{"fast"}, group: "sluice",
			summary: "Trace this connection's following decisions as children of a W3C traceparent; OFF stops.",
			args:    []redisadmin.Arg{{Name: "traceparent", Type: "string"}},
			run:     runTrace,
		},
	)
	return cmds
}

// parse reads key, the inline parameters, period, [cost] [PEEK | CHARGE].
func (in inline) parse(cmd *command, args [][]byte) (service.Request, shape, string) {
	req := service.Request{Key: str(args[1]), Limit: engine.Limit{Algorithm: in.alg}}
	for i, p := range in.params {
		n, why := resp.ParseInt(args[2+i])
		if why != "" {
			return req, 0, invalidArg(p, args[2+i], why)
		}
		switch p {
		case "rate", "limit":
			req.Limit.Rate = n
		default:
			req.Limit.Burst = n
		}
	}
	at := 2 + len(in.params)
	period, why := engine.ParsePeriod(str(args[at]))
	if why != "" {
		return req, 0, invalidArg("period", args[at], why)
	}
	req.Limit.Period = period
	tail := args[at+1:]
	if in.alg == engine.SlidingWindow {
		var msg string
		if tail, req.Limit.Precision, msg = parsePrecision(tail); msg != "" {
			return req, 0, msg
		}
	}
	var msg string
	req.Cost, req.Peek, req.Charge, msg = parseCostPeek(tail)
	return req, shapeRL, msg
}

// parsePrecision takes RL.SLIDING's option PRECISION n out of the tail
// [cost] [PRECISION n] [PEEK], in whichever place it comes, and returns the
// rest; 0 when it is not given.
func parsePrecision(tail [][]byte) ([][]byte, int64, string) {
	for i, a := range tail {
		if !resp.Is(a, "precision") {
			continue
		}
		if i+1 == len(tail) {
			return nil, 0, errPrecision
		}
		n, why := resp.ParseInt(tail[i+1])
		if why == "" && (n < 1 || n > engine.MaxPrecision) {
			why = "must be between 1 and " + strconv.Itoa(engine.MaxPrecision)
		}
		if why != "" {
			return nil, 0, invalidArg("precision", tail[i+1], why)
		}
		return append(tail[:i:i], tail[i+2:]...), n, ""
	}
	return tail, 0, ""
}

// parseAllow reads RL.ALLOW policy key [cost] [PEEK | CHARGE] [DETAIL], DETAIL
// anywhere after the key; the service finds the policy.
func parseAllow(cmd *command, args [][]byte) (service.Request, shape, string) {
	req := service.Request{ByPolicy: true, Policy: str(args[1]), Key: str(args[2])}
	tail := args[3:]
	for i, a := range tail {
		if resp.Is(a, "detail") {
			req.Detail = true
			tail = append(tail[:i:i], tail[i+1:]...)
			break
		}
	}
	if len(tail) > 2 {
		return req, 0, errAllowUsage
	}
	var msg string
	req.Cost, req.Peek, req.Charge, msg = parseCostPeek(tail)
	return req, shapeRL, msg
}

// parseThrottle reads CL.THROTTLE key max_burst count period [quantity],
// with period in whole seconds, as redis-cell does.
func parseThrottle(cmd *command, args [][]byte) (service.Request, shape, string) {
	req := service.Request{Key: str(args[1]), Limit: engine.Limit{Algorithm: engine.GCRA}, Cost: 1}
	var vals [4]int64
	names := [4]string{"max_burst", "count", "period", "quantity"}
	for i := 0; i < 4 && 2+i < len(args); i++ {
		n, why := resp.ParseInt(args[2+i])
		if why != "" {
			return req, 0, invalidArg(names[i], args[2+i], why)
		}
		vals[i] = n
	}
	if maxSeconds := int64(engine.MaxPeriod / time.Second); vals[2] < 1 || vals[2] > maxSeconds {
		return req, 0, invalidArg("period", args[4], "must be a whole number of seconds between 1 and "+strconv.FormatInt(maxSeconds, 10))
	}
	req.Limit.Burst, req.Limit.Rate, req.Limit.Period = vals[0], vals[1], time.Duration(vals[2])*time.Second
	if len(args) > 5 {
		req.Cost = vals[3]
	}
	sh := shapeThrottle
	// redis-cell answers a quantity that could never fit as a refusal
	// that takes nothing, with the key's current numbers.
	if req.Cost > req.Limit.Burst+1 && req.Limit.Burst >= 0 {
		req.Cost, sh = 0, shapeThrottleOver
	}
	return req, sh, ""
}

// runReset is RL.RESET key [key ...], or RL.RESET POLICY name key [key
// ...], which clears every limit and lease of the policy's keys (a first
// argument POLICY, in any case, starts that form, as in RL.ACQUIRE). It
// waits on Redis, so on an event loop it runs off the loop: the
// connection's later commands wait for it, and every other connection is
// served meanwhile.
func runReset(c *client, args [][]byte) {
	byPolicy, policy, keys, msg := parseReset(args)
	if msg != "" {
		c.fail(msg)
		return
	}
	svc := c.s.cfg.Service
	reset := func() error {
		if byPolicy {
			return svc.ResetPolicy(context.Background(), policy, keys)
		}
		return svc.Reset(context.Background(), keys)
	}
	if c.conn.Blocking() {
		if err := reset(); err != nil {
			c.owe(requestError(err, nil)) // the service counted it
			return
		}
		c.out = redcon.AppendInt(c.out, int64(len(keys)))
		return
	}
	g := c.newSegment()
	g.reset = keys
	c.flying = g
	go func() {
		g.resetErr = reset()
		c.conn.Land(g)
	}()
}

// parseReset reads RL.RESET's arguments, copied: they outlive the read
// buffer when the reset runs off the loop. byPolicy is the form, not an
// empty policy: RL.RESET POLICY "" key names no policy, and resets nothing.
func parseReset(args [][]byte) (byPolicy bool, policy string, keys []string, msg string) {
	from := 1
	if resp.Is(args[1], "policy") {
		if len(args) < 4 {
			return false, "", nil, errResetUsage
		}
		byPolicy, policy, from = true, string(args[2]), 3
	}
	keys = make([]string, len(args)-from)
	for i, k := range args[from:] {
		keys[i] = string(k)
	}
	return byPolicy, policy, keys, ""
}

// parseCostPeek reads the optional tail of every RL.* decision command:
// [cost] [PEEK | CHARGE]. The cost defaults to 1. CHARGE records a cost
// known after the work: taken even over the limit (engine.Request's
// Charge).
func parseCostPeek(tail [][]byte) (cost int64, peek, charge bool, msg string) {
	cost = 1
	if n := len(tail); n > 0 {
		peek, charge = resp.Is(tail[n-1], "peek"), resp.Is(tail[n-1], "charge")
		if peek || charge {
			tail = tail[:n-1]
		}
	}
	switch len(tail) {
	case 0:
	case 1:
		switch {
		case peek && resp.Is(tail[0], "peek"):
			return 0, false, false, errPeekTwice
		case (peek || charge) && (resp.Is(tail[0], "peek") || resp.Is(tail[0], "charge")):
			return 0, false, false, errPeekOrCharge
		}
		n, why := resp.ParseInt(tail[0])
		if why != "" {
			return 0, false, false, invalidArg("cost", tail[0], why)
		}
		cost = n
	default:
		return 0, false, false, invalidArg("option", tail[1], "expected PEEK or CHARGE")
	}
	return cost, peek, charge, ""
}
