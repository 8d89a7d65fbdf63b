package rls

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-rl/sluice/engine"
)

// bounded refuses a call over the caps, naming the cap and the flag that
// raises it, before anything of it is read into the call's scratch: a
// call decoded by protobuf elsewhere (the HTTP port's JSON). The gRPC
// door's calls are refused by overCaps, before they are decoded.
func (s *Server) bounded(req *pb.RateLimitRequest) error {
	ds := req.GetDescriptors()
	if len(ds) > s.maxDescriptors {
		return s.tooManyDescriptors(len(ds))
	}
	for i, d := range ds {
		if n := len(d.GetEntries()); n > s.maxEntries {
			return s.tooManyEntries(i, n)
		}
	}
	return nil
}

func (s *Server) tooManyDescriptors(n int) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(
		"rate limit request has %d descriptors, more than the cap of %d (--rls-max-descriptors)", n, s.maxDescriptors))
}

func (s *Server) tooManyEntries(i, n int) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(
		"rate limit descriptor %d has %d entries, more than the cap of %d (--rls-max-entries)", i, n, s.maxEntries))
}

// overCaps refuses an encoded RateLimitRequest over the caps before
// anything is made for it: it counts the descriptors and each one's
// entries as protobuf reads them (the last domain field wins, other
// fields are skipped), allocating nothing, so that a call of two million
// empty descriptors costs a pass over its bytes, not the 200 MB its
// decoding would. It answers as prepare and bounded would answer the
// decoded call (an empty domain first). A message malformed after its
// counts went over is refused too (protobuf would have allocated them
// before failing); one malformed within the caps is left to the
// decoders, to be refused with protobuf's own error.
func (s *Server) overCaps(b []byte) error {
	descs, domain := 0, false
	overAt, overN := -1, 0 // the first descriptor over the entries' cap
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if typ != protowire.BytesType || num != reqDomain && num != reqDescriptors {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				break
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if num == reqDomain {
			domain = len(v) > 0
			continue
		}
		if e := countEntries(v); e > s.maxEntries && overAt < 0 {
			overAt, overN = descs, e
		}
		descs++
	}
	switch {
	case descs <= s.maxDescriptors && overAt < 0:
		return nil
	case !domain:
		return status.Error(codes.InvalidArgument, errEmptyDomain)
	case descs > s.maxDescriptors:
		return s.tooManyDescriptors(descs)
	}
	return s.tooManyEntries(overAt, overN)
}

// countEntries counts a descriptor's entries, up to where it is
// malformed.
func countEntries(b []byte) int {
	entries := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			break
		}
		b = b[n:]
		if num == descEntries && typ == protowire.BytesType {
			entries++
		}
	}
	return entries
}

// byFailureMode reports whether a decision was made by its failure mode
// rather than by the store or the deny cache.
func byFailureMode(p engine.Path) bool {
	return p == engine.PathLocal || p == engine.PathFailOpen || p == engine.PathFailClosed
}

// fallbackLogEvery is the least time between two log lines about
// decisions made by their failure mode: one line says how many were
// since the line before, so that a store that keeps failing does not log
// per call.
const fallbackLogEvery = 10 * time.Second

// fallbackLog logs, at most once per fallbackLogEvery, that calls were
// decided by their failure mode: the store did not answer within the
// upstream timeout (a round trip overran it under load, or Redis is
// down) or the breaker was open. The breaker's opening is logged by the
// chain; a round trip that overran without opening it was silent.
type fallbackLog struct {
	log *slog.Logger
	now func() time.Time

	mu        sync.Mutex
	last      time.Time // when the last line was written; guarded by mu
	decisions int       // decisions by failure mode since then; guarded by mu
	calls     int       // calls they belong to; guarded by mu
	biggest   int       // the most descriptors of one such call; guarded by mu
}

// note counts n decisions of a call of size descriptors made by their
// failure mode, and logs when the last line is old enough. n 0 costs
// nothing.
func (f *fallbackLog) note(n, size int) {
	if n == 0 {
		return
	}
	now := f.now()
	f.mu.Lock()
	f.decisions += n
	f.calls++
	f.biggest = max(f.biggest, size)
	if !f.last.IsZero() && now.Sub(f.last) < fallbackLogEvery {
		f.mu.Unlock()
		return
	}
	decisions, calls, biggest := f.decisions, f.calls, f.biggest
	f.last, f.decisions, f.calls, f.biggest = now, 0, 0, 0
	f.mu.Unlock()
	f.log.Warn("rls: decisions made by their failure mode: the upstream did not answer within --upstream-timeout (overloaded or failing) or its breaker is open",
		"decisions", decisions, "calls", calls, "largest_call_descriptors", biggest, "at_most_one_line_per", fallbackLogEvery)
}
