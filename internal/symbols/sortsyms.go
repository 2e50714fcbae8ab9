package symbols

import (
	"cmp"
	"math/bits"
	"slices"
)

// sortSyms sorts s by address, global symbols first at one address (the
// name a stack shows). A library's table holds tens of thousands of
// symbols in hash order (libtorch_cpu: 23,000), and a first dump sorts
// it on the way to its first frame: each symbol becomes one integer key
// (address, then local, then position), the keys are radix-sorted 11 bits
// a pass, and the symbols moved once; about five times a comparison sort.
// Symbols at one address keep their order. A small table, or addresses
// too wide to leave room for the position, is sorted by comparison.
func sortSyms(s []sym) {
	n := len(s)
	if n < 2 {
		return
	}
	posBits := uint(bits.Len(uint(n - 1)))
	var top uint64
	for i := range s {
		top = max(top, s[i].addr)
	}
	keyBits := uint(bits.Len64(top)) + 1 + posBits
	if keyBits > 64 || n < 256 {
		slices.SortStableFunc(s, func(a, b sym) int {
			if c := cmp.Compare(a.addr, b.addr); c != 0 {
				return c
			}
			return cmp.Compare(b2i(b.global), b2i(a.global))
		})
		return
	}
	keys, tmp := make([]uint64, n), make([]uint64, n)
	for i := range s {
		local := uint64(1)
		if s[i].global {
			local = 0
		}
		keys[i] = s[i].addr<<(posBits+1) | local<<posBits | uint64(i)
	}
	const digit = 11
	var count [1 << digit]int
	for shift := uint(0); shift < keyBits; shift += digit {
		clear(count[:])
		for _, k := range keys {
			count[k>>shift&(1<<digit-1)]++
		}
		sum := 0
		for d, c := range count {
			count[d], sum = sum, sum+c
		}
		for _, k := range keys {
			d := k >> shift & (1<<digit - 1)
			tmp[count[d]] = k
			count[d]++
		}
		keys, tmp = tmp, keys
	}
	out := make([]sym, n)
	for i, k := range keys {
		out[i] = s[k&(1<<posBits-1)]
	}
	copy(s, out)
}
