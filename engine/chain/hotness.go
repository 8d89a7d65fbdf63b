package chain

import (
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Hotness: finding the hot keys without keeping anything per cold key.
//
// Most keys are never hot: with many distinct keys, each is seen a few
// times a minute, and grants must cost them nothing (issue 40). So a key
// is counted in a fixed table of slots, one slot per hash of the key,
// each slot one word updated by compare-and-swap: no lock, no
// allocation, no copy of the key, no map. A slot holds a tag (more bits
// of the hash), the hotInterval it counts in, the requests in it and
// their units, and the units of the interval before (which size the
// key's first grant: grantEntry.want). Only the request that makes its
// key hot (its hotCount-th in an interval) takes the shard's lock and
// makes the key's grantEntry, which then counts the key exactly, as
// before; the slot is pinned to the key while the entry lives, so that
// its next requests know to look for it, and freed (unpin) when the
// entry is forgotten.
//
// The table is small, so that a request's slot is most often in the
// CPU's cache: looking it up in memory would cost more than all the rest.
// It may be wrong both ways, and neither way touches exactness, which is
// the store's (a grant's units are taken at the store before they are
// spent, and spent only while its rules count them as taken):
//   - A cold key judged hot (two keys in one slot with one tag, whose
//     requests add up; or a key back in a slot it left hotTicks
//     intervals before, whose interval reads as the current one): its
//     entry asks for a grant, which the store grants as any other, and
//     which ends as any other: a window's unspent units go back
//     (Flush), a bucket's lapse. The cost is a grant taken and given
//     back, and an entry until the key is cold.
//   - A hot key judged cold: its slot taken meanwhile by another key's
//     request (its count starts again), or pinned to another hot key
//     (it is not counted until that one's entry is forgotten). Its
//     requests go down as without grants: a round trip, not an error.
//     With h keys hot here, h/hotSlots of the others go uncounted.

const (
	// hotSlots is the table's size: 8 bytes a slot, 128 KiB. At 200,000
	// distinct keys a second, 10,000 arrive in a hotInterval, and a key
	// seen 4 times in one keeps its slot between its requests 2 times in
	// 3 (e^(-10,000/16,384 x 3/4)); a key seen 40 times, 19 in 20.
	hotSlots = 1 << 14

	// A slot's word, from the top: hotPin, the tag, the interval (its low
	// bits), the requests in it, its units, the units of the one before.
	// Requests and units saturate: a key reaches hotCount first, and
	// units past hotUnitsMax in an interval only size a first grant
	// as hotUnitsMax would (4 × 2^20 units, unless a quarter of the
	// capacity is less: it differs only for capacities over 2^24).
	hotPin        = 1 << 63
	hotTagShift   = 53
	hotTagMask    = (1<<10 - 1) << hotTagShift
	hotTickShift  = 43
	hotTicks      = 1 << 10 // the interval is counted modulo this
	hotCountShift = 40
	hotCountMax   = 1<<3 - 1
	hotUnitsShift = 20 // the interval's; the one before's at 0
	hotUnitsMax   = 1<<20 - 1
	// hotStepBack is how many intervals back a clock that stepped back
	// may go and still count in the interval seen (as grantEntry.roll
	// does); further back, the key counts afresh.
	hotStepBack = 8
)

// hotCount must fit in a slot's requests.
var _ [hotCountMax - hotCount]struct{}

// hotTable counts keys' recent requests, a slot per hash (see above).
type hotTable struct {
	slots [hotSlots]atomic.Uint64
}

// hotVerdict is what counting a request in the table says to do next.
type hotVerdict uint8

const (
	hotCold     hotVerdict = iota // counted (or not countable): nothing more to do
	hotPromoted                   // this request made its key hot: the slot is pinned for its entry, to be made
	hotPinned                     // the slot is pinned to this key (or one of its tag): its entry may hold a grant
)

// hotCounts is a key's counts when it turned hot, to start its entry
// with: grantEntry's fields of the same names.
type hotCounts struct {
	tick                int64
	cur                 int64
	curUnits, prevUnits int64
}

// hotHash is the key's place in the table: h, the key's hash (as the
// shards use it), mixed with the algorithm, so that one key under two
// algorithms (two states) counts in two slots. The slot is its low bits,
// the tag its top ones.
func hotHash(h uint64, alg engine.Algorithm) uint64 {
	x := h ^ uint64(alg)*0x9e3779b97f4a7c15
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

func (t *hotTable) slot(x uint64) *atomic.Uint64 { return &t.slots[x&(hotSlots-1)] }

func hotTag(x uint64) uint64 { return x >> (64 - 10) << hotTagShift }

// count counts a request of cost units at now in x's slot. hotPromoted
// comes with the key's counts, this request's included.
func (t *hotTable) count(x uint64, now time.Time, cost int64) (hotVerdict, hotCounts) {
	s, tag := t.slot(x), hotTag(x)
	tick := now.UnixNano() / int64(hotInterval)
	cost = min(cost, hotUnitsMax)
	for {
		old := s.Load()
		if old&hotPin != 0 {
			if old&hotTagMask == tag {
				return hotPinned, hotCounts{}
			}
			return hotCold, hotCounts{} // another hot key's: this one goes uncounted
		}
		// As grantEntry.roll: the same interval, the next (the count
		// moves to the one before), or later (nothing before). A clock
		// that stepped back counts in the interval seen.
		c := hotCounts{tick: tick, cur: 1, curUnits: cost}
		if old&hotTagMask == tag {
			switch d := (uint64(tick) - old>>hotTickShift) % hotTicks; {
			case d == 0 || d >= hotTicks-hotStepBack:
				c.tick = tick + int64((hotTicks-d)%hotTicks)
				c.cur = min(int64(old>>hotCountShift&hotCountMax)+1, hotCountMax)
				c.curUnits = min(int64(old>>hotUnitsShift&hotUnitsMax)+cost, hotUnitsMax)
				c.prevUnits = int64(old & hotUnitsMax)
			case d == 1:
				c.prevUnits = int64(old >> hotUnitsShift & hotUnitsMax)
			}
		}
		nw := tag | uint64(c.tick)%hotTicks<<hotTickShift | uint64(c.cur)<<hotCountShift |
			uint64(c.curUnits)<<hotUnitsShift | uint64(c.prevUnits)
		v := hotCold
		if c.cur >= hotCount {
			nw, v = hotPin|tag, hotPromoted
		}
		if s.CompareAndSwap(old, nw) {
			return v, c
		}
	}
}

// unpin frees x's slot, pinned for a key whose entry is forgotten: the
// key's next request there counts afresh, as a new entry's would.
func (t *hotTable) unpin(x uint64) {
	t.slot(x).CompareAndSwap(hotPin|hotTag(x), 0)
}
