// Package redispipe is Sluice's own pipelined connection to Redis: one
// connection per Redis (per master on Cluster) on which commands go
// without their senders waiting, and whose replies an event loop may
// read (Pipe.UseLoop, package evloop), so that a reply reaches the loop
// that answers the client with no thread woken in between.
//
// It exists for the decision path. go-redis takes a pooled connection,
// writes, and blocks its caller until the reply, so an event loop that
// hands a batch over and goes on needed a goroutine for each round trip:
// a goroutine start and a thread wake-up more per round trip than a write
// from the loop itself and one reader. go-redis still dials (its Options:
// dialer, TLS, Sentinel's master discovery, credentials) and, on Cluster,
// keeps the slot map that a Router asks.
//
// It knows RESP (package resp writes and parses the client's side) and
// nothing of what the commands mean: no engine, no scripts (package lua),
// no store (package upstream). What it needs of a script call's layout —
// where the deadline goes in the command, where Redis's time is in the
// reply — its user hands in as two small functions (Stamp).
//
// The contract, for a user of Pipe (package upstream is the one):
//
//   - One call, Send or SendStamped, writes a whole RESP command with a
//     deadline and returns without waiting for Redis. Its Done runs
//     exactly once: with the reply, with a Redis error reply (a
//     resp.ReplyError, as reply, err nil), or with an error for the
//     command as a whole (the deadline passed, the connection broke, the
//     pipe closed), and then reply is nil.
//   - Done never runs under a lock of the pipe's, so it may send again
//     on the same pipe. It runs on the pipe's reader goroutine or the
//     event loop that reads the pipe, or, when the pipe is closed or the
//     write fails, before Send returns: it must be quick and must not
//     wait on the pipe.
//   - Replies come in the order the commands were written; a command's
//     reply that does not come by its deadline fails it and every command
//     written after it on that connection (the connection is given up).
//   - A Router gives the pipe of the master that serves a hash slot, and
//     is told when a slot moved (Router.Moved), so that it asks the slot
//     map again.
package redispipe

import (
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/resp"
)

// Done receives a command's outcome (see the package doc): the reply, a
// Redis error reply as a resp.ReplyError value, or err for a command that
// failed as a whole. It runs exactly once, under no lock of the pipe's.
type Done func(reply any, err error)

// Stamp is what a pipe needs of a stamped command's layout (SendStamped):
// how to write the deadline into it and how to read Redis's time from its
// reply. Package upstream hands in lua.PutDeadline and lua.ReplyTime.
type Stamp struct {
	// Put writes deadline (µs on Redis's clock; 0: none) into cmd, a
	// command as its sender wrote it.
	Put func(cmd []byte, deadline int64)
	// Time is Redis's clock (µs) as the command read it, from its reply,
	// and false when the reply does not say.
	Time func(reply any) (int64, bool)
}

// Config configures a Pipe, or every pipe of a Router.
type Config struct {
	// Options says how to dial, authenticate and select the database: a
	// go-redis client's. A Router takes each master's from the slot map.
	Options *redis.Options
	// Stamp is required for SendStamped.
	Stamp Stamp
	// Stray, if set, gets each reply that comes after its sender was
	// answered without it: a connection given up on a late reply is
	// drained for a while (Pipe.abandon) rather than closed at once, so
	// that its user can count what Redis ran late. Nil: such a
	// connection is closed at once.
	Stray func(reply any)
}

// Redis's error replies, read by the pipe, are go-redis's errors too, so
// that redis.HasErrorPrefix (NOSCRIPT, MOVED, …) reads them as it reads
// its own.
var _ redis.Error = resp.ReplyError("")
