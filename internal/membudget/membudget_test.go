package membudget

import (
	"slices"
	"testing"
)

// TestOver: past the limit the largest holders are picked, of equal ones
// the newest, until what the others hold fits; a holder picked already
// counts as returned; shrinking never picks.
func TestOver(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int64
		sets   [][2]int64 // holder index, bytes
		picked []int      // in the order picked
	}{
		{"within", 100, [][2]int64{{0, 40}, {1, 60}}, nil},
		{"largest first", 100, [][2]int64{{0, 40}, {1, 30}, {2, 50}}, []int{2}},
		{"several", 100, [][2]int64{{0, 60}, {1, 60}, {2, 70}}, []int{1, 2}},
		{"equal: the newest", 100, [][2]int64{{0, 60}, {1, 60}}, []int{1}},
		{"the one that grew", 100, [][2]int64{{0, 10}, {1, 20}, {0, 95}}, []int{0}},
		{"picked counts as returned", 100, [][2]int64{{0, 90}, {1, 20}, {2, 5}}, []int{0}},
		{"shrinking picks none", 100, [][2]int64{{0, 60}, {1, 30}, {1, 10}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var picked []int
			hs := make([]*Holder, 3)
			for i := range hs {
				hs[i] = b.Join(func(int64) { picked = append(picked, i) })
			}
			for _, s := range tc.sets {
				hs[s[0]].Set(s[1])
			}
			if !slices.Equal(picked, tc.picked) {
				t.Fatalf("picked %v, want %v", picked, tc.picked)
			}
			for i, h := range hs {
				if h.Evicted() != slices.Contains(tc.picked, i) {
					t.Errorf("holder %d: Evicted %v", i, h.Evicted())
				}
				h.Leave()
			}
			if b.Total() != 0 {
				t.Fatalf("total %d after every holder left", b.Total())
			}
		})
	}
	if _, err := New(0); err == nil {
		t.Fatal("New(0) accepted")
	}
}
