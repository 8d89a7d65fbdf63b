package respserver

import (
	"errors"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/service"
)

// Every error reply a connection can get is worded here, so the wording
// is consistent, a reviewer reads the whole surface in one file, and a
// value a client sent is always quoted, shortened and escaped (resp.Quote):
// an error reply is one line, and a 1 MB argument must not come back
// whole. Two texts are worded elsewhere, each where it is the only one of
// its kind: the protocol errors, which the parser finds as the bytes
// arrive (internal/resp, "Protocol error: …", sent here with ERR in front
// by protocolError), and the refusal of a connection past MaxConns, which
// server.go writes before the connection has a client to reply through.
// A store's or the service's error reaches a client through requestError.

// Redis's own texts, word for word: clients and tools match on them.
const (
	errNoAuth              = "NOAUTH Authentication required."
	errNoAuthHello         = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	errWrongPass           = "WRONGPASS invalid username-password pair or user is disabled."
	errNoPassword          = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	errNotInteger          = "ERR value is not an integer or out of range"
	errSyntax              = "ERR syntax error"
	errNoProto             = "NOPROTO unsupported protocol version"
	errHelloProto          = "ERR Protocol version is not an integer or out of range"
	errBadName             = "ERR Client names cannot contain spaces, newlines or special characters."
	errBadLibName          = "ERR lib-name cannot contain spaces, newlines or special characters."
	errBadLibVer           = "ERR lib-ver cannot contain spaces, newlines or special characters."
	errDBRange             = "ERR DB index is out of range"
	errKillID              = "ERR client-id should be greater than 0"
	errMaxAgeInteger       = "ERR maxage is not an integer or out of range"
	errMaxAgePositive      = "ERR maxage should be greater than 0"
	errNoSuchClient        = "ERR No such client"
	errInvalidClientID     = "ERR Invalid client ID"
	errExecWithoutMulti    = "ERR EXEC without MULTI"
	errDiscardWithoutMulti = "ERR DISCARD without MULTI"
)

// Redis's texts that repeat a client's value.

func helloOptionError(opt []byte) string {
	return "ERR Syntax error in HELLO option " + resp.Quote(opt)
}
func unrecognizedOption(opt []byte) string { return "ERR Unrecognized option " + resp.Quote(opt) }
func unknownClientType(t []byte) string    { return "ERR Unknown client type " + resp.Quote(t) }
func noSuchUser(user []byte) string        { return "ERR No such user " + resp.Quote(user) }

// Sluice's own texts: each says what was refused and what to do instead.
const (
	errInternal        = "ERR internal error"
	errInputBudget     = "ERR closing the connection: the input all clients have sent and not finished is over the server's limit (--max-input-memory), and this client holds the most"
	errScan            = "ERR SCAN is not supported: Sluice's keys are rate-limit states, not data to browse; DBSIZE and INFO keyspace count them"
	errTracingOff      = "ERR tracing is off: start sluice with OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set"
	errPrecision       = "ERR option PRECISION needs a number of sub-windows"
	errPeekTwice       = "ERR syntax error: PEEK given twice"
	errPeekOrCharge    = "ERR syntax error: give PEEK or CHARGE, once"
	errAllowUsage      = "ERR syntax error: RL.ALLOW policy key [cost] [PEEK | CHARGE] [DETAIL]"
	errExplainUsage    = "ERR syntax error: RL.EXPLAIN takes a decision command and its arguments: RL.EXPLAIN RL.ALLOW policy key [cost], RL.GCRA key burst rate period [cost], CL.THROTTLE …"
	errExplainCharge   = "ERR syntax error: RL.EXPLAIN decides as a peek, which takes nothing; explain without CHARGE"
	errResetUsage      = "ERR syntax error: RL.RESET POLICY name key [key ...]"
	errReleaseUsage    = "ERR syntax error: RL.RELEASE key lease_id, or RL.RELEASE POLICY name key lease_id"
	errReleasePolicy   = "ERR syntax error: RL.RELEASE POLICY name key lease_id"
	errReserveUsage    = "ERR syntax error: RL.RESERVE RL.<algorithm> key … period estimate [TTL ttl] (RL.TOKEN key capacity rate period estimate), or RL.RESERVE POLICY name key estimate [TTL ttl]"
	errReserveOption   = "ERR syntax error: RL.RESERVE takes the estimate as the cost, without PEEK or CHARGE; settle the actual cost with RL.SETTLE"
	errReserveEstimate = "ERR syntax error: RL.RESERVE needs the estimate: the command's cost, after its period"
	errMulti           = "ERR MULTI is not offered: each decision is atomic already, and a transaction cannot span a sidecar's local answers and its central Redis; send the commands as a plain pipeline (redis-py: pipeline(transaction=False); go-redis: Pipeline, not TxPipeline; ioredis: pipeline(), not multi(); node-redis: multi().execAsPipeline()). Commands are refused until EXEC or DISCARD"
	errInMulti         = "ERR not run: MULTI was refused, so commands are refused until EXEC or DISCARD"
	errExecAbort       = "EXECABORT Transaction discarded because MULTI is not offered: nothing was run"
)

