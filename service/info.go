package service

import "strconv"

// InfoLeases is INFO's Leases section's counts from the concurrency
// limiter, summed over policies (the metrics have them per policy), as
// name-value pairs in INFO's order, so that the RESP door prints them
// without knowing the service's counters.
func (s *Service) InfoLeases() [][2]string {
	t := s.LeaseTotals()
	f := [][2]string{{"leases_held", strconv.FormatInt(t.Held, 10)}}
	for e, n := range t.Events {
		f = append(f, [2]string{"leases_" + LeaseEvent(e).String(), strconv.FormatUint(n, 10)})
	}
	return f
}
