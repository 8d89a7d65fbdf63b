package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// recordInstruments registers the recording's metrics (--record), read
// from Sources.Recording when collected: entries by outcome, so that a
// recording that drops (the disk slower than the decisions) or fails is
// seen, the bytes written, and the sample as it stands, so that one that
// --record-max-rate raised is seen too.
func (t *Telemetry) recordInstruments(m metric.Meter) error {
	entries, err1 := m.Int64ObservableCounter("sluice.recording.entries", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions given to the recording (--record), by outcome: recorded, dropped (every page waiting for the file), failed (a write failed)."))
	written, err2 := m.Int64ObservableCounter("sluice.recording.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes written to the recording's files."))
	sample, err3 := m.Int64ObservableGauge("sluice.recording.sample", metric.WithUnit("{key}"),
		metric.WithDescription("One key in this many is recorded, with its every decision: --record-sample, raised when the decisions sampled come faster than --record-max-rate."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	outcomes := [3]metric.ObserveOption{
		metric.WithAttributes(attribute.String("outcome", "recorded")),
		metric.WithAttributes(attribute.String("outcome", "dropped")),
		metric.WithAttributes(attribute.String("outcome", "failed")),
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src := *t.sources.Load()
		if src.Recording == nil {
			return nil
		}
		st := src.Recording()
		for i, n := range [3]uint64{st.Recorded, st.Dropped, st.Failed} {
			o.ObserveInt64(entries, int64(n), outcomes[i])
		}
		o.ObserveInt64(written, int64(st.Bytes))
		o.ObserveInt64(sample, int64(st.Sample))
		return nil
	}, entries, written, sample)
	return err
}
