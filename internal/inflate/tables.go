package inflate

import (
	"fmt"
	"math/bits"
	"sync"
)

// A table entry decodes the code whose bits index it:
//
//	bits 0-4   how many bits the code takes (of a subtable pointer: the
//	           primary table's bits)
//	bits 8-11  extra bits that follow (of a subtable pointer: the
//	           subtable's index bits)
//	bits 12-14 kind
//	bits 16-31 literal byte, length or distance base, or subtable start
//
// Codes longer than the primary table's index are decoded in two steps: the
// primary entry for their first bits points at a subtable indexed by the
// rest. An entry that is zero is no code of the block (kindInvalid).
const (
	kindInvalid  = 0 << 12
	kindLiteral  = 1 << 12
	kindLength   = 2 << 12
	kindEnd      = 3 << 12
	kindDistance = 4 << 12
	kindSub      = 5 << 12
	kindMask     = 7 << 12

	litBits  = 11
	litMask  = 1<<litBits - 1
	distBits = 8
	distMask = 1<<distBits - 1
	maxBits  = 15 // longest code

	// The tables' sizes, powers of two at least the largest a code can
	// need: the primary table and a subtable of at most 1<<(maxBits-root)
	// entries for each symbol (286 literal/length, 30 distance).
	litTableSize  = 8192 // > 1<<11 + 286<<4
	litTableMask  = litTableSize - 1
	distTableSize = 4096 // = 1<<8 + 30<<7
	distTableMask = distTableSize - 1
)

// Decoding tables (see build).
type (
	litTable  [litTableSize]uint32
	distTable [distTableSize]uint32
)

// Base and extra bits of the length codes 257-285, and of the distance codes.
var (
	lengthBase  = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]uint16{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
)

// litEntry is what literal/length symbol sym decodes to, without its length.
func litEntry(sym int) uint32 {
	switch {
	case sym < 256:
		return kindLiteral | uint32(sym)<<16
	case sym == 256:
		return kindEnd
	case sym <= 285:
		i := sym - 257
		return kindLength | uint32(lengthExtra[i])<<8 | uint32(lengthBase[i])<<16
	}
	return kindInvalid // 286 and 287 have codes but are not valid
}

// distEntry is what distance symbol sym decodes to, without its length.
func distEntry(sym int) uint32 {
	if sym >= len(distBase) {
		return kindInvalid
	}
	return kindDistance | uint32(distExtra[sym])<<8 | uint32(distBase[sym])<<16
}

// build makes the decoding table of the canonical code whose code lengths
// are lengths, with a primary table of 1<<root entries, into t (reused:
// entries past those built are left as they were, and no code reaches
// them). Codes left unused (an incomplete code) decode as invalid.
func build(t []uint32, lengths []uint8, root uint, entry func(int) uint32) error {
	var count [maxBits + 1]int
	for _, l := range lengths {
		count[l]++
	}
	count[0] = 0
	left := 1
	for l := 1; l <= maxBits; l++ {
		left = left<<1 - count[l]
		if left < 0 {
			return fmt.Errorf("%w: over-subscribed code", ErrCorrupt)
		}
	}
	var next [maxBits + 2]uint32
	for l := 1; l <= maxBits; l++ {
		next[l+1] = (next[l] + uint32(count[l])) << 1
	}
	// Codes are sent first bit first: index by the reversed code.
	var codeBuf [286 + 30]uint32
	codes := codeBuf[:len(lengths)]
	for sym, l := range lengths {
		if l > 0 {
			codes[sym] = bits.Reverse32(next[l]) >> (32 - uint(l))
			next[l]++
		}
	}
	// Subtables, one per primary index of the long codes, sized by the
	// longest code through it; start[p] is 0 where there is none.
	var subBits [1 << litBits]uint8
	var start [1 << litBits]int32
	size := 1 << root
	for sym, l := range lengths {
		if uint(l) > root {
			p := codes[sym] & (1<<root - 1)
			subBits[p] = max(subBits[p], l-uint8(root))
		}
	}
	for p := range 1 << root {
		if subBits[p] > 0 {
			start[p] = int32(size)
			size += 1 << subBits[p]
		}
	}
	if size > len(t) {
		return fmt.Errorf("%w: a code of %d table entries", ErrCorrupt, size)
	}
	t = t[:size]
	clear(t)
	for p := range 1 << root {
		if subBits[p] > 0 {
			t[p] = kindSub | uint32(start[p])<<16 | uint32(subBits[p])<<8 | uint32(root)
		}
	}
	for sym, l := range lengths {
		if l == 0 {
			continue
		}
		e, c := entry(sym), codes[sym]
		if uint(l) <= root {
			for i := c; i < 1<<root; i += 1 << l {
				t[i] = e | uint32(l)
			}
			continue
		}
		p := c & (1<<root - 1)
		for i := c >> root; i < 1<<subBits[p]; i += 1 << (uint(l) - root) {
			t[start[p]+int32(i)] = e | uint32(uint(l)-root)
		}
	}
	return nil
}

