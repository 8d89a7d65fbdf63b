package rls

import (
	"context"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-rl/sluice/rlsconfig"
	"github.com/sluice-rl/sluice/service"
)

// The request metadata that asks for an explanation (any value), and the
// response header that carries it: one value per descriptor, in the
// request's order, each the service's Explanation as JSON, the document
// RL.EXPLAIN and the HTTP check give. Both only with Config.Explain.
const (
	mdExplain     = "x-sluice-explain"
	mdExplanation = "x-sluice-explanation"
)

// explainFlag is the header the own transport is told to look for.
func explainFlag(on bool) string {
	if on {
		return mdExplain
	}
	return ""
}

// explainAsked reports whether a grpc-go call's metadata asks.
func explainAsked(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(mdExplain)) > 0
}

// decideIn is decide for a grpc-go call: one that asked, when the server
// explains, gets the explanations in its response headers, set before
// the call's scratch goes back.
func (s *Server) decideIn(ctx context.Context, req *pb.RateLimitRequest, rep *reply) (*pb.RateLimitResponse, error) {
	if !s.explain || !explainAsked(ctx) {
		return s.decide(req, rep)
	}
	c, matches, err := s.prepare(req)
	if err != nil {
		return nil, err
	}
	defer s.putCall(c)
	c.matches = matches
	resp, err := s.decideWait(c, req, matches, rep)
	if err == nil {
		// Only fails when the call is over, and then nobody reads it.
		_ = grpc.SetHeader(ctx, s.explanations(c))
	}
	return resp, err
}

// explanations are the call's descriptors' explanations. A descriptor
// that reached the service is explained by it; one that did not (no
// rule, unlimited, or a rule that can never admit it) is explained here,
// with the rule that was found.
func (s *Server) explanations(c *call) metadata.MD {
	vals := make([]string, len(c.slot))
	for i, k := range c.slot {
		var e service.Explanation
		if k >= 0 {
			var err error
			if e, err = c.parts[k/partSize].Explain(k % partSize); err != nil {
				e = service.Explanation{Door: "grpc", Why: "no decision: " + err.Error()}
			}
		} else {
			e = unstored(c, i, k)
		}
		if i < len(c.matches) && c.matches[i].Found {
			e.Rule = c.matches[i].Rule.Label
		}
		if e.Rule == "" {
			e.Rule = c.domain
		}
		doc, _ := json.Marshal(&e) // strings, numbers and booleans only: always encodes
		vals[i] = asciiJSON(doc)
	}
	return metadata.MD{mdExplanation: vals}
}

// unstored explains descriptor i that never reached the store.
func unstored(c *call, i, k int) service.Explanation {
	e := service.Explanation{Door: "grpc", Digest: c.digest, Cost: c.hits[i], Path: "none", Peek: c.peeked}
	var m *rlsconfig.Match
	if i < len(c.matches) {
		m = &c.matches[i]
	}
	switch {
	case m == nil || !m.Found:
		e.Allowed, e.Why = true, "no rule of domain "+strconv.Quote(c.domain)+" matches this descriptor: OK, counted nowhere"
	case k == noRule:
		e.Allowed, e.Why = true, "the rule is unlimited: OK, counted nowhere"
	default:
		e.Why = "the rule admits none (requests_per_unit 0), or more hits than it could ever admit: over, counted nowhere"
	}
	if m != nil && m.Found {
		e.Bound = m.Rule.Label
	}
	return e
}

// asciiJSON writes every character outside ASCII as a \u escape, which
// JSON reads back as the same: gRPC metadata values that are not binary
// must be printable ASCII, and a descriptor's value may be any UTF-8.
func asciiJSON(doc []byte) string {
	ascii := true
	for _, b := range doc {
		ascii = ascii && b < utf8.RuneSelf
	}
	if ascii {
		return string(doc)
	}
	out := make([]byte, 0, len(doc)+16)
	for len(doc) > 0 {
		r, n := utf8.DecodeRune(doc)
		doc = doc[n:]
		if r < utf8.RuneSelf {
			out = append(out, byte(r))
			continue
		}
		if r > 0xFFFF { // a surrogate pair, as JSON writes it
			r -= 0x10000
			out = appendU(appendU(out, 0xD800+(r>>10)), 0xDC00+(r&0x3FF))
			continue
		}
		out = appendU(out, r)
	}
	return string(out)
}

func appendU(dst []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', hex[r>>12&0xF], hex[r>>8&0xF], hex[r>>4&0xF], hex[r&0xF])
}
