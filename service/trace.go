package service

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// trace records a span for each of a batch's decisions, children of the
// batch's Trace, covering the round trip that decided them: a request
// traced through an application shows the rate-limit decision it met.
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
		case b.err != nil:
			span.SetStatus(codes.Error, b.err.Error())
		case res.Err != nil:
			span.SetStatus(codes.Error, res.Err.Error())
		default:
			span.SetAttributes(attribute.Bool("sluice.allowed", res.Decision.Allowed),
				attribute.String("sluice.path", res.Path.String()))
		}
		span.End(trace.WithTimestamp(end))
	}
}
