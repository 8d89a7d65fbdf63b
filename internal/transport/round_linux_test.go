//go:build linux

package transport

import (
	"reflect"
	"testing"
)

// A large round is cut into parts of about equal size at batch (that is,
// connection) boundaries, never into more parts than asked; a small one,
// a round of one batch, and one with parts ≤ 1 stay whole.
func TestCutRound(t *testing.T) {
	ones := func(n, size int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = size
		}
		return s
	}
	for _, c := range []struct {
		name  string
		sizes []int
		parts int
		want  []int
	}{
		{"50 clients at -P 16, in two", ones(50, 16), 2, []int{25, 50}},
		{"in three", ones(50, 16), 3, []int{17, 34, 50}},
		{"uneven", []int{150, 10, 10}, 2, []int{1, 3}},
		{"one large batch last", append(ones(5, 10), 200), 2, []int{6}},
		{"too few decisions", ones(50, 1), 2, []int{50}},
		{"one batch", []int{1000}, 2, []int{1}},
		{"one part", ones(50, 16), 1, []int{50}},
		{"no parts", ones(50, 16), 0, []int{50}},
	} {
		got := cutRound(c.sizes, c.parts, nil)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: cut at %v; want %v", c.name, got, c.want)
		}
		if c.parts > 1 && len(got) > c.parts {
			t.Errorf("%s: %d parts; want at most %d", c.name, len(got), c.parts)
		}
	}
}
