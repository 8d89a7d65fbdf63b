package respserver

import (
	"crypto/subtle"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisadmin"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/internal/version"
	"github.com/sluice-rl/sluice/service"
)

// The commands clients send on connect and tools use. Their replies and
// error texts follow Redis 7, so clients that match on them keep working.

func connectionCommands() []*command {
	return []*command{
		{name: "ping", minArgs: 1, maxArgs: 2, flags: []string{"fast"}, group: "connection",
			summary: "Returns PONG, or the message given.", args: []redisadmin.Arg{{Name: "message", Type: "string", Optional: true}}, run: runPing},
		{name: "echo", minArgs: 2, maxArgs: 2, flags: []string{"fast"}, group: "connection",
			summary: "Returns the message given.", args: []redisadmin.Arg{{Name: "message", Type: "string"}}, run: runEcho},
		{name: "hello", minArgs: 1, flags: []string{"noauth", "fast"}, group: "connection", noAuth: true,
			summary: "Chooses RESP2 or RESP3, optionally authenticates and names the connection; replies the server's details.",
			args: []redisadmin.Arg{{Name: "protover", Type: "integer", Optional: true}, {Name: "auth", Type: "string", Optional: true},
				{Name: "setname", Type: "string", Optional: true}}, run: runHello},
		{name: "auth", minArgs: 2, maxArgs: 3, flags: []string{"noauth", "fast"}, group: "connection", noAuth: true,
			summary: "Authenticates the connection with the password set by --requirepass.",
			args:    []redisadmin.Arg{{Name: "username", Type: "string", Optional: true}, {Name: "password", Type: "string"}}, run: runAuth},
		{name: "select", minArgs: 2, maxArgs: 2, flags: []string{"fast"}, group: "connection",
			summary: "Accepts database 0 only.", args: []redisadmin.Arg{{Name: "index", Type: "integer"}}, run: runSelect},
		{name: "client", minArgs: 2, flags: []string{"fast"}, group: "connection",
			summary: "CLIENT SETNAME, GETNAME, SETINFO, ID, INFO, LIST [TYPE type | ID id …], KILL (addr, or filters ID, ADDR, LADDR, TYPE, USER, SKIPME, MAXAGE) and TRACKING (accepted, a no-op).",
			args:    []redisadmin.Arg{{Name: "subcommand", Type: "string"}, {Name: "arg", Type: "string", Optional: true, Multiple: true}}, run: runClient},
		{name: "command", minArgs: 1, flags: []string{"fast"}, group: "server",
			summary: "Describes the commands: COMMAND, COMMAND COUNT, COMMAND INFO, COMMAND DOCS, COMMAND LIST.",
			args:    []redisadmin.Arg{{Name: "subcommand", Type: "string", Optional: true}, {Name: "command-name", Type: "string", Optional: true, Multiple: true}}, run: runCommand},
		{name: "info", minArgs: 1, flags: []string{"fast"}, group: "server",
			summary: "Server, clients, persistence and stats sections, as Redis's INFO.",
			args:    []redisadmin.Arg{{Name: "section", Type: "string", Optional: true, Multiple: true}}, run: runInfo},
		{name: "dbsize", minArgs: 1, maxArgs: 1, flags: []string{"readonly", "fast"}, group: "server",
			summary: "Counts the keys this sidecar holds in its in-memory store: all of them without --upstream; with one, those of local fallback decisions only (the central Redis holds the rest).",
			run:     runDBSize},
		{name: "scan", minArgs: 2, flags: []string{"readonly"}, group: "generic",
			summary: "Refused: Sluice's keys are rate-limit states, not data to browse (so redis-cli --bigkeys and --memkeys stop with this error); DBSIZE and INFO keyspace count them.",
			args:    []redisadmin.Arg{{Name: "cursor", Type: "integer"}, {Name: "arg", Type: "string", Optional: true, Multiple: true}}, run: runScan},
		{name: "monitor", minArgs: 1, maxArgs: 1, flags: []string{"admin"}, group: "server",
			summary: "Streams every command the server runs, in Redis's MONITOR lines, each decision followed by -> and what it got: allowed, remaining, retry_after_ms and the path that decided it.",
			run:     runMonitor},
		{name: "quit", minArgs: 1, maxArgs: 1, flags: []string{"noauth", "fast"}, group: "connection", noAuth: true, inMulti: true,
			summary: "Replies OK and closes the connection.", run: runQuit},
		{name: "reset", minArgs: 1, maxArgs: 1, flags: []string{"noauth", "fast"}, group: "connection", noAuth: true, inMulti: true,
			summary: "Returns the connection to RESP2, no name, and (with --requirepass) not authenticated.", run: runResetConn},
	}
}

