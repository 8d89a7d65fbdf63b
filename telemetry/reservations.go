package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-rl/sluice/service"
)

// reservationInstruments registers the reservations' metrics, as
// leaseInstruments does the leases': a gauge of reservations open per
// policy and a counter of their events per policy, read from
// Sources.Reservations when collected. No key and no id is a label.
func (t *Telemetry) reservationInstruments(m metric.Meter) error {
	open, err1 := m.Int64ObservableGauge("sluice.reservations.open", metric.WithUnit("{reservation}"),
		metric.WithDescription("Reservations made through this sidecar (RL.RESERVE, the HTTP check's reserve=N) and not yet settled nor ended, by policy (\"inline\" for inline limits)."))
	events, err2 := m.Int64ObservableCounter("sluice.reservations", metric.WithUnit("{reservation}"),
		metric.WithDescription("Reservation events by policy and event: made (admitted, its record held), settled, expired (ended at its TTL unsettled: charged at its estimate)."))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src := *t.sources.Load()
		if src.Reservations == nil {
			return nil
		}
		src.Reservations(func(policy string, st service.ReservationStats) {
			p := attribute.String("policy", policy)
			o.ObserveInt64(open, st.Open, metric.WithAttributes(p))
			for e, n := range st.Events {
				o.ObserveInt64(events, int64(n), metric.WithAttributes(p, attribute.String("event", service.ReservationEvent(e).String())))
			}
		})
		return nil
	}, open, events)
	return err
}
