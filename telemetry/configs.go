package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ConfigStatus is one watched configuration's load record (the policies
// file, the rate limit service's configuration), as Sources.Configs gives
// it: a reload that fails keeps the configuration in use, and without
// these an operator would learn that the file on disk is not what runs
// only from the log line at the time.
type ConfigStatus struct {
	// Name labels the metrics: "policies" or "rls".
	Name string
	// Loaded is when the configuration in use was loaded; zero: none yet.
	Loaded time.Time
	// Failures counts the reloads that failed since start.
	Failures uint64
	// Failing is true while the path holds a content that failed to load.
	Failing bool
}

// configInstruments registers the configurations' reload metrics, read
// from Sources.Configs when collected.
func (t *Telemetry) configInstruments(m metric.Meter) error {
	failures, err1 := m.Int64ObservableCounter("sluice.config.reload_failures", metric.WithUnit("{reload}"),
		metric.WithDescription("Reloads of a configuration (config: policies, rls, rls_overlay) that failed and kept the one in use."))
	failing, err2 := m.Int64ObservableGauge("sluice.config.reload_failing",
		metric.WithDescription("1 while a configuration's file holds content that failed to load, so that what runs is an older one; else 0."))
	loaded, err3 := m.Int64ObservableGauge("sluice.config.last_reload_success_timestamp", metric.WithUnit("s"),
		metric.WithDescription("When the configuration in use was loaded, in seconds since the Unix epoch."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src := *t.sources.Load()
		if src.Configs == nil {
			return nil
		}
		for _, c := range src.Configs() {
			attrs := metric.WithAttributes(attribute.String("config", c.Name))
			o.ObserveInt64(failures, int64(c.Failures), attrs)
			v := int64(0)
			if c.Failing {
				v = 1
			}
			o.ObserveInt64(failing, v, attrs)
			if !c.Loaded.IsZero() {
				o.ObserveInt64(loaded, c.Loaded.Unix(), attrs)
			}
		}
		return nil
	}, failures, failing, loaded)
	return err
}
