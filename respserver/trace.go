package respserver

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// runTrace is RL.TRACE traceparent|OFF: the connection's following
// decisions become spans under the caller's own trace, so that a request
// traced through an application shows the rate-limit decision it met.
// Tracing is per connection and asked for by the caller; nothing is traced
// otherwise.
func runTrace(c *client, args [][]byte) {
	if strings.EqualFold(str(args[1]), "off") {
		c.trace = trace.SpanContext{}
		c.out = appendSimple(c.out, "OK")
		return
	}
	if c.s.cfg.Tracer == nil {
		c.fail("ERR tracing is off: start sluice with OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set")
		return
	}
	carrier := propagation.MapCarrier{"traceparent": string(args[1])}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		c.fail(invalidArg("traceparent", args[1], "must be a W3C traceparent such as 00-<32 hex>-<16 hex>-01, or OFF"))
		return
	}
	c.trace = sc
	c.out = appendSimple(c.out, "OK")
}

// traceDecisions records a span for each queued decision, children of the
// connection's traceparent, covering the batch that decided them.
func (c *client) traceDecisions(start time.Time, batchErr error) {
	end := time.Now()
	parent := trace.ContextWithRemoteSpanContext(context.Background(), c.trace)
	for i := range c.pend {
		p := &c.pend[i]
		if p.req < 0 {
			continue
		}
		req, res := &c.reqs[p.req], &c.res[p.req]
		policy := p.policy.name
		if policy == "" {
			policy = "inline"
		}
		_, span := c.s.cfg.Tracer.Start(parent, "sluice.decision", trace.WithTimestamp(start),
			trace.WithAttributes(
				attribute.String("sluice.policy", policy),
				attribute.String("sluice.algorithm", req.Limit.Algorithm.String()),
				attribute.Int64("sluice.cost", req.Cost),
				attribute.Bool("sluice.peek", req.Peek),
			))
		switch {
		case batchErr != nil:
			span.SetStatus(codes.Error, batchErr.Error())
		case res.Err != nil:
			span.SetStatus(codes.Error, res.Err.Error())
		default:
			span.SetAttributes(attribute.Bool("sluice.allowed", res.Decision.Allowed),
				attribute.String("sluice.path", res.Path.String()))
		}
		span.End(trace.WithTimestamp(end))
	}
}
