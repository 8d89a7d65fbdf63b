package chain

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/enginetest"
)

// The table finds a key hot at the request an entry counting it from its
// first request would (grantEntry.count, hot), and hands over the same
// counts to start its entry with: the hot key's behaviour is the one it
// had when every key had an entry. Requests a few ms apart, pauses long
// enough to roll one interval or more, costs that vary, and a clock that
// steps back.
func TestHotTableCountsAsAnEntry(t *testing.T) {
	hot := 0
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var table hotTable
		x := rng.Uint64()
		var ref grantEntry
		at := enginetest.Epoch.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		for i := range 40 {
			switch rng.IntN(8) {
			case 0:
				at = at.Add(time.Duration(40+rng.IntN(100)) * time.Millisecond) // the next interval or later
			case 1:
				at = at.Add(-time.Duration(rng.IntN(60)) * time.Millisecond) // a clock stepped back
			default:
				at = at.Add(time.Duration(rng.IntN(15)) * time.Millisecond)
			}
			cost := int64(1 + rng.IntN(5))
			ref.count(at, cost)
			v, c := table.count(x, at, cost)
			if !ref.hot() {
				if v != hotCold {
					t.Fatalf("seed %d request %d: %v before the key is hot (entry: %+v)", seed, i, v, ref)
				}
				continue
			}
			if v != hotPromoted {
				t.Fatalf("seed %d request %d: %v, want promoted (entry: %+v)", seed, i, v, ref)
			}
			want := hotCounts{tick: ref.tick, cur: ref.cur, curUnits: ref.curUnits, prevUnits: ref.prevUnits}
			if c != want {
				t.Fatalf("seed %d request %d: counts %+v, the entry's %+v", seed, i, c, want)
			}
			if v, _ := table.count(x, at, 1); v != hotPinned {
				t.Fatalf("seed %d: the next request after the key turned hot: %v, want pinned", seed, v)
			}
			hot++
			break
		}
	}
	if hot < 40 {
		t.Fatalf("the key turned hot in %d runs of 50", hot)
	}
}

// A pinned slot is its key's: another key there (another tag) goes
// uncounted, and never unpins it; once unpinned, the slot counts afresh.
// Two keys of one slot and one tag count as one: a cold key may be judged
// hot (see TestGrantsColdKeyJudgedHot for what that costs).
func TestHotTablePins(t *testing.T) {
	var table hotTable
	now := enginetest.Epoch
	a := uint64(0x1234_5678_9abc_0042)
	b := a ^ 1<<60 // the same slot, another tag
	for i := range hotCount {
		v, _ := table.count(a, now, 1)
		want := hotCold
		if i == hotCount-1 {
			want = hotPromoted
		}
		if v != want {
			t.Fatalf("request %d of a: %v, want %v", i, v, want)
		}
	}
	for range 10 {
		if v, _ := table.count(b, now, 1); v != hotCold {
			t.Fatalf("b in a's pinned slot: %v, want cold", v)
		}
	}
	table.unpin(b)
	if v, _ := table.count(a, now, 1); v != hotPinned {
		t.Fatalf("a after b's unpin: %v, want still pinned", v)
	}
	table.unpin(a)
	if v, c := table.count(b, now, 1); v != hotCold || c.cur != 1 {
		t.Fatalf("b after a's unpin: %v %+v, want cold, counted afresh", v, c)
	}
	// a2 differs from b in bits neither the slot nor the tag reads: two
	// keys of one slot and one tag, whose requests add up.
	a2 := b ^ 1<<20
	for range hotCount - 2 {
		table.count(b, now, 1)
	}
	if v, _ := table.count(a2, now, 1); v != hotPromoted {
		t.Fatalf("the %dth request of one tag: %v, want promoted", hotCount, v)
	}
}

// Units saturate at hotUnitsMax rather than wrap: a first grant sized
// from them is at most a quarter of the capacity anyway.
func TestHotTableUnitsSaturate(t *testing.T) {
	var table hotTable
	var c hotCounts
	for range hotCount {
		_, c = table.count(7, enginetest.Epoch, 1<<40)
	}
	if c.curUnits != hotUnitsMax || c.cur != hotCount {
		t.Fatalf("counts %+v, want %d requests and %d units", c, hotCount, int64(hotUnitsMax))
	}
}

// The table's cost alone, over keys from 1,000,000: a hash, and a
// compare-and-swap in a slot.
func BenchmarkHotTableCount(b *testing.B) {
	table := new(hotTable)
	seed := maphash.MakeSeed()
	rng := rand.New(rand.NewPCG(1, 2))
	now := enginetest.Epoch
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = strconv.AppendInt(append(buf[:0], "user:"...), int64(rng.IntN(1_000_000)), 10)
		x := hotHash(maphash.Bytes(seed, buf), engine.GCRA)
		table.count(x, now, 1)
		now = now.Add(5 * time.Microsecond)
	}
}
