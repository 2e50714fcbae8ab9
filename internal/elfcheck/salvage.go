package elfcheck

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// maxTable bounds the section header table and its name table Salvage
// reads: real ones are kilobytes.
const maxTable = 16 << 20

// Salvage parses the headers of an ELF file of size bytes that r holds,
// as NewFile does, but reads what it can trust of a file NewFile refuses,
// as ld.so would load it:
//
//   - a section whose header the file cannot hold (past its end, over
//     another section, a name past the name table) or that is compressed
//     behind a header claiming more than MaxRatio times its size, or a
//     kind debug/elf does not inflate, is left out: an SHT_NULL section
//     without a name takes its place in f.Sections, so that the links of
//     the others keep their indices;
//   - when the section header table itself cannot be read (past the
//     file's end, a count or an entry size the file cannot hold, a name
//     table it cannot hold), the file is read without section headers:
//     its program headers, all that ld.so reads, say where its code and
//     dynamic segment lie.
//
// damage says what was left out and why, one line each; none for a sound
// file. Salvage fails only when the ELF header or the program headers
// cannot be read.
func Salvage(r io.ReaderAt, size int64) (f *elf.File, damage []string, err error) {
	h, ok := readHeader(r, size)
	if !ok {
		// Not ELF, or too short to be: debug/elf says what is wrong.
		f, err := elf.NewFile(io.NewSectionReader(r, 0, size))
		return f, nil, err
	}
	if h.phnum > 0 && (h.phoff > uint64(size) || h.phnum*h.phentsize > uint64(size)-h.phoff) {
		return nil, nil, fmt.Errorf("%d program headers at %d run past the file's %d bytes: %w", h.phnum, h.phoff, size, ErrCorrupt)
	}
	if h.shoff == 0 && h.shnum == 0 {
		f, err := elf.NewFile(io.NewSectionReader(r, 0, size)) // no section headers
		return f, nil, err
	}
	t, why := h.table(r, size)
	if why != "" {
		return h.withoutSections(r, size, "section headers: "+why+": not read")
	}
	damage = t.check(r, size)
	if t.names == nil && t.shstrndx != 0 {
		return h.withoutSections(r, size, damage...)
	}
	// debug/elf reads the table and its names again: from t, patched.
	p := &patched{r: r, patches: []patch{{int64(h.shoff), t.b}}}
	if t.names != nil {
		p.patches = append(p.patches, patch{int64(t.namesOff), t.names})
	}
	f, err = elf.NewFile(io.NewSectionReader(p, 0, size))
	if err != nil {
		return h.withoutSections(r, size, append(damage, fmt.Sprintf("section headers: %v: not read", err))...)
	}
	return f, damage, nil
}

// header is what Salvage reads of an ELF header.
type header struct {
	raw                                    []byte // the header's bytes
	class                                  elf.Class
	order                                  binary.ByteOrder
	phoff, phentsize, phnum                uint64
	shoff, shentsize, shnum, shstrndx      uint64
	shoffAt, shentsizeAt, shnumAt, shstrAt int    // where the fields lie in raw
	want                                   uint64 // the size of a section header of this class
	name, typ, flags, offset, fsize, link  int    // where the fields of a section header lie in it
	word                                   int    // 4 or 8: sh_flags, sh_offset, sh_size
}

