// Package respserver is Sluice's front door: a RESP (Redis protocol) server
// built on github.com/tidwall/redcon, so that any Redis client and redis-cli
// can ask for rate-limit decisions.
//
// It is shaped as net/http's server is: New(Config) builds a Server,
// Serve(ln) runs it on a listener, Shutdown(ctx) stops accepting and drains,
// answering every request already read. Each command has a handler in one
// command table (commands.go), which also feeds COMMAND, COMMAND DOCS and
// arity checks, so the table is the single description of the surface.
//
// Decisions are batched per read: redcon's ReadPipeline hands over the whole
// pipeline a client has sent, and every run of decision commands in it goes
// to engine.Store.Decide as one batch, so that a store behind the interface
// (a batcher, Redis) pays one round trip for many decisions. A command that
// is not a decision (RL.RESET, HELLO, AUTH, …) first settles the decisions
// queued before it, so that replies keep the pipeline's order and effects.
//
// Replies are encoded append-style into a per-connection buffer that is
// reused, so a decision allocates nothing once the connection is warm.
// Errors become RESP error replies in one place (errors.go). What a client
// sends is checked as it arrives (guard.go), before redcon buffers or
// parses it, so that no frame can make a connection spin or grow without
// bound.
package respserver
