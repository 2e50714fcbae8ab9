package symbols

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortSyms compares the radix sort with a comparison sort on tables
// of many sizes and address widths: the same addresses in the same order,
// global symbols first at one address, and every symbol kept.
func TestSortSyms(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		n    int
		span uint64 // addresses drawn below it
	}{
		{0, 1}, {1, 1}, {2, 1}, {255, 1 << 20}, {256, 1 << 20}, {5000, 1 << 12}, // crowded: many symbols per address
		{23487, 1 << 27}, {4096, 1 << 40}, {3000, 1 << 63}, {3000, ^uint64(0)}, // too wide for the radix keys
	} {
		s := make([]sym, c.n)
		for i := range s {
			s[i] = sym{addr: rng.Uint64N(c.span), size: uint64(i), name: uint32(i), global: rng.IntN(3) == 0}
		}
		want := slices.Clone(s)
		slices.SortStableFunc(want, func(a, b sym) int {
			if c := cmp.Compare(a.addr, b.addr); c != 0 {
				return c
			}
			return cmp.Compare(b2i(b.global), b2i(a.global))
		})
		got := slices.Clone(s)
		sortSyms(got)
		// The radix keys end in the position: equal symbols keep their order.
		if !slices.Equal(got, want) {
			t.Errorf("n=%d span=%#x: sortSyms differs from a stable sort", c.n, c.span)
		}
	}
}
