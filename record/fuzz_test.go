package record

import "testing"

// A line read back and written again reads back the same: the parser
// accepts what the writer writes, and nothing panics on any input.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"t":1,"policy":"p","key":"k","allowed":true}`))
	f.Add([]byte(`{"sluice_recording":1,"sample":3,"keys":"hashed"}`))
	f.Add([]byte(`{"t":5,"key_hash":"00ff","limits":[{"name":"a","algorithm":"fixed","rate":1,"period_us":1000}],"allowed":false,"cost":0}`))
	f.Add([]byte(`{"time":"2026-01-02T03:04:05Z","key":"\u00e9\"","limit":{"algorithm":"gcra","rate":3,"period_us":1000000,"burst":2},"allowed":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, h, err := parseLine(b)
		if err != nil || h != nil || e.Key == "" {
			return
		}
		w := new(encoder).append(nil, &e, []byte(e.Key))
		e2, _, err := parseLine(w)
		if err != nil {
			t.Fatalf("written %s\nreads back as an error: %v", w, err)
		}
		if e2.Time != e.Time || e2.Cost != e.Cost || e2.Allowed != e.Allowed || e2.Limit != e.Limit || len(e2.Limits) != len(e.Limits) {
			t.Fatalf("written %s\nreads back as %+v, was %+v", w, e2, e)
		}
	})
}
