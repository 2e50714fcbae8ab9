package symbols

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"

	"github.com/go-delve/delve/pkg/dwarf/frame"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
)

// ehIndex finds call frame information through .eh_frame_hdr's sorted
// search table, parsing only the entries (FDEs, and their CIEs) a lookup
// lands on: a stack needs a few dozen of the hundreds of thousands a large
// library holds (libtorch_cpu.so's .eh_frame is 9.9 MB). Every size read
// from the file is checked against the section before it is used. An
// ehIndex is safe for concurrent use.
type ehIndex struct {
	order   binary.ByteOrder
	hdrAddr uint64
	// table holds the search table's entries, 8 bytes each: the start of
	// a function and the address of its FDE, both signed 32-bit offsets
	// from hdrAddr, sorted by start.
	table     []byte
	mapped    bool // table is the file's pages (mapSection), unmapped with ix
	frameAddr uint64
	frameSize uint64
	// frame holds .eh_frame when it was read whole; else it is read from
	// the file open opens, at frameOff.
	frame    []byte
	open     func() (io.ReaderAt, io.Closer, error)
	frameOff uint64

	mu   sync.Mutex
	cies map[uint64][]byte                       // CIE records by offset in .eh_frame
	fdes map[uint64]*frame.FrameDescriptionEntry // parsed FDEs by offset in .eh_frame
}

// errNoHdr reports that a file has no search table this index can use;
// its .eh_frame is then parsed whole.
var errNoHdr = errors.New("no usable .eh_frame_hdr")

// DWARF exception header pointer encodings (the "DW_EH_PE_" values).
const (
	peAbsptr  = 0x00
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePCRel   = 0x10
	peDataRel = 0x30
	peOmit    = 0xff
)

// maxRecord bounds one CIE or FDE record: real ones are tens of bytes.
const maxRecord = 1 << 20

// newEhIndex reads the search table of f's .eh_frame_hdr. frame is
// .eh_frame's contents when already read, else nil and open opens f's
// file to read them.
func newEhIndex(f *elf.File, frame []byte, open func() (io.ReaderAt, io.Closer, error)) (*ehIndex, error) {
	hs, es := f.Section(".eh_frame_hdr"), f.Section(".eh_frame")
	if hs == nil || es == nil || hs.Type != elf.SHT_PROGBITS || es.Type != elf.SHT_PROGBITS ||
		hs.Flags&elf.SHF_COMPRESSED != 0 || es.Flags&elf.SHF_COMPRESSED != 0 || f.Class != elf.ELFCLASS64 {
		return nil, errNoHdr
	}
	// A large library's table (1.7 MB of libtorch_cpu.so's) is mapped,
	// not read: a search touches a few of its pages. lookup recovers when
	// the file is truncated under it.
	hdr, unmap, err := sectionMapped(hs, false)
	if err != nil {
		return nil, fmt.Errorf("read .eh_frame_hdr: %w", err)
	}
	ix, err := parseEhHdr(hdr, f.ByteOrder, hs.Addr, es.Addr, es.Size)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, err
	}
	if unmap != nil {
		ix.mapped = true
		runtime.AddCleanup(ix, func(unmap func()) { unmap() }, unmap)
	}
	if frame != nil && uint64(len(frame)) != es.Size {
		return nil, fmt.Errorf(".eh_frame: %d bytes read of %d", len(frame), es.Size)
	}
	ix.frame, ix.open, ix.frameOff = frame, open, es.Offset
	return ix, nil
}

// segmentEhIndex reads the search table that PT_GNU_EH_FRAME holds (the
// contents of .eh_frame_hdr) in f, a file of size bytes that open opens,
// for the .eh_frame the table points to, read from the file as needed:
// what a running program's unwinder reads, whatever the section headers
// say. The .eh_frame's size is unknown: it may reach its segment's end.
func segmentEhIndex(f *elf.File, size int64, open func() (io.ReaderAt, io.Closer, error)) (*ehIndex, error) {
	var hp *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			hp = p
			break
		}
	}
	if hp == nil || f.Class != elf.ELFCLASS64 {
		return nil, errNoHdr
	}
	if hp.Filesz > uint64(size) || hp.Filesz > elfcheck.MaxSection {
		return nil, fmt.Errorf("segment of %d bytes in a file of %d", hp.Filesz, size)
	}
	hdr := make([]byte, hp.Filesz)
	if _, err := hp.ReadAt(hdr, 0); err != nil {
		return nil, err
	}
	pos := 4
	if len(hdr) < pos || hdr[0] != 1 {
		return nil, errNoHdr
	}
	frameAddr, ok := readEncoded(hdr, &pos, hdr[1], f.ByteOrder, hp.Vaddr)
	if !ok {
		return nil, errNoHdr
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || frameAddr < p.Vaddr || frameAddr-p.Vaddr >= p.Filesz {
			continue
		}
		ix, err := parseEhHdr(hdr, f.ByteOrder, hp.Vaddr, frameAddr, p.Filesz-(frameAddr-p.Vaddr))
		if err != nil {
			return nil, err
		}
		ix.open, ix.frameOff = open, p.Off+(frameAddr-p.Vaddr)
		return ix, nil
	}
	return nil, fmt.Errorf(".eh_frame at %#x in no segment", frameAddr)
}