// protocolError is the reply to a frame the parser refused (resp's
// "Protocol error: …" texts), as Redis sends it before closing.
func protocolError(msg string) string { return "ERR " + msg }

// invalidArg is the reply to an argument that does not parse.
func invalidArg(name string, v []byte, reason string) string {
	return "ERR invalid " + name + " " + resp.Quote(v) + ": " + reason
}

// tooManyArgs is the reply to a command of more arguments than the
// server keeps for one (Config.MaxArgs), which it has read to its end:
// RL.RESET of that many keys is sent in several commands.
func tooManyArgs(name []byte, maxArgs int) string {
	cmd := resp.Quote(name)
	if c := lookup(name); c != nil {
		cmd = "'" + c.name + "'"
	}
	return "ERR too many arguments for " + cmd + " command: at most " + strconv.Itoa(maxArgs) + ", its name included; send them in several commands"
}

// arityError is Redis's own text, so clients that match on it still do.
func arityError(name string) string {
	return "ERR wrong number of arguments for '" + name + "' command"
}

// unknownCommand is Redis's own text: the name, then the arguments' first
// 128 bytes, each quoted; bytes that are not printable ASCII are escaped.
func unknownCommand(args [][]byte) string {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	name := args[0]
	resp.Escape(&b, name[:min(len(name), 128)], false)
	b.WriteString("', with args beginning with: ")
	written := 0
	for _, a := range args[1:] {
		if written >= 128 {
			break
		}
		a = a[:min(len(a), 128-written)]
		b.WriteByte('\'')
		resp.Escape(&b, a, false)
		b.WriteString("' ")
		written += len(a) + 3
	}
	return b.String()
}

func unknownSubcommand(sub []byte, cmd string) string {
	return "ERR unknown subcommand " + resp.Quote(sub) + ". Try " + cmd + " HELP."
}

// requestError is the reply to a request the service refused: a
// *engine.ParamError with the parameter renamed to the command's own
// argument name, an unknown policy, or anything else as the store's error.
func requestError(err error, cmd *command) string {
	var pe *engine.ParamError
	var unknown *service.UnknownPolicyError
	var kind *service.PolicyKindError
	var gone *service.UnknownReservationError
	switch {
	case errors.As(err, &gone):
		return "ERR unknown or expired reservation " + resp.Quote([]byte(gone.ID)) + ": " + gone.Why()
	case errors.As(err, &unknown):
		return invalidArg("policy", []byte(unknown.Name), "no such policy")
	case errors.As(err, &kind) && kind.Concurrency:
		return invalidArg("policy", []byte(kind.Name), "a concurrency policy: use RL.ACQUIRE and RL.RELEASE")
	case errors.As(err, &kind):
		return invalidArg("policy", []byte(kind.Name), "not a concurrency policy: use RL.ALLOW")
	case errors.As(err, &pe):
		param := pe.Param
		if cmd != nil {
			if r, ok := cmd.rename[param]; ok {
				param = r
			}
		}
		return "ERR invalid " + param + " " + pe.Value + ": " + pe.Reason
	}
	return storeError(err)
}

// storeError is the reply when the store could not decide: Redis
// unreachable, a deadline passed.
func storeError(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "ERR ") {
		return msg
	}
	return "ERR " + msg
}