func runPing(c *client, args [][]byte) {
	if len(args) == 2 {
		c.out = redcon.AppendBulk(c.out, args[1])
		return
	}
	c.out = redcon.AppendString(c.out, "PONG")
}

func runEcho(c *client, args [][]byte) { c.out = redcon.AppendBulk(c.out, args[1]) }

func runQuit(c *client, _ [][]byte) {
	c.out = redcon.AppendOK(c.out)
	c.quit = true
}

func runResetConn(c *client, _ [][]byte) {
	c.infoMu.Lock()
	c.proto, c.name = 2, ""
	c.infoMu.Unlock()
	c.named = false
	c.unmonitor()
	c.multi = false
	c.authed = c.s.cfg.RequirePass == ""
	c.trace = trace.SpanContext{}
	c.out = redcon.AppendString(c.out, "RESET")
}

func runSelect(c *client, args [][]byte) {
	n, why := resp.ParseInt(args[1])
	switch {
	case why != "":
		c.fail(errNotInteger)
	case n != 0:
		c.fail(errDBRange)
	default:
		c.out = redcon.AppendOK(c.out)
	}
}

// checkPass compares in constant time, so a password cannot be guessed
// byte by byte from reply times. As in Redis, without a password the
// default user takes any password.
func (c *client) checkPass(user, pass []byte) bool {
	want := c.s.cfg.RequirePass
	okUser := user == nil || strings.EqualFold(str(user), "default")
	if want == "" {
		return okUser
	}
	return subtle.ConstantTimeCompare(pass, []byte(want)) == 1 && okUser
}

func runAuth(c *client, args [][]byte) {
	var user []byte
	pass := args[1]
	if len(args) == 3 {
		user, pass = args[1], args[2]
	}
	if c.s.cfg.RequirePass == "" && user == nil {
		c.fail(errNoPassword)
		return
	}
	if !c.checkPass(user, pass) {
		c.fail(errWrongPass)
		return
	}
	c.authed = true
	c.out = redcon.AppendOK(c.out)
}

func runHello(c *client, args [][]byte) {
	proto := c.proto
	if len(args) > 1 {
		n, why := resp.ParseInt(args[1])
		if why != "" {
			c.fail(errHelloProto)
			return
		}
		if n != 2 && n != 3 {
			c.fail(errNoProto)
			return
		}
		proto = int(n)
	}
	var user, pass, name []byte
	authGiven, nameGiven := false, false
	for i := 2; i < len(args); i++ {
		switch opt := args[i]; {
		case strings.EqualFold(str(opt), "auth") && i+2 < len(args):
			user, pass, authGiven = args[i+1], args[i+2], true
			i += 2
		case strings.EqualFold(str(opt), "setname") && i+1 < len(args):
			name, nameGiven = args[i+1], true
			i++
		default:
			c.fail(helloOptionError(opt))
			return
		}
	}
	if authGiven {
		if !c.checkPass(user, pass) {
			c.fail(errWrongPass)
			return
		}
		c.authed = true
	}
	if !c.authed {
		c.fail(errNoAuthHello)
		return
	}
	if nameGiven {
		if !validName(name) {
			c.fail(errBadName)
			return
		}
		c.infoMu.Lock()
		c.name = string(name)
		c.infoMu.Unlock()
	}
	c.infoMu.Lock()
	c.proto = proto
	c.infoMu.Unlock()
	c.out = resp.AppendMapLen(c.out, 7, c.proto)
	c.out = redcon.AppendBulkString(c.out, "server")
	c.out = redcon.AppendBulkString(c.out, "sluice")
	c.out = redcon.AppendBulkString(c.out, "version")
	c.out = redcon.AppendBulkString(c.out, version.String())
	c.out = redcon.AppendBulkString(c.out, "proto")
	c.out = redcon.AppendInt(c.out, int64(c.proto))
	c.out = redcon.AppendBulkString(c.out, "id")
	c.out = redcon.AppendInt(c.out, c.id)
	c.out = redcon.AppendBulkString(c.out, "mode")
	c.out = redcon.AppendBulkString(c.out, "standalone")
	c.out = redcon.AppendBulkString(c.out, "role")
	c.out = redcon.AppendBulkString(c.out, "master")
	c.out = redcon.AppendBulkString(c.out, "modules")
	c.out = redcon.AppendArray(c.out, 0)
}

