// Package rls is Envoy's rate limit service over gRPC
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), answering
// as envoyproxy/ratelimit does, from that service's own YAML configuration
// (package rlsconfig), so that Envoy, Istio or Envoy Gateway move to Sluice
// by changing an address.
//
// It is a thin codec, as every door is: a request's descriptors are
// resolved to rules by rlsconfig, each rule that needs the store becomes a
// service.Request, and the whole call goes to the service as one batch, so
// that concurrent calls share the batcher's round trips with RESP's
// decisions, and the failure modes, deny cache and metrics are the same as
// everywhere else. What only this protocol has lives here: the peer's
// statuses, its overall code with quota mode, unlimited and unknown
// descriptors, hits_addend, the response headers, and the option to charge
// no descriptor of a call when any is over its limit. A call is bounded
// (Config.MaxDescriptors, MaxEntries), and one larger than a store
// submission's share is decided in parts (partSize), so that no call
// spends other callers' deadline.
//
// Requests are read and responses written without protobuf's reflection
// (wire.go, codec.go), into pooled requests and replies: after grpc-go's
// own work, protobuf's was most of the door's cost per call.
//
// The gRPC server under the door is Sluice's own by default (package
// grpcwire, own.go): ShouldRateLimit is read on the connection's reading
// goroutine, its one store submission made there (service.Decide), and
// the answer written from the submission's completion, with no goroutine
// per call; grpc-go's per-call work was over 40% of the door's CPU. A call
// that needs more than one submission (StopWhenOverLimit, a call larger
// than partSize) is decided on a goroutine of its own. grpc-go's server
// stays selectable (Config.Transport, --grpc-transport grpc-go), with the
// codec in codec.go.
//
// The server also serves the standard gRPC health service, reflecting the
// sidecar's readiness, and server reflection, so grpcurl works without a
// proto file.
package rls