var (
	fixedOnce sync.Once
	fixedLit  litTable
	fixedDst  distTable
)

// fixedTables returns the tables of the fixed codes (block type 1).
func fixedTables() (lit *litTable, dist *distTable) {
	fixedOnce.Do(func() {
		var l [288]uint8
		for i := range l {
			switch {
			case i < 144:
				l[i] = 8
			case i < 256:
				l[i] = 9
			case i < 280:
				l[i] = 7
			default:
				l[i] = 8
			}
		}
		var dl [32]uint8
		for i := range dl {
			dl[i] = 5
		}
		build(fixedLit[:], l[:], litBits, litEntry)
		build(fixedDst[:], dl[:], distBits, distEntry)
	})
	return &fixedLit, &fixedDst
}

// order is the order the code length code's lengths are sent in.
var order = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

// dynamic reads the code lengths of a block with dynamic codes and builds
// its tables.
func (d *Decoder) dynamic() error {
	if err := d.refill(); err != nil {
		return err
	}
	nlit := int(d.take(5)) + 257
	ndist := int(d.take(5)) + 1
	nclen := int(d.take(4)) + 4
	if nlit > 286 || ndist > 30 {
		return fmt.Errorf("%w: %d literal/length and %d distance codes", ErrCorrupt, nlit, ndist)
	}
	var clen [19]uint8
	for i := 0; i < nclen; i++ {
		if d.nbits < 3 {
			if err := d.refill(); err != nil {
				return err
			}
		}
		clen[order[i]] = uint8(d.take(3))
	}
	var ct [1 << 7]uint32 // code lengths are at most 7 bits: no subtables
	if err := build(ct[:], clen[:], 7, func(sym int) uint32 { return uint32(sym) << 16 }); err != nil {
		return err
	}
	var lengths [286 + 30]uint8
	for i := 0; i < nlit+ndist; {
		if d.nbits < 7+7 {
			if err := d.refill(); err != nil {
				return err
			}
		}
		e := ct[d.bits&(1<<7-1)]
		if e&31 == 0 {
			return fmt.Errorf("%w: invalid code length code", ErrCorrupt)
		}
		d.take(uint(e & 31))
		sym := int(e >> 16)
		if sym < 16 {
			lengths[i] = uint8(sym)
			i++
			continue
		}
		var v uint8
		var n int
		switch sym {
		case 16:
			if i == 0 {
				return fmt.Errorf("%w: repeat with no length before", ErrCorrupt)
			}
			v, n = lengths[i-1], 3+int(d.take(2))
		case 17:
			n = 3 + int(d.take(3))
		default:
			n = 11 + int(d.take(7))
		}
		if i+n > nlit+ndist {
			return fmt.Errorf("%w: code lengths run over", ErrCorrupt)
		}
		for ; n > 0; n-- {
			lengths[i] = v
			i++
		}
	}
	if lengths[256] == 0 {
		return fmt.Errorf("%w: no end-of-block code", ErrCorrupt)
	}
	if d.litBuf == nil {
		d.litBuf, d.distBuf = new(litTable), new(distTable)
	}
	if err := build(d.litBuf[:], lengths[:nlit], litBits, litEntry); err != nil {
		return err
	}
	if err := build(d.distBuf[:], lengths[nlit:nlit+ndist], distBits, distEntry); err != nil {
		return err
	}
	d.lit, d.dist = d.litBuf, d.distBuf
	return nil
}
