package respserver

import "time"

// transport is what serves a connection's bytes: reads them, writes its
// replies and closes it. There are two: an event loop's (loopConn,
// loop_linux.go), which reads many connections on one goroutine and never
// waits on Redis, and a goroutine of the connection's own (goConn,
// conn_goroutine.go), which may. The connection's state machine (client.go,
// input.go) and its commands see only this, and know neither.
//
// What another goroutine does to a connection (CLIENT KILL, the input
// budget's eviction, a MONITOR line) is set in the client's state first
// (killed, evict, its monitor's backlog), then the transport is woken to
// look at it on the goroutine that owns the connection: nothing touches
// another connection's descriptor or buffers.
type transport interface {
	// wake has whatever serves the connection look at it soon: close it
	// if killed, answer the input budget's error and close it if evicted,
	// write a monitor's lines. Safe from any goroutine.
	wake()
	// blocking tells whether the connection's own goroutine may wait on
	// Redis (then a command that waits, as RL.RESET, runs in place);
	// otherwise such work runs on a goroutine of its own and lands.
	blocking() bool
	// land hands back a segment whose work ran off the connection (see
	// blocking), from the goroutine that completed it.
	land(g *segment)
	// drain has the connection read on until t, for Shutdown, and
	// closeNow closes it at once; safe from any goroutine. An event loop
	// drains and closes all it serves at once (loop.drainUntil, stop),
	// so its connections do nothing here.
	drain(t time.Time)
	closeNow()
}
