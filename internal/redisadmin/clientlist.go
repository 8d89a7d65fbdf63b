package redisadmin

import "strconv"

// Client is what one CLIENT LIST line says of a connection.
type Client struct {
	ID           int64
	Addr, LAddr  string
	FD           int32 // -1 when the connection has none
	Name         string
	Age, Idle    int64 // seconds
	Monitor      bool  // flags=O instead of N
	QBuf         int64 // input read, not yet run
	QBufFree     int64 // the rest of the input buffer
	OMem, TotMem int64
	Cmd          string // the last command, "NULL" before the first
	Resp         int
	LibName      string
	LibVer       string
}

// AppendClientLine writes one CLIENT LIST line of c, without its line
// break, with Redis 7.2's fields in their order, so that tools that split
// it keep working. The fields that describe what Sluice has not
// (databases, pub/sub, MULTI, tracking) read as a Redis connection without
// them does; argv-mem and the reply buffer figures are 0, as replies are
// written as each read is answered.
func AppendClientLine(dst []byte, c Client) []byte {
	num := func(key string, n int64) {
		dst = append(dst, ' ')
		dst = append(dst, key...)
		dst = append(dst, '=')
		dst = strconv.AppendInt(dst, n, 10)
	}
	text := func(key, v string) {
		dst = append(dst, ' ')
		dst = append(dst, key...)
		dst = append(dst, '=')
		dst = append(dst, v...)
	}
	flags := "N"
	if c.Monitor {
		flags = "O"
	}
	dst = append(dst, "id="...)
	dst = strconv.AppendInt(dst, c.ID, 10)
	text("addr", c.Addr)
	text("laddr", c.LAddr)
	num("fd", int64(c.FD))
	text("name", c.Name)
	num("age", c.Age)
	num("idle", c.Idle)
	text("flags", flags)
	for _, k := range []string{"db", "sub", "psub", "ssub"} {
		num(k, 0)
	}
	num("multi", -1)
	num("watch", 0)
	num("qbuf", c.QBuf)
	num("qbuf-free", c.QBufFree)
	for _, k := range []string{"argv-mem", "multi-mem", "rbs", "rbp", "obl", "oll"} {
		num(k, 0)
	}
	num("omem", c.OMem)
	num("tot-mem", c.TotMem)
	text("events", "r")
	text("cmd", c.Cmd)
	text("user", "default")
	num("redir", -1)
	num("resp", int64(c.Resp))
	text("lib-name", c.LibName)
	text("lib-ver", c.LibVer)
	return dst
}

// ClientHelp is CLIENT HELP's text, one line an element, as Redis 7
// words it for the subcommands Sluice answers.
var ClientHelp = []string{
	"CLIENT <subcommand> [<arg> ...]. Subcommands are:",
	"GETNAME", "    Return the name of the current connection.",
	"ID", "    Return the ID of the current connection.",
	"INFO", "    Return information about the current client connection.",
	"KILL <ip:port>", "    Kill connection made from <ip:port>.",
	"KILL <option> <value> [<option> <value> [...]]",
	"    Kill connections. Options are:",
	"    * ADDR (<ip:port>|<unixsocket>:0)", "      Kill connections made from the specified address",
	"    * LADDR (<ip:port>|<unixsocket>:0)", "      Kill connections made to specified local address",
	"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", "      Kill connections by type.",
	"    * USER <username>", "      Kill connections authenticated by <username>.",
	"    * SKIPME (YES|NO)", "      Skip killing current connection (default: yes).",
	"    * ID <client-id>", "      Kill connections by client id.",
	"    * MAXAGE <maxage>", "      Kill connections older than the specified age.",
	"LIST [options ...]", "    Return information about client connections. Options:",
	"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", "      Return clients of specified type.",
	"    * ID <client-id> [<client-id> ...]", "      Return clients of specified IDs only.",
	"SETINFO <option> <value>", "    Set LIB-NAME or LIB-VER of the current connection.",
	"SETNAME <name>", "    Assign the name <name> to the current connection.",
	"TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT] [NOLOOP]",
	"    Accepted and ignored: Sluice's replies are never cached.",
}

// CommandHelp is COMMAND HELP's text.
var CommandHelp = []string{
	"COMMAND <subcommand> [<arg> ...]. Subcommands are:",
	"(no subcommand)", "    Return details about all commands.",
	"COUNT", "    Return the total number of commands.",
	"DOCS [<command-name> ...]", "    Return documentary information about commands.",
	"INFO [<command-name> ...]", "    Return details about the given commands.",
	"LIST", "    Return the names of all commands.",
}