// parseEhHdr parses .eh_frame_hdr's contents (at hdrAddr) for the
// .eh_frame at frameAddr, of frameSize bytes.
func parseEhHdr(hdr []byte, order binary.ByteOrder, hdrAddr, frameAddr, frameSize uint64) (*ehIndex, error) {
	if len(hdr) < 4 || hdr[0] != 1 {
		return nil, errNoHdr
	}
	ptrEnc, countEnc, tableEnc := hdr[1], hdr[2], hdr[3]
	pos := 4
	ptr, ok := readEncoded(hdr, &pos, ptrEnc, order, hdrAddr)
	if !ok || ptr != frameAddr {
		return nil, errNoHdr
	}
	count, ok := readEncoded(hdr, &pos, countEnc, order, hdrAddr)
	// The table is usable only in its common form: fixed 4-byte entries
	// relative to the header, which is all a binary search needs.
	if !ok || tableEnc != peDataRel|peSdata4 || count > uint64(len(hdr)-pos)/8 {
		return nil, errNoHdr
	}
	return &ehIndex{
		order:     order,
		hdrAddr:   hdrAddr,
		table:     hdr[pos : pos+int(count)*8],
		frameAddr: frameAddr,
		frameSize: frameSize,
		cies:      map[uint64][]byte{},
		fdes:      map[uint64]*frame.FrameDescriptionEntry{},
	}, nil
}

// readEncoded reads a pointer of encoding enc at *pos of b (b starts at
// address base), absolute, relative to its own address or to base.
func readEncoded(b []byte, pos *int, enc byte, order binary.ByteOrder, base uint64) (uint64, bool) {
	if enc == peOmit {
		return 0, false
	}
	at := base + uint64(*pos)
	var v uint64
	switch n := len(b) - *pos; enc & 0x0f {
	case peUdata4, peSdata4:
		if n < 4 {
			return 0, false
		}
		v = uint64(order.Uint32(b[*pos:]))
		if enc&0x0f == peSdata4 {
			v = uint64(int64(int32(v)))
		}
		*pos += 4
	case peAbsptr, peUdata8, peSdata8:
		if n < 8 {
			return 0, false
		}
		v = order.Uint64(b[*pos:])
		*pos += 8
	default:
		return 0, false
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += at
	case peDataRel:
		v += base
	default:
		return 0, false
	}
	return v, true
}

// entry returns the function start and FDE address of table entry i.
func (ix *ehIndex) entry(i int) (start, fde uint64) {
	e := ix.table[i*8:]
	return ix.hdrAddr + uint64(int64(int32(ix.order.Uint32(e)))), ix.hdrAddr + uint64(int64(int32(ix.order.Uint32(e[4:]))))
}

// lookup returns the FDE covering vaddr, an error wrapping ErrNoFDE when
// none does.
func (ix *ehIndex) lookup(vaddr uint64) (fde *frame.FrameDescriptionEntry, err error) {
	if ferr := faultSafely(ix.mapped, func() { fde, err = ix.search(vaddr) }); ferr != nil {
		return nil, fmt.Errorf("search table: %w", ferr)
	}
	return fde, err
}

// search is lookup, reading the table.
func (ix *ehIndex) search(vaddr uint64) (*frame.FrameDescriptionEntry, error) {
	n := len(ix.table) / 8
	i := sort.Search(n, func(i int) bool { start, _ := ix.entry(i); return start > vaddr }) - 1
	if i < 0 {
		return nil, ErrNoFDE
	}
	_, addr := ix.entry(i)
	if addr < ix.frameAddr || addr-ix.frameAddr >= ix.frameSize {
		return nil, fmt.Errorf("search table entry %d: FDE at %#x is outside .eh_frame", i, addr)
	}
	fde, err := ix.fde(addr - ix.frameAddr)
	if err != nil {
		return nil, err
	}
	if !fde.Cover(vaddr) {
		return nil, ErrNoFDE
	}
	return fde, nil
}

