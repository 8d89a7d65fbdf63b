package simulate

import "testing"

// ParseCondition never panics, and what it accepts names a metric and a
// bound it can check.
func FuzzParseCondition(f *testing.F) {
	for _, s := range []string{"refused>5%", "newly_refused[api]>0", "changed>1.5", "refused[>1", "x>%", "refused>-1", "changed>NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCondition(s)
		if err != nil {
			return
		}
		if c.Limit != c.Limit || c.Limit < 0 || c.Share && c.Limit > 100 || c.Metric == "" {
			t.Fatalf("%q accepted as %+v", s, c)
		}
		if _, _, err := c.Check(&Report{}); err != nil && c.Policy == "" {
			t.Fatalf("%q: %v", s, err)
		}
	})
}
