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
// by atomics alone: no lock, no allocation, no copy of the key, no map.
// A slot holds a tag (more bits of the hash), the hotInterval number it
// counts in, the requests in it and their units, and the units of the
// interval before (which size the key's first grant: grantEntry.want).
// Only the request that makes its key hot (its hotCount-th in an
// interval) takes the shard's lock and makes the key's grantEntry, which
// then counts the key exactly, as before; the slot is pinned to the key
// while the entry lives, so that its next requests know to look for it,
// and freed (unpin) when the entry is forgotten.
//
// The table may be wrong both ways, and neither way touches exactness,
// which is the store's (a grant's units are taken at the store before
// they are spent, and spent only while its rules count them as taken):
//   - A cold key judged hot (two keys with one slot and one tag, whose
//     requests add up): its entry asks for a grant, which the store
//     grants as any other, and which ends as any other: a window's
//     unspent units go back (Flush), a bucket's lapse. The cost is a
//     grant taken and given back, and an entry until the key is cold.
//   - A hot key judged cold: its slot taken meanwhile by another key's
//     request (the count starts again), or pinned to another hot key
//     (it is not counted until that one's entry is forgotten). Its
//     requests go down as without grants: a round trip, not an error.
//     With hotSlots slots, a key shares its slot with a given other key
//     once in hotSlots, and with h keys hot here, h/hotSlots of the
//     others go uncounted.
//
// Requests of one key racing in one slot count exactly (compare-and-
// swap); their units may lose an update, which only sizes a first grant.

const (
	// hotSlots is the table's size: 16 bytes a slot, 512 KiB. At 200,000
	// distinct keys a second, 10,000 arrive in a hotInterval: about a
	// third of the slots turn over in one, so that a key seen 4 times in
	// it keeps its slot between two of its requests about 9 times in 10.
	hotSlots = 1 << 15

	hotPin       = 1 << 63 // the slot is a hot key's, whose entry counts it
	hotTagShift  = 40      // the tag: bits 40 to 62
	hotTagMask   = (1<<23 - 1) << hotTagShift
	hotTickShift = 8                   // the interval: bits 8 to 39, its low 32 bits
	hotCountMax  = 1<<hotTickShift - 1 // the requests: bits 0 to 7, saturating
	hotUnitsMax  = 1<<32 - 1           // a slot's units saturate here
)

// hotTable counts keys' recent requests, a slot per hash (see above).
type hotTable struct {
	slots [hotSlots]hotSlot
}

type hotSlot struct {
	// state: hotPin | tag | interval | requests; a pinned slot holds its
	// key's tag alone.
	state atomic.Uint64
	// units: the interval's units in the high 32 bits, the one
	// before's in the low 32, each saturating at hotUnitsMax.
	units atomic.Uint64
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
// algorithms (two states) counts in two slots.
func hotHash(h uint64, alg engine.Algorithm) uint64 {
	x := h ^ uint64(alg)*0x9e3779b97f4a7c15
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

func (t *hotTable) slot(x uint64) *hotSlot { return &t.slots[x&(hotSlots-1)] }

func hotTag(x uint64) uint64 { return x & hotTagMask }

// count counts a request of cost units at now in x's slot. hotPromoted
// comes with the key's counts, this request's included.
func (t *hotTable) count(x uint64, now time.Time, cost int64) (hotVerdict, hotCounts) {
	s, tag := t.slot(x), hotTag(x)
	tick := now.UnixNano() / int64(hotInterval)
	for {
		old := s.state.Load()
		if old&hotPin != 0 {
			if old&hotTagMask == tag {
				return hotPinned, hotCounts{}
			}
			return hotCold, hotCounts{} // another hot key's: this one goes uncounted
		}
		// As grantEntry.roll: the same interval, the next (the count
		// moves to the one before), or later (nothing before). A clock
		// that stepped back counts in the interval seen.
		at, n := tick, int64(1)
		next, same := false, false
		if old&hotTagMask == tag {
			d := int64(int32(uint32(tick) - uint32(old>>hotTickShift)))
			switch {
			case d <= 0:
				at, n, same = tick-d, int64(min(old&hotCountMax+1, hotCountMax)), true
			case d == 1:
				next = true
			}
		}
		nw := tag | uint64(uint32(at))<<hotTickShift | uint64(n)
		if n >= hotCount {
			nw = hotPin | tag
		}
		if !s.state.CompareAndSwap(old, nw) {
			continue
		}
		u := s.units.Load()
		c := hotCounts{tick: at, cur: n, curUnits: min(cost, hotUnitsMax)}
		switch {
		case same:
			c.curUnits, c.prevUnits = min(int64(u>>32)+c.curUnits, hotUnitsMax), int64(u&hotUnitsMax)
		case next:
			c.prevUnits = int64(u >> 32)
		}
		s.units.Store(uint64(c.curUnits)<<32 | uint64(c.prevUnits))
		if n >= hotCount {
			return hotPromoted, c
		}
		return hotCold, c
	}
}

// unpin frees x's slot, pinned for a key whose entry is forgotten: the
// key's next request there counts afresh, as a new entry's would.
func (t *hotTable) unpin(x uint64) {
	t.slot(x).state.CompareAndSwap(hotPin|hotTag(x), 0)
}
