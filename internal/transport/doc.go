// Package transport serves a connection's bytes for respserver: reads
// them, hands what they complete to the connection's state, hands the
// decisions queued to the service, writes the replies and closes the
// connection. There are two transports: an event loop's (Loop, Linux
// only), which reads many connections on one goroutine, makes one batch
// of a round's decisions and never waits on Redis, and a goroutine of the
// connection's own (GoConn), which may.
//
// It is a package of its own so that the connection's state machine and
// its commands (respserver) know neither transport, and the transports
// know no command: the state is behind Conn, which respserver's client
// implements, and a transport is behind Transport, all the client asks
// of the bytes' owner. The arrows point one way: respserver imports
// transport, transport imports evloop and the service's batches, never a
// command or a reply's text.
//
// What another goroutine does to a connection (CLIENT KILL, the input
// budget's eviction, a MONITOR line) is set in its state first, then its
// transport is woken (Transport.Wake) and asks the state what to do
// (Conn.Woken) on the goroutine that owns the connection: nothing touches
// another connection's descriptor or buffers.
package transport

import (
	"time"

	"github.com/sluice-rl/sluice/service"
)

// Conn is a connection's state, as its transport drives it. Its methods
// are called on the goroutine serving the connection (its own, or its
// event loop's), one at a time; those that run commands recover from a
// panic themselves (an internal error reply, then Done).
type Conn interface {
	// Room is where the next read goes; Filled runs the commands that a
	// read of n bytes into it completed, queueing their decisions.
	Room() []byte
	Filled(n int)
	// Reading tells whether the connection takes more input now: not
	// while a command waits for what is in flight, nor while it owes too
	// many replies behind it.
	Reading() bool
	// Lift takes the decisions queued to be handed over, and nil when
	// none are (or one segment is in flight already); commands that
	// waited for errors only to be answered run first.
	Lift() Segment
	// Landed writes a segment's replies, once its decisions are in, and
	// runs the commands that waited for it; of a closed connection
	// (gone) it only drops the segment.
	Landed(g Segment, gone bool)
	// Out is the replies not yet written; Sent says the first n bytes
	// of it were.
	Out() []byte
	Sent(n int)
	// Flushed is called once a turn's writes are done: the input that
	// the run commands came from can go.
	Flushed()
	// Idle tells whether nothing is owed; Done whether the connection is
	// to close once idle and written (QUIT, a protocol error).
	Idle() bool
	Done() bool
	// Woken says what a wake-up (Transport.Wake) asked, having added to
	// Out what is to be written first.
	Woken() Wakeup
	// Failed answers an internal error after a panic while its round was
	// handed over; Done then reports true.
	Failed()
	// Closed counts the connection out, once its transport closed it.
	Closed(err error)
}

// Segment is a run of a connection's owed replies, handed over as its
// service batch and landed back whole.
type Segment interface {
	Batch() *service.Batch
}

// Wakeup is what a connection's state asks of its transport when woken.
type Wakeup uint8

const (
	// Serve on: write what Out holds (a monitor's lines), if anything.
	Serve Wakeup = iota
	// Evict: write Out (the input budget's error), then close.
	Evict
	// Kill: close at once (CLIENT KILL, a monitor that fell behind).
	Kill
)

// Transport is what a connection's state asks of whatever serves its
// bytes.
type Transport interface {
	// Wake has whatever serves the connection ask it (Conn.Woken) soon.
	// Safe from any goroutine.
	Wake()
	// Kill has whatever serves the connection close it soon, even while
	// it waits for room to write; the state's Woken reports Kill by then.
	// Safe from any goroutine.
	Kill()
	// Blocking tells whether the connection's own goroutine may wait on
	// Redis (then a command that waits, as RL.RESET, runs in place);
	// otherwise such work runs on a goroutine of its own and lands
	// (Land), from the goroutine that completed it.
	Blocking() bool
	Land(g Segment)
	// Drain has the connection read on until t, for Shutdown, and
	// CloseNow closes it at once; safe from any goroutine. An event loop
	// drains and closes all it serves at once (Loop.DrainUntil, Stop),
	// so its connections do nothing here.
	Drain(t time.Time)
	CloseNow()
}
