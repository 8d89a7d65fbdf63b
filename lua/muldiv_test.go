package lua

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestMulDiv: the prelude's muldiv is exact in doubles wherever its
// contract holds (operands below 2^53, a quotient below 2^53), past 2^53
// products included, where a plain a * b would round.
func TestMulDiv(t *testing.T) {
	srv := redistest.Start(t)
	const two53 = 1 << 53
	rng := rand.New(rand.NewPCG(53, 17))
	type tc struct{ a, b, c int64 }
	cases := []tc{{0, 0, 1}, {1, 1, 1}, {two53 - 1, 1, 1}, {two53 - 1, two53 - 1, two53 - 1},
		{two53 - 1, two53 - 2, two53 - 1}, {94906267, 94906267, 2}, {1 << 52, 3, 7}, {123456789012345, 987654321, 1000000007}}
	for len(cases) < 3000 {
		// Random sizes, so that products fall on both sides of 2^53.
		a := rng.Int64N(1 << (1 + rng.IntN(53)))
		b := rng.Int64N(1 << (1 + rng.IntN(53)))
		c := 1 + rng.Int64N(1<<(1+rng.IntN(53))-1)
		q := new(big.Int).Div(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)), big.NewInt(c))
		if q.Cmp(big.NewInt(two53)) >= 0 {
			continue
		}
		cases = append(cases, tc{a, b, c})
	}
	var body strings.Builder
	body.WriteString("local out = {}\n")
	for _, c := range cases {
		fmt.Fprintf(&body, "do local q, r = muldiv(%d, %d, %d); out[#out+1] = num(q) .. ' ' .. num(r) end\n", c.a, c.b, c.c)
	}
	body.WriteString("return out\n")
	got, err := srv.Do("EVAL", prelude+"\n"+body.String(), "0")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(got, "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%d replies for %d cases", len(lines), len(cases))
	}
	for i, c := range cases {
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(c.a), big.NewInt(c.b)), big.NewInt(c.c), new(big.Int))
		if want := q.String() + " " + r.String(); lines[i] != want {
			t.Errorf("muldiv(%d, %d, %d) = %s; want %s", c.a, c.b, c.c, lines[i], want)
		}
	}
}
