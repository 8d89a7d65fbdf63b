// Package rlsopts holds the gRPC door's choices that the settings table
// reads from flags: the server under it, the response headers it asks
// Envoy to add, and its caps' defaults. It is a leaf so that the settings
// table, and the injector that renders it, know the door's words without
// linking the door (package rls) and grpc with it.
package rlsopts

import "errors"

// Transport picks the gRPC server under the door.
type Transport uint8

// The transports. TransportOwn is the zero value and the default.
const (
	// TransportOwn is package grpcwire: ShouldRateLimit is decoded on the
	// connection's reading goroutine, submitted without a goroutine of its
	// own, and answered from the store's completion.
	TransportOwn Transport = iota
	// TransportGRPCGo is grpc-go's server, kept to compare with and to
	// fall back on.
	TransportGRPCGo
)

var transportNames = [...]string{TransportOwn: "own", TransportGRPCGo: "grpc-go"}

func (t Transport) String() string { return name(transportNames[:], t, "transport(?)") }

// MarshalText writes the transport as UnmarshalText reads it (a flag).
func (t Transport) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads own or grpc-go.
func (t *Transport) UnmarshalText(b []byte) error {
	return parse(transportNames[:], b, t, "must be own or grpc-go")
}

// Headers says which response headers a call's answer asks Envoy to add
// (response_headers_to_add). Envoy writes them on the response to the
// client, allowed or refused.
type Headers uint8

// The header sets. HeadersOff is the zero value and the peer's default.
const (
	HeadersOff   Headers = iota
	HeadersPeer          // RateLimit-Limit, -Remaining, -Reset: the peer's LIMIT_RESPONSE_HEADERS_ENABLED
	HeadersDraft         // the IETF httpapi draft's RateLimit-Policy and RateLimit (-09 and later), Retry-After when over
	HeadersBoth          // both sets
)

var headerNames = [...]string{HeadersOff: "off", HeadersPeer: "peer", HeadersDraft: "draft", HeadersBoth: "both"}

func (h Headers) String() string { return name(headerNames[:], h, "headers(?)") }

// MarshalText writes the set as UnmarshalText reads it, so a Headers is a
// flag (flag.TextVar).
func (h Headers) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText reads off, peer, draft or both.
func (h *Headers) UnmarshalText(b []byte) error {
	return parse(headerNames[:], b, h, "must be off, peer, draft or both")
}

// name is a choice's name, or unknown.
func name[T ~uint8](names []string, v T, unknown string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return unknown
}

// parse sets *dst to the choice named b, or says what it must be.
func parse[T ~uint8](names []string, b []byte, dst *T, must string) error {
	for i, n := range names {
		if string(b) == n {
			*dst = T(i)
			return nil
		}
	}
	return errors.New(must)
}

// The caps' defaults. Envoy sends one descriptor per rate_limits action
// list of a route, and each holds one entry per action: the gateways'
// generated configurations (Envoy Gateway, Istio, Contour) use a handful
// of each, so 64 leaves room without letting one call weigh on a round
// trip that other callers share.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 64
)

// DefaultMaxConns is --grpc-max-conns's default: --max-clients's, the RESP
// door's, so that neither door holds more connections than the other.
const DefaultMaxConns = 10_000
