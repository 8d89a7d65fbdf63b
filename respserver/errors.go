package respserver

import (
	"errors"
	"strings"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/service"
)

// Every error a client can see is made here, so the wording is consistent
// and a value a client sent is always quoted, shortened and escaped: an
// error reply is one line, and a 1 MB argument must not come back whole.

const (
	errNoAuth      = "NOAUTH Authentication required."
	errNoAuthHello = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	errWrongPass   = "WRONGPASS invalid username-password pair or user is disabled."
	errNoPassword  = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	errNotInteger  = "ERR value is not an integer or out of range"
	errSyntax      = "ERR syntax error"
	errNoProto     = "NOPROTO unsupported protocol version"
	errBadName     = "ERR Client names cannot contain spaces, newlines or special characters."
	errDBRange     = "ERR DB index is out of range"
)

// maxQuoted is how much of a client's value an error message repeats.
const maxQuoted = 64

// invalidArg is the reply to an argument that does not parse.
func invalidArg(name string, v []byte, reason string) string {
	return "ERR invalid " + name + " " + resp.Quote(v) + ": " + reason
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
	switch {
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