// readHeader reads the ELF header of a file of size bytes; false when it
// is no ELF header of a known class.
func readHeader(r io.ReaderAt, size int64) (*header, bool) {
	if size < 52 {
		return nil, false
	}
	raw := make([]byte, min(size, 64))
	if n, _ := r.ReadAt(raw, 0); n < len(raw) || string(raw[:4]) != elf.ELFMAG {
		return nil, false
	}
	h := &header{raw: raw, class: elf.Class(raw[elf.EI_CLASS]), order: binary.LittleEndian}
	if elf.Data(raw[elf.EI_DATA]) == elf.ELFDATA2MSB {
		h.order = binary.BigEndian
	}
	o := h.order
	switch h.class {
	case elf.ELFCLASS64:
		if len(raw) < 64 {
			return nil, false
		}
		h.phoff, h.phentsize, h.phnum = o.Uint64(raw[0x20:]), uint64(o.Uint16(raw[0x36:])), uint64(o.Uint16(raw[0x38:]))
		h.shoffAt, h.shentsizeAt, h.shnumAt, h.shstrAt = 0x28, 0x3a, 0x3c, 0x3e
		h.shoff = o.Uint64(raw[0x28:])
		h.want, h.word = 64, 8
		h.name, h.typ, h.flags, h.offset, h.fsize, h.link = 0, 4, 8, 24, 32, 40
	case elf.ELFCLASS32:
		h.phoff, h.phentsize, h.phnum = uint64(o.Uint32(raw[0x1c:])), uint64(o.Uint16(raw[0x2a:])), uint64(o.Uint16(raw[0x2c:]))
		h.shoffAt, h.shentsizeAt, h.shnumAt, h.shstrAt = 0x20, 0x2e, 0x30, 0x32
		h.shoff = uint64(o.Uint32(raw[0x20:]))
		h.want, h.word = 40, 4
		h.name, h.typ, h.flags, h.offset, h.fsize, h.link = 0, 4, 8, 16, 20, 24
	default:
		return nil, false
	}
	h.shentsize = uint64(o.Uint16(raw[h.shentsizeAt:]))
	h.shnum = uint64(o.Uint16(raw[h.shnumAt:]))
	h.shstrndx = uint64(o.Uint16(raw[h.shstrAt:]))
	return h, true
}

// uword reads a field of sh_flags' size (4 or 8 bytes) of a section header.
func (h *header) uword(b []byte) uint64 {
	if h.word == 4 {
		return uint64(h.order.Uint32(b))
	}
	return h.order.Uint64(b)
}

// withoutSections parses the file as if it had no section headers.
func (h *header) withoutSections(r io.ReaderAt, size int64, damage ...string) (*elf.File, []string, error) {
	raw := bytes.Clone(h.raw)
	for _, at := range []int{h.shnumAt, h.shstrAt} {
		h.order.PutUint16(raw[at:], 0)
	}
	if h.word == 8 {
		h.order.PutUint64(raw[h.shoffAt:], 0)
	} else {
		h.order.PutUint32(raw[h.shoffAt:], 0)
	}
	p := &patched{r: r, patches: []patch{{0, raw}}}
	f, err := elf.NewFile(io.NewSectionReader(p, 0, size))
	if err != nil {
		return nil, nil, err
	}
	return f, damage, nil
}

// sectionTable is a file's section header table as read, patched where
// a section is left out, and its section names.
type sectionTable struct {
	*header
	b        []byte // shnum entries of shentsize bytes
	shnum    uint64
	shstrndx uint64
	names    []byte // the section name table; nil when there is none or it cannot be trusted
	namesOff uint64
}

// table reads the section header table; why says why it cannot be read.
func (h *header) table(r io.ReaderAt, size int64) (t *sectionTable, why string) {
	t = &sectionTable{header: h, shnum: h.shnum, shstrndx: h.shstrndx}
	switch {
	case h.shoff == 0:
		return nil, fmt.Sprintf("%d at offset 0", h.shnum)
	case h.shoff > uint64(size):
		return nil, fmt.Sprintf("at %d, past the file's %d bytes", h.shoff, size)
	case h.shentsize < h.want:
		return nil, fmt.Sprintf("entries of %d bytes, less than %d", h.shentsize, h.want)
	}
	if t.shnum == 0 {
		// The count is the sh_size of section 0, the name table's index
		// its sh_link when it is SHN_XINDEX.
		if h.want > uint64(size)-h.shoff {
			return nil, fmt.Sprintf("at %d, past the file's %d bytes", h.shoff, size)
		}
		e := make([]byte, h.want)
		if _, err := r.ReadAt(e, int64(h.shoff)); err != nil {
			return nil, fmt.Sprintf("read at %d: %v", h.shoff, err)
		}
		t.shnum = h.uword(e[h.fsize:])
		if elf.SectionType(h.order.Uint32(e[h.typ:])) != elf.SHT_NULL || t.shnum < uint64(elf.SHN_LORESERVE) {
			return nil, fmt.Sprintf("section 0 of type %d counts %d sections", h.order.Uint32(e[h.typ:]), t.shnum)
		}
		if t.shstrndx == uint64(elf.SHN_XINDEX) {
			t.shstrndx = uint64(h.order.Uint32(e[h.link:]))
		}
	}
	switch {
	case t.shnum > (uint64(size)-h.shoff)/h.shentsize:
		return nil, fmt.Sprintf("%d at %d run past the file's %d bytes", t.shnum, h.shoff, size)
	case t.shnum*h.shentsize > maxTable:
		return nil, fmt.Sprintf("%d of %d bytes, more than %d", t.shnum, h.shentsize, maxTable)
	case t.shstrndx >= t.shnum:
		return nil, fmt.Sprintf("name table %d of %d sections", t.shstrndx, t.shnum)
	}
	t.b = make([]byte, t.shnum*h.shentsize)
	if _, err := r.ReadAt(t.b, int64(h.shoff)); err != nil {
		return nil, fmt.Sprintf("read at %d: %v", h.shoff, err)
	}
	return t, ""
}

