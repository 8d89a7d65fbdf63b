// Package evloop is an event loop: one goroutine that waits on epoll for
// the descriptors registered with it, calls each one's handler when it is
// ready, then runs the functions other goroutines posted and the turn
// functions of its users, and waits again.
//
// It exists so that the two sides of a decision share one thread without
// knowing each other: the RESP door's client sockets are watched on a
// loop (package transport serves them for respserver),
// upstream watches its pipelined Redis connection on the same loop, and
// app, which creates the loops, wires the two. A reply that Redis sends
// is then read by the loop that answers the client, with no thread woken
// in between, and the clients' requests of one turn form one batch.
//
// A loop never blocks on a descriptor but in one case, the hold (Hold):
// after its user handed a small round to a descriptor that now owes the
// reply (a handler implementing Owing), the loop waits a little for that
// reply alone before reading anything else; see the comment on holdFor
// for the measurement behind it. Where the reply is read on another loop
// (--io-loops 2: the Redis connection is one loop's), its user says the
// work is owed back (OwedIn), and the hold waits for the wake-up that
// lands it instead.
//
// Everything but Run's goroutine may call Wake, WakeAt, Post, Watch, the
// Watcher's methods and Close; the handlers, posted functions and turn
// functions run on the loop's goroutine, one at a time. The package
// imports no package of the project (tests/imports_test.go). Only Linux
// has epoll: elsewhere New returns errors.ErrUnsupported, and the users
// fall back to a goroutine per connection.
package evloop

import (
	"errors"
	"time"
)

// Events says what a descriptor is ready for, or what a watcher waits
// for.
type Events uint32

const (
	// Readable: something to read, or the end of the stream, or an
	// error (the read then says which).
	Readable Events = 1 << iota
	// Writable: room to write.
	Writable
)

// Handler is what a loop calls for a watched descriptor, on the loop's
// goroutine.
type Handler interface {
	// Ready is called when the descriptor is ready for some of what it
	// is watched for; a stale readiness (the descriptor changed meanwhile)
	// is possible, so a read must not block.
	Ready(ev Events)
	// Ended is called once if the loop ends while the descriptor is
	// still watched: the handler then serves it some other way, or closes
	// it. The loop closes no descriptor it watches.
	Ended()
}

// Owing is implemented by a Handler whose descriptor replies may be owed
// on (a connection to a server): while Owing reports true, a loop asked
// to Hold waits for that descriptor alone first. It is called on the
// loop's goroutine, so it must be quick and must not call the loop.
type Owing interface {
	Owing() bool
}

// ErrClosed is returned by Watch, and reported by Post, once the loop has
// ended or is ending.
var ErrClosed = errors.New("evloop: loop closed")

// The hold: how long a loop waits for a reply owed before it reads its
// other descriptors again, and, after maxMissed holds in a row that no
// reply ended, how long it does not hold (a far, paused or slow server).
//
// Read at once, the requests that clients send during a round trip make
// one small batch after another, each a wake-up of the loop; held, they
// wait in their sockets until the reply is written, and are then read
// together while the loop sleeps, which costs less CPU a request and no
// throughput (docs/speed.md, "Where the gain comes from", has the
// measurements). A server that misses maxMissed holds in a row is not
// held for during holdOffFor: what waits in the sockets waits holdFor at
// most, now and then.
const (
	holdFor    = 300 * time.Microsecond
	maxMissed  = 8
	holdOffFor = 100 * time.Millisecond
)