// validName is Redis's rule for client names: printable ASCII, no spaces.
func validName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

func runClient(c *client, args [][]byte) {
	sub := args[1]
	want := func(n int) bool {
		if len(args) != n {
			c.fail(arityError("client|" + strings.ToLower(string(sub))))
			return false
		}
		return true
	}
	c.ranSubcommand("client", sub)
	switch strings.ToLower(str(sub)) {
	case "setname":
		if !want(3) {
			return
		}
		if !validName(args[2]) {
			c.fail(errBadName)
			return
		}
		c.infoMu.Lock()
		c.name = string(args[2])
		c.infoMu.Unlock()
		c.out = redcon.AppendOK(c.out)
	case "getname":
		if !want(2) {
			return
		}
		if c.name == "" {
			c.out = resp.AppendNull(c.out, c.proto)
			return
		}
		c.out = redcon.AppendBulkString(c.out, c.name)
	case "setinfo":
		if !want(4) {
			return
		}
		switch strings.ToLower(str(args[2])) {
		case "lib-name":
			if !validName(args[3]) {
				c.fail(errBadLibName)
				return
			}
			c.infoMu.Lock()
			c.libName = string(args[3])
			c.infoMu.Unlock()
		case "lib-ver":
			if !validName(args[3]) {
				c.fail(errBadLibVer)
				return
			}
			c.infoMu.Lock()
			c.libVer = string(args[3])
			c.infoMu.Unlock()
		default:
			c.fail(unrecognizedOption(args[2]))
			return
		}
		c.out = redcon.AppendOK(c.out)
	case "id":
		if !want(2) {
			return
		}
		c.out = redcon.AppendInt(c.out, c.id)
	case "info":
		if want(2) {
			runClientInfo(c, args)
		}
	case "list":
		runClientList(c, args)
	case "kill":
		runClientKill(c, args)
	case "tracking":
		runClientTracking(c, args)
	case "help":
		c.out = resp.AppendLines(c.out, redisadmin.ClientHelp)
	default:
		c.fail(unknownSubcommand(sub, "CLIENT"))
	}
}

func runCommand(c *client, args [][]byte) {
	if len(args) == 1 {
		c.out = redcon.AppendArray(c.out, len(commandList))
		for _, cmd := range commandList {
			c.out = redisadmin.AppendCommandInfo(c.out, cmd.doc())
		}
		return
	}
	c.ranSubcommand("command", args[1])
	switch strings.ToLower(str(args[1])) {
	case "count":
		if len(args) != 2 {
			c.fail(arityError("command|count"))
			return
		}
		c.out = redcon.AppendInt(c.out, int64(len(commandList)))
	case "list":
		c.out = redcon.AppendArray(c.out, len(commandList))
		for _, cmd := range commandList {
			c.out = redcon.AppendBulkString(c.out, cmd.name)
		}
	case "info":
		names := args[2:]
		if len(names) == 0 {
			c.out = redcon.AppendArray(c.out, len(commandList))
			for _, cmd := range commandList {
				c.out = redisadmin.AppendCommandInfo(c.out, cmd.doc())
			}
			return
		}
		c.out = redcon.AppendArray(c.out, len(names))
		for _, n := range names {
			if cmd := lookup(n); cmd != nil {
				c.out = redisadmin.AppendCommandInfo(c.out, cmd.doc())
			} else {
				c.out = resp.AppendNull(c.out, c.proto)
			}
		}
	case "docs":
		var cmds []*command
		if len(args) == 2 {
			cmds = commandList
		}
		for _, n := range args[2:] {
			if cmd := lookup(n); cmd != nil {
				cmds = append(cmds, cmd)
			}
		}
		c.out = resp.AppendMapLen(c.out, len(cmds), c.proto)
		for _, cmd := range cmds {
			c.out = redcon.AppendBulkString(c.out, cmd.name)
			c.out = redisadmin.AppendCommandDocs(c.out, cmd.doc(), c.proto)
		}
	case "help":
		c.out = resp.AppendLines(c.out, redisadmin.CommandHelp)
	default:
		c.fail(unknownSubcommand(args[1], "COMMAND"))
	}
}

