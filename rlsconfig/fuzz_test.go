package rlsconfig

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds the loader arbitrary bytes: it must return a Config or an
// *Error, never panic or run away, and a loaded Config must answer lookups.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/examples/*.yaml")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "~", "- a", "domain: d", "domain: [a]", "domain: {a: b}",
		"domain: d\ndescriptors:\n  - key: k\n    value: '*'\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - &a {key: k, <<: *a}\n",
		"domain: d\ndescriptors:\n  - key: k\n    <<: [{value: v}, {value: w}]\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: gcra, period: 1ms, requests_per_unit: 4294967295}\n",
		"domain: d\ndescriptors:\n  - key: k\n    metadata: {? [a]: b}\n",
		"!!int domain: d",
		"domain: !!float 1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(File{Name: "f.yaml", Data: data})
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, d := range c.Domains() {
			for _, entries := range [][]Entry{
				{{"k", "v"}}, {{"k", ""}}, {{"k", "v"}, {"k", "v"}}, {{"*", "*"}}, {{"", ""}},
			} {
				ms, err := c.Resolve(d, []Descriptor{{Entries: entries}, {Entries: entries, Override: &Override{RequestsPerUnit: 1, Unit: UnitMinute}}})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range ms {
					r := m.Rule
					if m.Found && !r.Unlimited && (r.Key == "" || len(r.Key) > MaxKeyLen) {
						t.Fatalf("rule without a proper key: %+v", r)
					}
					if m.Found && !r.Unlimited && !r.RefusesAll() {
						if err := r.Limit.Validate(); err != nil {
							t.Fatalf("loaded an invalid limit: %v", err)
						}
					}
				}
			}
		}
	})
}
