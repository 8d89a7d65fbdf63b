package upstream

import (
	"slices"
	"strconv"
	"strings"
)

// Info is the store's fields of INFO's Upstream section, as name-value
// pairs in order: how its scripts are called (Functions or EVALSHA), the
// calls that Redis ran after their deadline, the durable calls, whether the upstream can be used and since when
// (upstream_state: up, down or unknown before the first check; the time
// in seconds since the Unix epoch), the last failure's cause and error
// (kept after recovery), and what the masters said of eviction at the
// last read (their policies, whether any can evict Sluice's keys, and
// the keys Redis evicted since this sidecar started watching).
func (s *Store) Info() [][2]string {
	r := s.Reach()
	state, since := "unknown", "0"
	if r.Known {
		state = "down"
		if r.Up {
			state = "up"
		}
		since = strconv.FormatInt(r.Since.Unix(), 10)
	}
	var failures uint64
	for _, n := range r.Failures {
		failures += n
	}
	m := s.Memory()
	evicts := "0"
	if len(m.Evicting()) > 0 {
		evicts = "1"
	}
	return slices.Concat([][2]string{{"upstream_scripts", s.Scripts()},
		{"upstream_calls_late", strconv.FormatUint(s.LateCalls(), 10)}, {"upstream_calls_overdue", strconv.FormatUint(s.OverdueCalls(), 10)}},
		s.InfoDurable(), [][2]string{{"upstream_state", state}, {"upstream_state_since", since},
			{"upstream_failures", strconv.FormatUint(failures, 10)},
			{"upstream_last_error_cause", string(r.Cause)}, {"upstream_last_error", oneLine(r.Err)},
			{"upstream_maxmemory_policy", strings.Join(m.Policies(), ",")}, {"upstream_eviction_possible", evicts},
			{"upstream_evicted_keys", strconv.FormatUint(m.EvictedKeys, 10)}})
}

// oneLine keeps an INFO value on its line.
func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }
