package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
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

// exportErrorEvery paces the log of export errors: an endpoint that does
// not answer fails every export (each minute for metrics, each batch of
// spans), and one line a minute says so as well as a hundred.
const exportErrorEvery = time.Minute

// LogExportErrors sends the OpenTelemetry SDK's errors (an OTLP endpoint
// that refuses, does not answer, or answers with an error) to log at warn,
// the first at once and then at most one line a minute, with how many
// came since the last line. Without it the SDK writes them through the
// standard library's default logger, unlike every other line Sluice
// writes, or not at all. It sets the process-wide handler: call it once.
func LogExportErrors(log *slog.Logger) {
	otel.SetErrorHandler(exportErrorLog(log, exportErrorEvery))
}

func exportErrorLog(log *slog.Logger, every time.Duration) otel.ErrorHandlerFunc {
	var (
		mu     sync.Mutex
		last   time.Time // guarded by mu
		missed int       // guarded by mu: errors since the last line
	)
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		missed++
		if now := time.Now(); last.IsZero() || now.Sub(last) >= every {
			log.Warn("telemetry: OTLP export failed; check OTEL_EXPORTER_OTLP_* and the collector", "err", err, "errors", missed)
			last, missed = now, 0
		}
	}
}
