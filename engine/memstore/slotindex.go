package memstore

import "sync/atomic"

// slotIndex maps a key's hash to its slot: linear probing in a table of a
// power of two cells, at most half of them used. A cell holds the hash's
// upper 32 bits, which also pick the cell a probe starts from, and the
// slot plus one; 0 is empty. Cells are written under the shard's lock but
// atomically, since warm reads them without it.
type slotIndex struct {
	cells []uint64
	mask  uint32
	used  int
}

func newSlotIndex(size int) *slotIndex {
	return &slotIndex{cells: make([]uint64, size), mask: uint32(size - 1)}
}

func cell(h uint64, slot int32) uint64 { return h>>32<<32 | uint64(slot+1) }

// put stores c in the first empty cell of its probe sequence.
func (x *slotIndex) put(c uint64) {
	p := uint32(c>>32) & x.mask
	for x.cells[p] != 0 {
		p = (p + 1) & x.mask
	}
	atomic.StoreUint64(&x.cells[p], c)
	x.used++
}

// delete empties the cell at p and shifts back the cells after it that
// their probes would no longer reach (Knuth's algorithm R): no tombstones
// to lengthen later probes.
func (x *slotIndex) delete(p uint32) {
	x.used--
	for {
		atomic.StoreUint64(&x.cells[p], 0)
		q := p
		for {
			q = (q + 1) & x.mask
			c := x.cells[q]
			if c == 0 {
				return
			}
			// c may fill the hole if its probe, from its home cell to q,
			// passes p on the way.
			home := uint32(c>>32) & x.mask
			if (q-home)&x.mask >= (q-p)&x.mask {
				atomic.StoreUint64(&x.cells[p], c)
				p = q
				break
			}
		}
	}
}
