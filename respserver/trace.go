package respserver

import (
	"context"
	"strings"

	"github.com/tidwall/redcon"
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
		c.out = redcon.AppendString(c.out, "OK")
		return
	}
	if !c.s.cfg.Service.Tracing() {
		c.fail(errTracingOff)
		return
	}
	carrier := propagation.MapCarrier{"traceparent": string(args[1])}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		c.fail(invalidArg("traceparent", args[1], "must be a W3C traceparent such as 00-<32 hex>-<16 hex>-01, or OFF"))
		return
	}
	c.trace = sc
	c.out = redcon.AppendString(c.out, "OK")
}
