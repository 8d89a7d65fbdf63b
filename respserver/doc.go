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
// On Linux, event loops (package evloop, given in Config.Loops; the
// server's share of one is loop_linux.go) serve the connections: one
// goroutine waits on epoll for all of them, reads each that has sent
// something, and hands every decision read in that round to the service
// as one batch, so that the store behind it (a batcher, Redis) pays one
// round trip for the decisions of many connections, and a request costs
// one read and one write, no goroutine switch. The server does not know
// the store: app may have the store read Redis's replies on the same loop,
// and the loop's hold (evloop.Hold) waits for a small round's reply.
// Elsewhere, or with no Loops (--io-loops 0), each connection has a
// goroutine of its own, which decides what one read brought as one batch.
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
// they decide and read of the connections; the text of CLIENT LIST, INFO
// and the help is package internal/redisadmin's), and
// what is refused with the reason and the fix (transactions.go: MULTI;
// CLIENT TRACKING, accepted as a no-op). MONITOR (monitor.go) watches
// through one hook on the way in (client.command) and one on the way out
// (deliver), so that a decision passes no MONITOR code while no one
// watches.
//
// A connection's bytes are its transport's (transport.go): an event
// loop's (loop_linux.go, asks_linux.go) or a goroutine of its own
// (conn_goroutine.go). The state machine asks it only to be woken, whether
// it may wait on Redis in place, to land work done elsewhere, and to drain
// or close; it knows neither. What one connection does to another (CLIENT
// KILL, the input budget's eviction, a MONITOR line) is set in the other's
// state and its transport woken, so nothing touches another connection's
// descriptor or buffers (clientlist.go, budget.go, monitor.go).
package respserver