// entry returns section i's header.
func (t *sectionTable) entry(i uint64) []byte {
	return t.b[i*t.shentsize:][:t.want]
}

// sectionName returns the name of section i, or "" when unknown.
func (t *sectionTable) sectionName(i uint64) string { return string(t.nameBytes(i)) }

// nameBytes is sectionName in the name table's bytes.
func (t *sectionTable) nameBytes(i uint64) []byte {
	off := uint64(t.order.Uint32(t.entry(i)[t.name:]))
	if t.names == nil || off >= uint64(len(t.names)) {
		return nil
	}
	s := t.names[off:]
	if n := bytes.IndexByte(s, 0); n >= 0 {
		s = s[:n]
	}
	return s
}

// check reads the name table and checks each section against the file;
// a section the file cannot hold is left out (its header zeroed). When
// the name table is among them, names is nil.
func (t *sectionTable) check(r io.ReaderAt, size int64) (damage []string) {
	bad := map[uint64]string{} // why each section left out is
	if t.shstrndx != 0 {
		e := t.entry(t.shstrndx)
		off, n := t.uword(e[t.offset:]), t.uword(e[t.fsize:])
		flags := elf.SectionFlag(t.uword(e[t.flags:]))
		switch typ := elf.SectionType(t.order.Uint32(e[t.typ:])); {
		case typ != elf.SHT_STRTAB:
			damage = append(damage, fmt.Sprintf("section names: section %d of type %v", t.shstrndx, typ))
		case flags&elf.SHF_COMPRESSED != 0:
			damage = append(damage, fmt.Sprintf("section names: section %d compressed", t.shstrndx))
		case off > uint64(size) || n > uint64(size)-off:
			damage = append(damage, fmt.Sprintf("section names: %d bytes at %d run past the file's %d", n, off, size))
		case n > maxTable:
			damage = append(damage, fmt.Sprintf("section names: %d bytes, more than %d", n, maxTable))
		default:
			t.names = make([]byte, n)
			if _, err := r.ReadAt(t.names, int64(off)); err != nil {
				t.names = nil
				damage = append(damage, fmt.Sprintf("section names: read %d bytes at %d: %v", n, off, err))
			}
			t.namesOff = off
		}
		if t.names == nil {
			return []string{"section headers: " + strings.TrimPrefix(damage[0], "section names: ") + ": not read"}
		}
	}
	type extent struct {
		lo, hi uint64
		i      uint64
	}
	var extents []extent
	for i := uint64(0); i < t.shnum; i++ {
		e := t.entry(i)
		typ := elf.SectionType(t.order.Uint32(e[t.typ:]))
		if i == 0 {
			if typ != elf.SHT_NULL { // section 0 is null, or holds an extended count
				bad[i] = fmt.Sprintf("of type %v", typ)
			}
			continue
		}
		flags := elf.SectionFlag(t.uword(e[t.flags:]))
		off, n := t.uword(e[t.offset:]), t.uword(e[t.fsize:])
		if nameOff := uint64(t.order.Uint32(e[t.name:])); t.names != nil && nameOff >= uint64(len(t.names)) {
			bad[i] = fmt.Sprintf("name at %d past the name table's %d bytes", nameOff, len(t.names))
			continue
		}
		if typ == elf.SHT_NULL || typ == elf.SHT_NOBITS {
			continue
		}
		if off > uint64(size) || n > uint64(size)-off {
			bad[i] = fmt.Sprintf("%d bytes at %d run past the file's %d", n, off, size)
			continue
		}
		if flags&elf.SHF_COMPRESSED != 0 {
			if why := t.compressed(r, off, n, flags); why != "" {
				bad[i] = why
				continue
			}
		} else if bytes.HasPrefix(t.nameBytes(i), []byte(".zdebug")) {
			if why := zdebug(r, off, n); why != "" {
				bad[i] = why
				continue
			}
		}
		if n > 0 {
			extents = append(extents, extent{off, off + n, i})
		}
	}
	// Sections whose contents overlap: which one lies is unknown.
	slices.SortFunc(extents, func(a, b extent) int { return cmp.Compare(a.lo, b.lo) })
	var reach extent // of the sections so far, the one reaching furthest
	for k, x := range extents {
		if k > 0 && x.lo < reach.hi {
			why := fmt.Sprintf("overlaps section %d (%s)", reach.i, t.sectionName(reach.i))
			if _, ok := bad[x.i]; !ok {
				bad[x.i] = why
			}
			if _, ok := bad[reach.i]; !ok {
				bad[reach.i] = fmt.Sprintf("overlaps section %d (%s)", x.i, t.sectionName(x.i))
			}
		}
		if x.hi > reach.hi || k == 0 {
			reach = x
		}
	}
	if why, ok := bad[t.shstrndx]; ok && t.shstrndx != 0 {
		t.names = nil
		return []string{fmt.Sprintf("section headers: the name table, section %d, %s: not read", t.shstrndx, why)}
	}
	idx := make([]uint64, 0, len(bad))
	for i := range bad {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		damage = append(damage, fmt.Sprintf("section %d (%s): %s: left out", i, t.sectionName(i), bad[i]))
	}
	for _, i := range idx {
		clear(t.entry(i))
	}
	return damage
}

