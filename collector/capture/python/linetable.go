package python

// Line-table decoders: each maps a bytecode offset (in bytes) to a source
// line the way that version's PyCode_Addr2Line does. They return -1 where
// the table gives no line, and never read past the table.

// lineLnotab decodes the co_lnotab of 3.9: pairs of (unsigned bytecode
// increment, signed line increment).
func lineLnotab(tab []byte, first, addr int) int {
	line, pos := first, 0
	for i := 0; i+1 < len(tab); i += 2 {
		pos += int(tab[i])
		if pos > addr {
			break
		}
		line += int(int8(tab[i+1]))
	}
	return line
}

// lineTable310 decodes the PEP 626 co_linetable of 3.10: pairs of
// (unsigned bytecode length, signed line delta), -128 meaning no line.
func lineTable310(tab []byte, first, addr int) int {
	if addr < 0 {
		return first
	}
	line, end := first, 0
	for i := 0; i+1 < len(tab); i += 2 {
		start := end
		end += int(tab[i])
		cur := -1
		if d := int8(tab[i+1]); d != -128 {
			line += int(d)
			cur = line
		}
		if addr >= start && addr < end {
			return cur
		}
	}
	return -1
}

// lineTable311 decodes the location table of 3.11 and later. Each entry
// starts with a byte 1cccclll: code c, length l+1 code units (2 bytes);
// code 15 has no location, 14 is the long form (signed varint line delta,
// then end line, column and end column varints), 13 has no column (signed
// varint line delta), 10-12 are one-line forms (delta c-10, two column
// bytes), 0-9 short forms (same line, one column byte).
func lineTable311(tab []byte, first, addr int) int {
	if addr < 0 {
		return first
	}
	line, pos, i := first, 0, 0
	varint := func() (int, bool) {
		v, shift := 0, 0
		for i < len(tab) && shift < 30 {
			b := tab[i]
			i++
			v |= int(b&63) << shift
			if b&64 == 0 {
				return v, true
			}
			shift += 6
		}
		return 0, false
	}
	svarint := func() (int, bool) {
		v, ok := varint()
		if v&1 != 0 {
			return -(v >> 1), ok
		}
		return v >> 1, ok
	}
	for i < len(tab) {
		b := tab[i]
		i++
		if b&0x80 == 0 {
			return -1 // not an entry start: corrupt or torn table
		}
		code, n := int(b>>3)&15, int(b&7)+1
		delta, noLine, ok := 0, false, true
		switch {
		case code == 15:
			noLine = true
		case code == 14:
			delta, ok = svarint()
			for k := 0; k < 3 && ok; k++ {
				_, ok = varint()
			}
		case code == 13:
			delta, ok = svarint()
		case code >= 10:
			delta = code - 10
			i += 2
		default:
			i++
		}
		if !ok {
			return -1
		}
		line += delta
		pos += 2 * n
		if addr < pos {
			if noLine {
				return -1
			}
			return line
		}
	}
	return -1
}
