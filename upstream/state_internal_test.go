package upstream

import (
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// FuzzParseState: whatever a key holds, reading it back as any
// algorithm's state returns a state or an error, never a panic; a
// bucket's z written as the script writes it ("µs" or "µs f/d") reads
// back as the same instant.
func FuzzParseState(f *testing.F) {
	for _, seed := range []struct {
		alg  uint8
		ty   string
		a, b string
	}{
		{uint8(engine.GCRA), "string", "1767225600333333 1/3", ""},
		{uint8(engine.TokenBucket), "string", "1.767225600e+15", ""},
		{uint8(engine.FixedWindow), "hash", "w", "1767225600000000"},
		{uint8(engine.SlidingWindow), "hash", "n", "4"},
		{uint8(engine.SlidingLog), "zset", "0000000000000000/3", "1767225600000000"},
		{uint8(engine.PeerWindow), "string", "7", ""},
		{uint8(engine.LeakyBucket), "string", "12 x/0", ""},
	} {
		f.Add(seed.alg, seed.ty, seed.a, seed.b)
	}
	f.Fuzz(func(t *testing.T, alg uint8, ty, a, b string) {
		algo := engine.Algorithm(alg % 8)
		var v any = a
		if ty != "string" {
			v = []any{a, b}
		}
		st, err := parseState(algo, ty, v)
		if err != nil || ty != "string" {
			return
		}
		if algo == engine.TokenBucket || algo == engine.LeakyBucket || algo == engine.GCRA {
			again := strconv.FormatInt(st.A, 10)
			if st.B != 0 {
				again += " " + strconv.FormatInt(st.B, 10) + "/" + strconv.FormatInt(st.C, 10)
			}
			back, err := parseState(algo, "string", again)
			if err != nil || back.A != st.A || back.B != st.B || back.C != st.C {
				t.Errorf("%q read as %+v, written back as %q, read as %+v (%v)", a, st, again, back, err)
			}
		}
	})
}
