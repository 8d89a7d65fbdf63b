// Package resp is the Redis protocol as bytes: the parser of what a client
// sends, the encoders RESP3 adds to redcon's, the quoting of a client's
// values in error replies and MONITOR lines, and the argument helpers
// that read numbers and words as Redis does; and, for the upstream's
// pipelined connection to Redis, the client's side: the commands it
// writes and the parser of Redis's replies (reply.go). It holds no
// connection and knows no command: the RESP door (respserver) and the
// upstream own those.
//
// It is a package of its own because every byte a client sends passes
// through it, so it is where the limits that keep a hostile client from
// spinning a connection or growing it without bound are enforced, and
// the one place fuzzed for it: a pure function of its input, it runs
// millions of inputs a second under go test -fuzz, with no server
// behind it. It imports no package of the project.
//
// The parser is Redis's own reading, not redcon's: it follows the input
// byte by byte across reads, refuses a frame at the first byte that
// breaks a limit or the framing, with Redis's error text, and hands each
// command's arguments on as slices of the input, never copied. Replies
// are written with redcon's append-style encoders (redcon.AppendInt and
// its kin) and, for what RESP3 adds, this package's, which append the
// same way: a reply allocates nothing once its buffer has grown.
package resp
