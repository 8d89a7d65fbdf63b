// Package grpcwire is a gRPC server transport of Sluice's own: gRPC over
// HTTP/2 (h2c, or TLS with ALPN "h2"), on golang.org/x/net/http2's Framer
// and hpack, serving the gRPC door in place of grpc-go's server.
//
// It exists for one cost. A unary call through grpc-go's server takes a
// goroutine with its contexts, a stream object with its buffers, a trip
// through the handler's plumbing and a writer goroutine's hand-off: over
// 40% of the gRPC door's CPU and 39 of its 46 allocations per call were
// grpc-go's (docs/gateways.md, "Speed"). Here a call registered with
// HandleUnary costs what HTTP/2 itself needs: the connection's one reading
// goroutine decodes its frames, hands the message to the handler, and goes
// on reading; the handler submits the decision and returns; the answer,
// whenever it lands and on whatever goroutine, is framed (HEADERS, DATA,
// trailers) into the connection's buffer, which one writing goroutine
// flushes, so that the answers that land together leave in one write.
// Streams are pooled per connection; a warm call allocates only what
// hpack makes of the header values that change every call.
//
// Every other method of a grpc.ServiceDesc registered with RegisterService
// (health, reflection) is served by its real implementation through a
// small grpc.ServerStream on a goroutine of its own, as grpc-go would;
// Server implements reflection.GRPCServer, so reflection lists what is
// registered.
//
// HTTP/2 as gRPC clients (grpc-go, Envoy) speak it: the preface and
// SETTINGS (the peer's frame size, header table size and initial window
// honoured), flow control both ways (a large window given, the client's
// respected when writing: what does not fit waits for its WINDOW_UPDATE),
// PING, RST_STREAM, CONTINUATION, padding, a cap on concurrent streams,
// GOAWAY and a graceful drain. gRPC's rules on top: grpc-timeout is the
// call's deadline, a grpc-encoding other than identity is refused
// UNIMPLEMENTED, an unknown method UNIMPLEMENTED, a message over the cap
// RESOURCE_EXHAUSTED. Malformed input ends the connection with GOAWAY
// (or the stream with RST_STREAM, where HTTP/2 says so); nothing panics on
// input (a fuzz target feeds raw frames).
//
// What it does not do: compression, server push, HTTP/1 (gRPC needs
// HTTP/2), and per-stream prioritisation (answers are small and leave in
// the order they land).
package grpcwire
