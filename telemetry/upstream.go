package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// UpstreamStatus is the upstream Redis's state as Sources.Upstream gives
// it (redisobserve.Observer's Reach and Memory): whether it can be used and
// since when, why it failed, and whether it may evict Sluice's keys.
// Without these, a wrong password or an evicting Redis showed only as
// decisions taking their failure mode, or as limits quietly reset.
type UpstreamStatus struct {
	// Known is false before the first check.
	Known, Reachable bool
	// Since is when Reachable last changed.
	Since time.Time
	// Failures counts the failures seen, by cause (auth, refused, …).
	Failures map[string]uint64
	// Policies counts the masters by maxmemory-policy ("unknown": not
	// read); empty before the first read.
	Policies map[string]int
	// EvictionPossible is true when a master's policy can evict
	// Sluice's keys.
	EvictionPossible bool
	// EvictedKeys is the keys the masters evicted since the first read.
	EvictedKeys uint64
}

// upstreamInstruments registers the upstream's state metrics, read from
// Sources.Upstream when collected.
func (t *Telemetry) upstreamInstruments(m metric.Meter) error {
	reachable, err1 := m.Int64ObservableGauge("sluice.upstream.reachable",
		metric.WithDescription("1 while the upstream Redis answers the checks and round trips, 0 while it cannot be used (see sluice_upstream_failures_total's cause)."))
	since, err2 := m.Int64ObservableGauge("sluice.upstream.state_change_timestamp", metric.WithUnit("s"),
		metric.WithDescription("When sluice_upstream_reachable last changed, in seconds since the Unix epoch."))
	failures, err3 := m.Int64ObservableCounter("sluice.upstream.failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Failed checks of the upstream Redis and failures that opened the breaker, by cause (auth, refused, unknown_host, timeout, moved, not_cluster, readonly, oom, …)."))
	policies, err4 := m.Int64ObservableGauge("sluice.upstream.maxmemory_policy", metric.WithUnit("{master}"),
		metric.WithDescription("Masters of the upstream by maxmemory-policy, read at start and every --upstream-eviction-check."))
	evicts, err5 := m.Int64ObservableGauge("sluice.upstream.eviction_possible",
		metric.WithDescription("1 when a master's maxmemory-policy can evict Sluice's keys (allkeys-* or volatile-*), resetting their limits; else 0."))
	evicted, err6 := m.Int64ObservableCounter("sluice.upstream.evicted_keys", metric.WithUnit("{key}"),
		metric.WithDescription("Keys the upstream's masters evicted (their evicted_keys, all keys, not only Sluice's) since this sidecar started watching."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src := *t.sources.Load()
		if src.Upstream == nil {
			return nil
		}
		st := src.Upstream()
		if st.Known {
			o.ObserveInt64(reachable, b2i(st.Reachable))
			o.ObserveInt64(since, st.Since.Unix())
		}
		for cause, n := range st.Failures {
			o.ObserveInt64(failures, int64(n), metric.WithAttributes(attribute.String("cause", cause)))
		}
		for p, n := range st.Policies {
			o.ObserveInt64(policies, int64(n), metric.WithAttributes(attribute.String("policy", p)))
		}
		if len(st.Policies) > 0 {
			o.ObserveInt64(evicts, b2i(st.EvictionPossible))
			o.ObserveInt64(evicted, int64(st.EvictedKeys))
		}
		return nil
	}, reachable, since, failures, policies, evicts, evicted)
	return err
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
