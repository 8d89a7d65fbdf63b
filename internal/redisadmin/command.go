package redisadmin

import (
	"strings"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/resp"
)

// Command is what COMMAND and COMMAND DOCS say of a command: redis-cli
// turns the docs into its inline hints, and cluster-aware clients read the
// key positions.
type Command struct {
	Name                       string // lower case
	Arity                      int    // the exact count, or minus the minimum
	Flags                      []string
	FirstKey, LastKey, KeyStep int
	Group, Summary             string
	Args                       []Arg
}

// Arg documents one argument for COMMAND DOCS.
type Arg struct {
	Name     string
	Type     string // key, integer, string, pure-token
	Optional bool
	Multiple bool
}

// AppendCommandInfo writes one COMMAND entry in Redis 7's ten-field form.
func AppendCommandInfo(dst []byte, c *Command) []byte {
	dst = redcon.AppendArray(dst, 10)
	dst = redcon.AppendBulkString(dst, c.Name)
	dst = redcon.AppendInt(dst, int64(c.Arity))
	dst = redcon.AppendArray(dst, len(c.Flags))
	for _, f := range c.Flags {
		dst = redcon.AppendString(dst, f)
	}
	dst = redcon.AppendInt(dst, int64(c.FirstKey))
	dst = redcon.AppendInt(dst, int64(c.LastKey))
	dst = redcon.AppendInt(dst, int64(c.KeyStep))
	dst = redcon.AppendArray(dst, 1) // ACL categories
	dst = redcon.AppendString(dst, "@"+c.Group)
	dst = redcon.AppendArray(dst, 0)  // tips
	dst = redcon.AppendArray(dst, 0)  // key specs
	return redcon.AppendArray(dst, 0) // subcommands
}

// AppendCommandDocs writes one command's COMMAND DOCS map, a RESP3 map or
// RESP2's flat array (proto).
func AppendCommandDocs(dst []byte, c *Command, proto int) []byte {
	dst = resp.AppendMapLen(dst, 5, proto)
	dst = redcon.AppendBulkString(dst, "summary")
	dst = redcon.AppendBulkString(dst, c.Summary)
	dst = redcon.AppendBulkString(dst, "since")
	dst = redcon.AppendBulkString(dst, "0.1.0")
	dst = redcon.AppendBulkString(dst, "group")
	dst = redcon.AppendBulkString(dst, c.Group)
	dst = redcon.AppendBulkString(dst, "complexity")
	dst = redcon.AppendBulkString(dst, "O(1)")
	dst = redcon.AppendBulkString(dst, "arguments")
	dst = redcon.AppendArray(dst, len(c.Args))
	for _, a := range c.Args {
		n := 2
		var flags []string
		if a.Optional {
			flags = append(flags, "optional")
		}
		if a.Multiple {
			flags = append(flags, "multiple")
		}
		if len(flags) > 0 {
			n++
		}
		if a.Type == "pure-token" {
			n++
		}
		dst = resp.AppendMapLen(dst, n, proto)
		dst = redcon.AppendBulkString(dst, "name")
		dst = redcon.AppendBulkString(dst, a.Name)
		dst = redcon.AppendBulkString(dst, "type")
		dst = redcon.AppendBulkString(dst, a.Type)
		if a.Type == "pure-token" {
			dst = redcon.AppendBulkString(dst, "token")
			dst = redcon.AppendBulkString(dst, strings.ToUpper(a.Name))
		}
		if len(flags) > 0 {
			dst = redcon.AppendBulkString(dst, "flags")
			dst = redcon.AppendArray(dst, len(flags))
			for _, f := range flags {
				dst = redcon.AppendString(dst, f)
			}
		}
	}
	return dst
}
