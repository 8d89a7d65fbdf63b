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
// policy, a counter of their events per policy and counters of the units
// their settles charged over and gave back under the estimates, read from
// Sources.Reservations when collected. No key and no id is a label.
func (t *Telemetry) reservationInstruments(m metric.Meter) error {
	open, err1 := m.Int64ObservableGauge("sluice.reservations.open", metric.WithUnit("{reservation}"),
		metric.WithDescription("Reservations made through this sidecar (RL.RESERVE, the HTTP check's reserve=N) and not yet settled nor ended, by policy (\"inline\" for inline limits)."))
	events, err2 := m.Int64ObservableCounter("sluice.reservations", metric.WithUnit("{reservation}"),
		metric.WithDescription("Reservation events by policy and event: made (admitted, its record held), settled, expired (ended at its TTL unsettled: charged at its estimate)."))
	excess, err3 := m.Int64ObservableCounter("sluice.reservation.excess_units", metric.WithUnit("{unit}"),
		metric.WithDescription("Units settles charged over their reservations' estimates, by policy: the most the budgets can have been overrun by (estimates too low)."))
	givenBack, err4 := m.Int64ObservableCounter("sluice.reservation.units_given_back", metric.WithUnit("{unit}"),
		metric.WithDescription("Units settles gave back under their reservations' estimates, by policy: held from other requests until the settle (estimates too high)."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
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
			o.ObserveInt64(excess, int64(st.Excess), metric.WithAttributes(p))
			o.ObserveInt64(givenBack, int64(st.GivenBack), metric.WithAttributes(p))
			for e, n := range st.Events {
				o.ObserveInt64(events, int64(n), metric.WithAttributes(p, attribute.String("event", service.ReservationEvent(e).String())))
			}
		})
		return nil
	}, open, events, excess, givenBack)
	return err
}
