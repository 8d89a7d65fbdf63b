package rlsconfig

import (
	"strings"
	"testing"
)

// TestRefusalTakesNothing: a rule counts a hit over its limit, as the
// peer does, unless it says refusal_takes_nothing; a sliding log never
// can, so it always takes nothing.
func TestRefusalTakesNothing(t *testing.T) {
	c, err := parse(t, `
domain: d
descriptors:
  - key: peer
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: strict
    rate_limit: {unit: minute, requests_per_unit: 5, refusal_takes_nothing: true}
  - key: counted
    rate_limit: {unit: minute, requests_per_unit: 5, refusal_takes_nothing: false}
  - key: log
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 5}
`)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"peer": false, "strict": true, "counted": false, "log": true} {
		r, ok := c.Lookup("d", []Entry{{key, "v"}})
		if !ok || r.RefusalTakesNothing != want {
			t.Errorf("%s: found %v, RefusalTakesNothing %v; want %v", key, ok, r.RefusalTakesNothing, want)
		}
	}
	_, err = parse(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5, refusal_takes_nothing: maybe}
`)
	if err == nil || !strings.Contains(err.Error(), "x.yaml:4") || !strings.Contains(err.Error(), "refusal_takes_nothing, a bool") {
		t.Errorf("refusal_takes_nothing: maybe: %v; want an error at line 4 naming the field", err)
	}
}
