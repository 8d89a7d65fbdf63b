package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-rl/sluice/service"
)

// leaseInstruments registers the concurrency limiter's metrics: a gauge of
// leases held per policy and a counter of lease events per policy, read
// from Sources.Leases when collected. No key is a label.
func (t *Telemetry) leaseInstruments(m metric.Meter) error {
	held, err1 := m.Int64ObservableGauge("sluice.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases granted through this sidecar and not yet released through it nor ended, by policy (\"inline\" for RL.ACQUIRE with inline limits). Summed over sidecars: the leases in flight."))
	events, err2 := m.Int64ObservableCounter("sluice.leases", metric.WithUnit("{lease}"),
		metric.WithDescription("Lease events by policy and event: acquired (a new lease), renewed, refused, released, expired (ended at its lease_ttl, not released through this sidecar)."))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src := *t.sources.Load()
		if src.Leases == nil {
			return nil
		}
		src.Leases(func(policy string, st service.LeaseStats) {
			p := attribute.String("policy", policy)
			o.ObserveInt64(held, st.Held, metric.WithAttributes(p))
			for e, n := range st.Events {
				o.ObserveInt64(events, int64(n), metric.WithAttributes(p, attribute.String("event", service.LeaseEvent(e).String())))
			}
		})
		return nil
	}, held, events)
	return err
}
