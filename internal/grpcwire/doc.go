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
// call's deadline (one already over, grpc-timeout 0, is answered
// DEADLINE_EXCEEDED before any handler sees it), a grpc-encoding other
// than identity is refused UNIMPLEMENTED, an unknown method
// UNIMPLEMENTED, a message over the cap RESOURCE_EXHAUSTED. Malformed
// input ends the connection with GOAWAY (or the stream with RST_STREAM,
// where HTTP/2 says so): RFC 9113's request checks (lowercase names, each
// pseudo-header once and only in the request's header block) and stream
// states (a stream id at or below the last opened, HEADERS on a closed
// stream, a second HEADERS without END_STREAM), so that it fails no
// h2spec case grpc-go's server passes; nothing panics on input (a fuzz
// target feeds raw frames).
//
// A hostile client is bounded as grpc-go bounds it, or more: PINGs past
// grpc-go's keepalive enforcement policy end the connection with GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings"; reading stops while 100 answers to
// control frames wait to be written; connections are capped (MaxConns),
// an idle one may be sent GOAWAY (IdleTimeout), and what each holds is
// counted in the process's input budget (package membudget), which
// closes the largest holders past it.
//
// What it does not do: compression, server push, HTTP/1 (gRPC needs
// HTTP/2), and per-stream prioritisation (answers are small and leave in
// the order they land).
package grpcwire