// runInfo writes Redis's sections, with the fields redis-cli's modes read
// (--stat reads used_memory, blocked_clients, db0:keys and the
// persistence flags), then the sections of Config.Info; a section there
// named as one of Redis's (Memory) adds its fields to it.
func runInfo(c *client, args [][]byte) {
	s := c.s
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	count := func(n uint64) string { return strconv.FormatUint(n, 10) }
	redis := []redisadmin.Section{
		{Name: "Server", Fields: func() [][2]string {
			up := time.Since(s.started)
			// redis_version is what clients read to pick features; Sluice
			// answers as the Redis 7 its surface follows.
			f := [][2]string{{"redis_version", "7.0.0"}, {"sluice_version", version.String()},
				{"redis_mode", "standalone"}, {"os", runtime.GOOS}, {"arch_bits", "64"},
				{"go_version", runtime.Version()}, {"process_id", strconv.Itoa(os.Getpid())}}
			if a := s.Addr(); a != nil {
				f = append(f, [2]string{"listen_addr", a.String()})
			}
			return append(f, [2]string{"uptime_in_seconds", itoa(int64(up / time.Second))},
				[2]string{"uptime_in_days", itoa(int64(up / (24 * time.Hour)))})
		}},
		{Name: "Clients", Fields: func() [][2]string {
			return [][2]string{{"connected_clients", itoa(s.Clients())}, {"maxclients", strconv.Itoa(s.cfg.MaxConns)},
				{"blocked_clients", "0"}} // no command blocks
		}},
		{Name: "Memory", Fields: func() [][2]string {
			heap := redisadmin.HeapInUse()
			return [][2]string{{"used_memory", count(heap)}, {"used_memory_human", redisadmin.BytesToHuman(heap)},
				{"mem_allocator", "go"}}
		}},
		{Name: "Persistence", Fields: func() [][2]string {
			return [][2]string{{"loading", "0"}, {"rdb_bgsave_in_progress", "0"}, {"aof_rewrite_in_progress", "0"}}
		}},
		{Name: "Stats", Fields: func() [][2]string {
			t := s.cfg.Service.Totals()
			f := [][2]string{{"total_connections_received", itoa(s.stats.connsTotal.Load())},
				{"rejected_connections", itoa(s.stats.rejectedConn.Load())},
				{"evicted_clients", itoa(s.stats.evicted.Load())},
				{"total_commands_processed", itoa(s.stats.commands.Load())},
				{"total_error_replies", count(t.Errors)},
				{"decisions_allowed", count(t.Outcomes[service.Allowed])},
				{"decisions_denied", count(t.Outcomes[service.Refused])},
				{"decisions_shadow_allowed", count(t.Outcomes[service.Shadow])}}
			for _, path := range engine.Paths {
				f = append(f, [2]string{"decided_by_" + path.String(), count(t.Paths[path])})
			}
			return f
		}},
		{Name: "Keyspace", Fields: func() [][2]string {
			// As in Redis, a database without keys has no line. Every state
			// expires, once its limit would be whole again.
			if n := s.keys(); n > 0 {
				k := strconv.Itoa(n)
				return [][2]string{{"db0", "keys=" + k + ",expires=" + k + ",avg_ttl=0"}}
			}
			return nil
		}},
	}
	c.out = redcon.AppendBulkString(c.out, redisadmin.Info(args[1:], redis, s.cfg.Info))
}

// keys is how many keys this server holds (Config.Keys), for DBSIZE and
// INFO keyspace.
func (s *Server) keys() int {
	if s.cfg.Keys == nil {
		return 0
	}
	return s.cfg.Keys()
}

func runDBSize(c *client, _ [][]byte) { c.out = redcon.AppendInt(c.out, int64(c.s.keys())) }

// runScan refuses, in words redis-cli --bigkeys and --memkeys print: the
// states are not data a user stores, and listing them would walk the
// store under its locks.
func runScan(c *client, _ [][]byte) { c.fail(errScan) }
