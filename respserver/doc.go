// Package respserver is Sluice's RESP front door: a Redis-protocol server,
// so that any Redis client and redis-cli can ask for rate-limit decisions.
// It is a thin codec over package service: it parses commands, hands the
// decisions to the service in batches, and encodes the answers; policies,
// prefixes, shadow mode and counting are the service's.
//
// It is shaped as net/http's server is: New(Config) builds a Server,
// Serve(ln) runs it on a listener, Shutdown(ctx) stops accepting and drains,
// answering every request already read. Each command has a handler in one
// command table (commands.go), which also feeds COMMAND, COMMAND DOCS and
// arity checks, so the table is the single description of the surface.
//
// A connection's bytes are its transport's (package internal/transport):
// on Linux an event loop's (Config.Loops), which reads every connection
// that has sent something and hands all it read in a round to the
// service as one batch, or elsewhere, and with no Loops (--io-loops 0), a
// goroutine of the connection's own. The client implements the
// transport's Conn (conn.go) and asks of it only Transport: to be woken,
// whether it may wait on Redis in place, to land work done elsewhere, to
// drain or close. The server does not know the store: app may have the
// store read Redis's replies on the same loop.
// Either way a command that is not a decision
// (RL.RESET, HELLO, AUTH, …) first settles the decisions queued before it,
// so that replies keep the pipeline's order and effects.
//
// The wire format is package internal/resp's: its parser reads what a
// client sends as it arrives, enforcing the limits byte by byte, so that
// no frame can make a connection spin or grow without bound, and hands
// each command's arguments on as slices of the input (input.go keeps
// that input per connection). Replies are encoded with redcon's
// append-style encoders (and resp's, for what RESP3 adds) into a
// per-connection buffer that is reused, so a decision allocates nothing
// once the connection is warm. Error replies are worded in errors.go.
//
// A connection's state is client.go's: its decisions queue in a segment,
// at most one segment is in flight, and replies go out in the order the
// commands came, errors in their places. The commands are in three
// rooms: the decisions (commands.go, leases.go), the standard commands
// clients send on connect and tools use (conncmds.go, clientlist.go: what
// they decide and read of the connections; the text of CLIENT LIST,
// COMMAND DOCS, INFO and the help is package internal/redisadmin's), and
// what is refused with the reason and the fix (transactions.go: MULTI;
// CLIENT TRACKING, accepted as a no-op). MONITOR (monitor.go; its hub and
// line format are package internal/monitor's) watches through one hook
// on the way in (client.command) and one on the way out (deliver), so
// that a decision passes no MONITOR code while no one watches. What one
// connection does to another (CLIENT KILL, the input budget's eviction,
// a MONITOR line) is set in the other's state and its transport woken,
// so nothing touches another connection's descriptor or buffers.
package respserver
