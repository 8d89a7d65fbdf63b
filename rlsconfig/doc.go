// Package rlsconfig loads envoyproxy/ratelimit's YAML configuration and
// resolves a request's descriptors to limits, with that service's rules,
// so that a user moves to Sluice by pointing Envoy at it and nothing else.
//
// It is the transport-free heart of the Envoy door: no gRPC types, no
// store, no clock. The door turns a RateLimitRequest into Descriptors,
// calls Resolve on the Watcher's Current configuration, and decides each
// found Rule through the service layer. Keeping it pure lets the peer's
// rules be tested as tables, and lets the HTTP door or a CLI check use the
// same loader.
//
// Compatibility is the point, so the loader reproduces the peer where it is
// odd: keys are checked by name wherever they stand, scalars take YAML
// 1.1's types (yes is a bool, 1.5 is refused where the peer refuses a
// float), a key and value are matched joined by '_', and errors carry the
// peer's texts. It adds a line to every error, and four fields of Sluice's
// own inside rate_limit (algorithm, period, burst, on_failure) that make a
// file Sluice's alone. README.md beside this file lists every rule.
//
// A rule is counted under Rule.Key, Sluice's key for it; PeerKeys builds
// the peer's key instead (its prefix, domain, entries and window start),
// for a door that counts as the peer does during a rolling update from it.
// Rules with Sluice's own counting fields (Rule.Own) keep Sluice's key.
//
// FromXDS builds the same Config from RateLimitConfig resources, the
// peer's configuration over xDS: they become the loader's own descriptors
// and meet the same checks. Package xds beneath this one is the stream
// that fetches them.
package rlsconfig