// fde parses the FDE at offset off of .eh_frame, with its CIE.
func (ix *ehIndex) fde(off uint64) (*frame.FrameDescriptionEntry, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if fde, ok := ix.fdes[off]; ok {
		return fde, nil
	}
	var r io.ReaderAt
	if ix.frame == nil {
		// One open for the FDE and its CIE.
		fr, c, err := ix.open()
		if err != nil {
			return nil, fmt.Errorf("read .eh_frame: %w", err)
		}
		defer c.Close()
		r = fr
	}
	rec, err := ix.record(r, off)
	if err != nil {
		return nil, err
	}
	ciePtr := uint64(ix.order.Uint32(rec[4:]))
	if ciePtr == 0 || ciePtr > off+4 {
		return nil, fmt.Errorf("FDE at .eh_frame+%#x: CIE pointer %#x out of range", off, ciePtr)
	}
	cieOff := off + 4 - ciePtr
	cie, ok := ix.cies[cieOff]
	if !ok {
		if cie, err = ix.record(r, cieOff); err != nil {
			return nil, err
		}
		if ix.order.Uint32(cie[4:]) != 0 {
			return nil, fmt.Errorf("FDE at .eh_frame+%#x: no CIE at +%#x", off, cieOff)
		}
		ix.cies[cieOff] = cie
	}
	fde, err := parseOne(cie, rec, ix.order, ix.frameAddr+off)
	if err != nil {
		return nil, fmt.Errorf("FDE at .eh_frame+%#x: %w", off, err)
	}
	ix.fdes[off] = fde
	return fde, nil
}

// record returns the CIE or FDE record at offset off of .eh_frame: its
// length, its CIE id or pointer, and its contents. r reads the file when
// .eh_frame is not held.
func (ix *ehIndex) record(r io.ReaderAt, off uint64) ([]byte, error) {
	if off > ix.frameSize || ix.frameSize-off < 8 {
		return nil, fmt.Errorf("record at .eh_frame+%#x: past the section's end", off)
	}
	left := ix.frameSize - off
	var b []byte
	if ix.frame != nil {
		b = ix.frame[off:]
	} else {
		// Most records fit in the first read.
		b = make([]byte, min(left, 256))
		if _, err := r.ReadAt(b, int64(ix.frameOff+off)); err != nil {
			return nil, fmt.Errorf("read .eh_frame+%#x: %w", off, err)
		}
	}
	n := uint64(ix.order.Uint32(b))
	if n < 4 || n > maxRecord || n > left-4 {
		// 0xffffffff (64-bit DWARF) is not used in .eh_frame.
		return nil, fmt.Errorf("record at .eh_frame+%#x: bad length %#x", off, n)
	}
	if ix.frame != nil {
		return b[: 4+n : 4+n], nil
	}
	if uint64(len(b)) < 4+n {
		b = make([]byte, 4+n)
		if _, err := r.ReadAt(b, int64(ix.frameOff+off)); err != nil {
			return nil, fmt.Errorf("read .eh_frame+%#x: %w", off, err)
		}
	}
	return b[:4+n], nil
}

// parseOne parses one FDE record with its CIE record: the two side by side,
// the FDE's CIE pointer pointing back at the CIE, and the address they are
// parsed at chosen so that the FDE lies at fdeAddr, where its addresses
// are relative to.
func parseOne(cie, fde []byte, order binary.ByteOrder, fdeAddr uint64) (_ *frame.FrameDescriptionEntry, err error) {
	buf := make([]byte, 0, len(cie)+len(fde))
	buf = append(append(buf, cie...), fde...)
	order.PutUint32(buf[len(cie)+4:], uint32(len(cie)+4))
	base := fdeAddr - uint64(len(cie))
	if base == 0 || base > fdeAddr {
		return nil, errors.New("address out of range")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt call frame information: %v", r)
		}
	}()
	fdes, err := frame.Parse(buf, order, 0, 8, base)
	if err != nil {
		return nil, err
	}
	if len(fdes) != 1 || fdes[0].CIE == nil {
		return nil, errors.New("corrupt call frame information")
	}
	return fdes[0], nil
}
