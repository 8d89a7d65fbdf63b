package engine

import (
	"math"
	"math/bits"
)

// Exact arithmetic for emission intervals that are not whole microseconds.
//
// A limit of rate units per period p µs refills (or drains) one unit every
// p/rate µs. Rounding that down to whole µs refills too fast: 600 per ms
// would refill 1000 per ms, 700,000 per second 1,000,000. Counting time in
// units of 1/rate µs instead would make it exact, but a time since the
// epoch in those units passes 2^53, where the Lua scripts' doubles stop
// being exact (in 1/7 µs a date in 2026 is already 1.2e16). So the bucket
// algorithms keep their time as whole µs plus a remainder in units of
// 1/rate µs, and carry the remainder instead of dropping it; every product
// that could pass 2^53 goes through mulDiv, which the scripts compute
// exactly too (muldiv in lua/prelude.lua).

// mulDiv returns floor(a×b/c) and a×b mod c, exactly, for a, b >= 0 and
// c >= 1. Valid limits keep every quotient the algorithms ask for below
// 2^53; one that would not fit an int64 saturates rather than panic.
func mulDiv(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	return int64(uq), int64(ur)
}

// emission is a limit's interval p/d µs (d is the rate), also as q whole
// µs and r/d of one. Validation keeps q >= 1, so d <= p.
type emission struct{ p, d, q, r int64 }

// instant is a time, or a span, of us µs and f/d µs more, 0 <= f < d,
// where d is its emission's.
type instant struct{ us, f int64 }

// times is k intervals, for k >= 0.
func (e emission) times(k int64) instant {
	c, f := mulDiv(k, e.r, e.d)
	return instant{k*e.q + c, f}
}

// add is x+y.
func (e emission) add(x, y instant) instant {
	if x.f >= e.d-y.f {
		return instant{x.us + y.us + 1, x.f - (e.d - y.f)}
	}
	return instant{x.us + y.us, x.f + y.f}
}

// sub is x-y.
func (e emission) sub(x, y instant) instant {
	if x.f < y.f {
		return instant{x.us - y.us - 1, x.f + (e.d - y.f)}
	}
	return instant{x.us - y.us, x.f - y.f}
}

// fit is how many whole intervals fit in x >= 0: floor(x / (p/d)).
func (e emission) fit(x instant) int64 {
	q, r := mulDiv(x.us, e.d, e.p)
	if x.f >= e.p-r { // r + f < 2p, since f < d <= p
		q++
	}
	return q
}

// fitUp is how many intervals x >= 0 takes, a part of one counting as
// one: ceil(x / (p/d)).
func (e emission) fitUp(x instant) int64 {
	q, r := mulDiv(x.us, e.d, e.p)
	if r += x.f; r >= e.p { // r + f < 2p, since f < d <= p
		q, r = q+1, r-e.p
	}
	if r > 0 {
		q++
	}
	return q
}

// rescale reads f, a remainder in units of 1/from µs, in e's units,
// rounded up: a state written under another rate is never read as older
// than it is.
func (e emission) rescale(x instant, from int64) instant {
	if x.f == 0 || from == e.d {
		return x
	}
	if from <= 0 {
		return instant{x.us + 1, 0}
	}
	q, r := mulDiv(x.f, e.d, from)
	if r > 0 {
		q++
	}
	if q >= e.d {
		return instant{x.us + 1, q - e.d}
	}
	return instant{x.us, q}
}

// less is x < y.
func less(x, y instant) bool { return x.us < y.us || x.us == y.us && x.f < y.f }

// ceil is x rounded up to whole µs: a wait that is never too short.
func (x instant) ceil() int64 {
	if x.f > 0 {
		return x.us + 1
	}
	return x.us
}