// compressed checks the compression header of a section of n bytes at off
// with flags; "" when it may be inflated.
func (t *sectionTable) compressed(r io.ReaderAt, off, n uint64, flags elf.SectionFlag) string {
	if flags&elf.SHF_ALLOC != 0 {
		return "compressed and loaded"
	}
	var b [24]byte
	hdr := b[:chdrSize(t.class)]
	if n < uint64(len(hdr)) {
		return fmt.Sprintf("compressed in %d bytes, less than its header", n)
	}
	if _, err := r.ReadAt(hdr, int64(off)); err != nil {
		return fmt.Sprintf("read its compression header: %v", err)
	}
	if _, err := ReadChdr(hdr, t.class, t.order, n); errors.Is(err, ErrCorrupt) {
		// A claim over MaxSection may be true: Size refuses the
		// section when it is read, not the file.
		return strings.TrimSuffix(err.Error(), ": "+ErrCorrupt.Error())
	}
	return ""
}

// zdebug checks the header of a legacy compressed section (.zdebug_*: "ZLIB"
// and the size inflated, big-endian), which debug/elf believes when it
// allocates; "" when it may be inflated.
func zdebug(r io.ReaderAt, off, n uint64) string {
	var b [12]byte
	if n < 12 {
		return ""
	}
	if _, err := r.ReadAt(b[:], int64(off)); err != nil || string(b[:4]) != "ZLIB" {
		return ""
	}
	if claim := binary.BigEndian.Uint64(b[4:]); claim/MaxRatio > n || claim > MaxSection {
		return fmt.Sprintf("legacy compressed in %d bytes, claims %d", n, claim)
	}
	return ""
}

// patched reads r with some of its bytes replaced.
type patched struct {
	r       io.ReaderAt
	patches []patch
}

type patch struct {
	off int64
	b   []byte
}

// ReadAt reads r, and the patches over it: a read within one patch, from
// it alone.
func (p *patched) ReadAt(b []byte, off int64) (int, error) {
	for _, pt := range p.patches {
		if off >= pt.off && off+int64(len(b)) <= pt.off+int64(len(pt.b)) {
			return copy(b, pt.b[off-pt.off:]), nil
		}
	}
	n, err := p.r.ReadAt(b, off)
	for _, pt := range p.patches {
		lo, hi := max(off, pt.off), min(off+int64(n), pt.off+int64(len(pt.b)))
		if lo < hi {
			copy(b[lo-off:hi-off], pt.b[lo-pt.off:])
		}
	}
	return n, err
}

// Underlying returns the contents patched: where a section's bytes
// really lie, to map them.
func (p *patched) Underlying() io.ReaderAt { return p.r }
