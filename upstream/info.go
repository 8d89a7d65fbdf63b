package upstream

import "strconv"

// Info is the store's part of INFO's Upstream section, after the
// address's kind and hosts: how its scripts are called (Functions or
// EVALSHA), and the calls that Redis ran after their deadline, as
// name-value pairs in INFO's order.
func (s *Store) Info() [][2]string {
	return append([][2]string{{"upstream_scripts", s.Scripts()},
		{"upstream_calls_late", strconv.FormatUint(s.LateCalls(), 10)}, {"upstream_calls_overdue", strconv.FormatUint(s.OverdueCalls(), 10)}},
		s.InfoDurable()...)
}
