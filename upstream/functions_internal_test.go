package upstream

import (
	"errors"
	"testing"

	"github.com/sluice-rl/sluice/internal/resp"
)

// Only an error about FUNCTION itself moves the store to EVALSHA.
func TestIsFunctionRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{resp.ReplyError("NOPERM this user has no permissions to run the 'function|load' command"), true},
		{resp.ReplyError("ERR unknown command 'FUNCTION', with args beginning with: 'LOAD'"), true},
		{resp.ReplyError("ERR unknown subcommand 'LOAD'. Try FUNCTION HELP."), true},
		{resp.ReplyError("ERR Error registering functions"), true},
		{resp.ReplyError("WRONGPASS invalid username-password pair or user is disabled."), false},
		{resp.ReplyError("NOAUTH Authentication required."), false},
		{resp.ReplyError("ERR Protocol error: unauthenticated bulk length"), false},
		{resp.ReplyError("ERR This instance has cluster support disabled"), false},
		{resp.ReplyError("READONLY You can't write against a read only replica."), false},
		{resp.ReplyError("OOM command not allowed when used memory > 'maxmemory'."), false},
		{resp.ReplyError("ERR DB index is out of range"), false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
	} {
		if got := isFunctionRefusal(tc.err); got != tc.want {
			t.Errorf("isFunctionRefusal(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}
