package service

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/engine"
)

// trace records a span for each of a batch's decisions, children of the
// batch's Trace, covering the round trip that decided them: a request
// traced through an application shows the rate-limit decision it met,
// and why (the explanation's fields, as MONITOR shows them). The
// explanation's attributes are computed only for a span that records (a
// sampled one): an unsampled trace costs what it did before them.
func (s *Service) trace(b *Batch, start, end time.Time) {
	parent := trace.ContextWithRemoteSpanContext(context.Background(), b.Trace)
	for i := range b.reqs {
		req, res := &b.reqs[i], &b.res[i]
		_, span := s.tracer.Start(parent, "sluice.decision", trace.WithTimestamp(start),
			trace.WithAttributes(
				attribute.String("sluice.policy", b.meta[i].policy),
				attribute.String("sluice.algorithm", b.Limit(i).Algorithm.String()),
				attribute.Int64("sluice.cost", req.Cost),
				attribute.Bool("sluice.peek", req.Peek),
			))
		switch {
		case !span.IsRecording():
		case b.err != nil:
			span.SetStatus(codes.Error, b.err.Error())
		case res.Err != nil:
			span.SetStatus(codes.Error, res.Err.Error())
		default:
			s.explainSpan(span, b, i)
		}
		span.End(trace.WithTimestamp(end))
	}
}

// explainSpan sets a recording span's attributes for decided request i:
// the answer, and why, in the explanation's terms (docs/operating.md,
// "Tracing").
func (s *Service) explainSpan(span trace.Span, b *Batch, i int) {
	req, res, m := &b.reqs[i], &b.res[i], &b.meta[i]
	br := b.Brief(i)
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs,
		attribute.Bool("sluice.allowed", res.Decision.Allowed),
		attribute.String("sluice.path", res.Path.String()),
		attribute.String("sluice.decided_by", s.PathName(res.Path)),
		attribute.String("sluice.why", s.why(res.Path, req.OnFailure)),
		attribute.String("sluice.on_failure", req.OnFailure.String()),
		attribute.String("sluice.limit", br.Bound),
		attribute.String("sluice.limit.algorithm", br.Limit.Algorithm.String()),
		attribute.String("sluice.limit.state", string(br.AppendState(nil))),
		attribute.Int64("sluice.limit.limit", br.Own.Limit),
		attribute.Int64("sluice.remaining", res.Decision.Remaining),
		attribute.Int64("sluice.retry_after_ms", ceilMillis(res.Decision.RetryAfter.Microseconds())),
		attribute.Int64("sluice.reset_after_ms", ceilMillis(res.Decision.ResetAfter.Microseconds())),
	)
	if m.shadowed {
		attrs = append(attrs, attribute.Bool("sluice.shadowed", true))
	}
	if br.Policy != "" && !br.ByPolicy {
		attrs = append(attrs, attribute.String("sluice.rule", br.Policy))
	}
	if d := s.explainedDigest(m); d != "" {
		attrs = append(attrs, attribute.String("sluice.digest", d))
	}
	if req.Multi() {
		// Each limit's own answer, in the policy's order: the one that
		// bound is among them.
		limits := make([]string, len(req.Limits))
		for j, l := range req.Limits {
			limits[j] = limitLine(l.Name, l.Limit.Algorithm, &req.Detail[j])
		}
		attrs = append(attrs, attribute.StringSlice("sluice.limits", limits))
	}
	span.SetAttributes(attrs...)
}

// limitLine is one limit's own answer as a span lists it: "daily
// fixed_window allowed=0 used 3 of 3, back to full in 420ms".
func limitLine(name string, a engine.Algorithm, d *engine.Decision) string {
	dst := make([]byte, 0, 96)
	dst = append(append(append(dst, name...), ' '), a.String()...)
	if d.Allowed {
		dst = append(dst, " allowed=1 "...)
	} else {
		dst = append(dst, " allowed=0 "...)
	}
	return string(appendState(dst, a, d))
}
