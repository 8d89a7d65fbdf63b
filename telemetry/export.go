package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otlpConfigured reports whether the standard variables name an OTLP
// endpoint for signal ("TRACES" or "METRICS").
func otlpConfigured(getenv func(string) string, signal string) bool {
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

var serviceResource = resource.NewSchemaless(attribute.String("service.name", "sluice"))

// TracerFromEnv returns a tracer exporting over OTLP/HTTP when the standard
// OTEL_EXPORTER_OTLP_* variables name an endpoint, and nil (tracing off)
// otherwise. shutdown flushes the spans still buffered. getenv decides;
// the exporter then reads the process's variables itself (endpoint,
// headers, protocol…), so pass os.Getenv.
func TracerFromEnv(ctx context.Context, getenv func(string) string) (tr trace.Tracer, shutdown func(context.Context) error, err error) {
	if !otlpConfigured(getenv, "TRACES") {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(serviceResource))
	return tp.Tracer("github.com/sluice-rl/sluice"), tp.Shutdown, nil
}

// MetricReaderFromEnv returns a reader pushing metrics over OTLP/HTTP when
// the standard variables name an endpoint, and nil otherwise.
func MetricReaderFromEnv(ctx context.Context, getenv func(string) string) (sdkmetric.Reader, error) {
	if !otlpConfigured(getenv, "METRICS") {
		return nil, nil
	}
	exp, err := otlpmetrichttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP metric exporter: %w", err)
	}
	return sdkmetric.NewPeriodicReader(exp), nil
}

// TraceParent is the W3C trace context this process was started in, from
// the TRACEPARENT (and TRACESTATE) variables, so that batch spans join the
// trace of whatever launched Sluice; the background context when unset.
func TraceParent(getenv func(string) string) context.Context {
	carrier := propagation.MapCarrier{"traceparent": getenv("TRACEPARENT"), "tracestate": getenv("TRACESTATE")}
	return propagation.TraceContext{}.Extract(context.Background(), carrier)
}
