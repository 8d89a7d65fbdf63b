package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// LocalShare is the local failure mode's share as Sources.LocalShare gives
// it (chain.Chain.LocalShare): what a sidecar enforces alone while the
// upstream cannot answer.
type LocalShare struct {
	// Fleet is set when each limit is divided among the live sidecars
	// (--local-share fleet), unset for the whole limit.
	Fleet bool
	// Sidecars is how many each limit is divided among: the live
	// sidecars last learned from Redis with Fleet, else 1.
	Sidecars int64
}

// shareInstruments registers the share's gauges, read from
// Sources.LocalShare when collected.
func (t *Telemetry) shareInstruments(m metric.Meter) error {
	sidecars, err1 := m.Int64ObservableGauge("sluice.fleet.sidecars", metric.WithUnit("{sidecar}"),
		metric.WithDescription("The live sidecars on this upstream that Redis last counted (each says it is alive every second): "+
			"with --local-share fleet, the local failure mode enforces 1/this of each limit. Kept through an outage."))
	share, err2 := m.Float64ObservableGauge("sluice.local_share",
		metric.WithDescription("The share of each limit that the local failure mode enforces in this sidecar while the upstream cannot answer: "+
			"1/sluice_fleet_sidecars with --local-share fleet, 1 with whole."))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src := *t.sources.Load()
		if src.LocalShare == nil {
			return nil
		}
		s := src.LocalShare()
		if s.Fleet {
			o.ObserveInt64(sidecars, s.Sidecars)
		}
		o.ObserveFloat64(share, 1/float64(max(1, s.Sidecars)))
		return nil
	}, sidecars, share)
	return err
}
