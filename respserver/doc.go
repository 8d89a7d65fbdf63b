// Package respserver is Sluice's front door: a RESP (Redis protocol) server,
// so that any Redis client and redis-cli can ask for rate-limit decisions.
// It uses github.com/tidwall/redcon's parser for commands and serves the
// connections itself.
//
// It is shaped as net/http's server is: New(Config) builds a Server,
// Serve(ln) runs it on a listener, Shutdown(ctx) stops accepting and drains,
// answering every request already read. Each command has a handler in one
// command table (commands.go), which also feeds COMMAND, COMMAND DOCS and
// arity checks, so the table is the single description of the surface.
//
// On Linux an event loop (loop_linux.go) serves the connections: one
// goroutine waits on epoll for all of them, reads each that has sent
// something, and hands every decision read in that round to
// engine.Store.Decide as one batch, so that a store behind the interface (a
// batcher, Redis) pays one round trip for the decisions of many connections,
// and a request costs one read and one write, no goroutine switch. Elsewhere,
// or with Loops -1, each connection has a goroutine of its own, which
// decides what one read brought as one batch. Either way a command that is
// not a decision (RL.RESET, HELLO, AUTH, …) first settles the decisions
// queued before it, so that replies keep the pipeline's order and effects.
//
// Replies are encoded append-style into a per-connection buffer that is
// reused, so a decision allocates nothing once the connection is warm.
// Errors become RESP error replies in one place (errors.go). What a client
// sends is checked as it arrives (guard.go), before it is parsed, so that
// no frame can make a connection spin or grow without bound.
package respserver
