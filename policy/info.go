package policy

import (
	"strconv"
	"strings"
)

// Info is INFO's Policies section: how many policies are in use, from
// which file, and their names, as name-value pairs in INFO's order. A nil
// Live (no --policies) has none.
func (l *Live) Info(file string) [][2]string {
	if l == nil {
		return [][2]string{{"policies", "0"}, {"policies_file", ""}}
	}
	set := l.Current()
	return [][2]string{{"policies", strconv.Itoa(set.Len())}, {"policies_file", file},
		{"policy_names", strings.Join(set.Names(), ",")}}
}
