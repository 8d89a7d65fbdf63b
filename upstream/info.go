package upstream

import "strconv"

// Info is the store's fields of INFO's Upstream section, as name-value
// pairs in order: how its scripts are called (Functions or EVALSHA), the
// calls that Redis ran after their deadline, the durable calls and
// those not acknowledged, and the replicas a durable request waits for.
// The Observer's fields follow them (redisobserve.Observer.Info).
func (s *Store) Info() [][2]string {
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return [][2]string{{"upstream_scripts", s.Scripts()},
		{"upstream_calls_late", u(s.LateCalls())}, {"upstream_calls_overdue", u(s.OverdueCalls())},
		{"upstream_calls_durable", u(s.DurableCalls())}, {"upstream_calls_unreplicated", u(s.UnreplicatedCalls())},
		{"upstream_durable_replicas", strconv.Itoa(s.replicas)}}
}
