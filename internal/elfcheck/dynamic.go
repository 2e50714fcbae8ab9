package elfcheck

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrNoDynamic reports a file without a dynamic symbol table that its
// program headers lead to.
var ErrNoDynamic = errors.New("no dynamic symbol table")

// maxDynamic bounds the dynamic segment read: real ones are hundreds of
// bytes.
const maxDynamic = 1 << 20

// DynamicSymbols returns the dynamic symbol table of f, an ELF64 file of
// size bytes, and its strings, found as ld.so finds them, whatever the section
// headers say: PT_DYNAMIC's entries give the addresses of the table
// (DT_SYMTAB) and its strings (DT_STRTAB, DT_STRSZ bytes), which the
// PT_LOAD segments place in the file; the symbol count is the hash
// table's (DT_GNU_HASH, else DT_HASH), else what lies between the table
// and its strings. Every size read is checked against the segment that
// holds it and the file, so that nothing read costs more than the file
// holds (and MaxSection); a string table that runs past its segment or
// the file is cut there.
func DynamicSymbols(f *elf.File, size int64) (symtab, strtab []byte, err error) {
	if f.Class != elf.ELFCLASS64 {
		return nil, nil, fmt.Errorf("dynamic segment of an %v file: %w", f.Class, ErrNoDynamic)
	}
	var dyn *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dyn = p
			break
		}
	}
	if dyn == nil {
		return nil, nil, fmt.Errorf("no PT_DYNAMIC: %w", ErrNoDynamic)
	}
	tags := map[elf.DynTag]uint64{}
	var b [512]byte
	end := min(dyn.Filesz, maxDynamic, uint64(max(size, 0))) &^ 15
read:
	for at := uint64(0); at < end; at += uint64(len(b)) {
		n, _ := dyn.ReadAt(b[:min(uint64(len(b)), end-at)], int64(at))
		if n < 16 {
			break
		}
		for i := 0; i+16 <= n; i += 16 {
			tag := elf.DynTag(f.ByteOrder.Uint64(b[i:]))
			if tag == elf.DT_NULL {
				break read
			}
			switch tag {
			case elf.DT_SYMTAB, elf.DT_STRTAB, elf.DT_STRSZ, elf.DT_SYMENT, elf.DT_HASH, elf.DT_GNU_HASH:
				if _, ok := tags[tag]; !ok {
					tags[tag] = f.ByteOrder.Uint64(b[i+8:])
				}
			}
		}
	}
	symAddr, ok1 := tags[elf.DT_SYMTAB]
	strAddr, ok2 := tags[elf.DT_STRTAB]
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("dynamic segment without DT_SYMTAB and DT_STRTAB: %w", ErrNoDynamic)
	}
	if ent, ok := tags[elf.DT_SYMENT]; ok && ent != elf.Sym64Size {
		return nil, nil, fmt.Errorf("dynamic symbols of %d bytes: %w", ent, ErrCorrupt)
	}
	symAt, symRoom, err := segmentAt(f, size, symAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("DT_SYMTAB: %w", err)
	}
	strAt, strRoom, err := segmentAt(f, size, strAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("DT_STRTAB: %w", err)
	}
	count, err := symbolCount(f, size, tags, symAddr, strAddr)
	if err != nil {
		return nil, nil, err
	}
	if count > symRoom/elf.Sym64Size || count*elf.Sym64Size > MaxSection {
		return nil, nil, fmt.Errorf("%d dynamic symbols at %#x run past their segment: %w", count, symAddr, ErrCorrupt)
	}
	strSize := min(strRoom, MaxSection)
	if n, ok := tags[elf.DT_STRSZ]; ok {
		strSize = min(n, strSize)
	}
	symtab, strtab = make([]byte, count*elf.Sym64Size), make([]byte, strSize)
	if err := readFull(symAt, symtab); err != nil {
		return nil, nil, fmt.Errorf("read dynamic symbols: %w", err)
	}
	if err := readFull(strAt, strtab); err != nil {
		return nil, nil, fmt.Errorf("read dynamic strings: %w", err)
	}
	return symtab, strtab, nil
}

// segmentReader reads from one place of a PT_LOAD segment.
type segmentReader struct {
	p   *elf.Prog
	off uint64 // in the segment
}

func readFull(s segmentReader, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := s.p.ReadAt(b, int64(s.off))
	return err
}

// segmentAt finds the PT_LOAD segment whose file contents hold vaddr, and
// how many bytes of it lie from there on in the file of size bytes.
func segmentAt(f *elf.File, size int64, vaddr uint64) (segmentReader, uint64, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr-p.Vaddr < p.Filesz {
			off := vaddr - p.Vaddr
			room := p.Filesz - off
			if at := p.Off + off; at < p.Off || at >= uint64(max(size, 0)) {
				room = 0
			} else {
				room = min(room, uint64(size)-at)
			}
			return segmentReader{p, off}, room, nil
		}
	}
	return segmentReader{}, 0, fmt.Errorf("address %#x in no segment of the file: %w", vaddr, ErrCorrupt)
}

// symbolCount returns how many entries the dynamic symbol table at
// symAddr has: from its hash table, as ld.so finds a symbol, else the
// room between it and its strings at strAddr.
func symbolCount(f *elf.File, size int64, tags map[elf.DynTag]uint64, symAddr, strAddr uint64) (uint64, error) {
	u32 := func(s segmentReader, room uint64, i uint64) (uint64, error) {
		if i >= room/4 {
			return 0, fmt.Errorf("hash table runs past its segment: %w", ErrCorrupt)
		}
		var b [4]byte
		if _, err := s.p.ReadAt(b[:], int64(s.off+4*i)); err != nil {
			return 0, err
		}
		return uint64(f.ByteOrder.Uint32(b[:])), nil
	}
	if addr, ok := tags[elf.DT_GNU_HASH]; ok {
		s, room, err := segmentAt(f, size, addr)
		if err != nil {
			return 0, fmt.Errorf("DT_GNU_HASH: %w", err)
		}
		return gnuHashCount(f.ByteOrder, s, room, u32)
	}
	if addr, ok := tags[elf.DT_HASH]; ok {
		s, room, err := segmentAt(f, size, addr)
		if err != nil {
			return 0, fmt.Errorf("DT_HASH: %w", err)
		}
		return u32(s, room, 1) // nchain: one chain entry a symbol
	}
	if strAddr > symAddr {
		return (strAddr - symAddr) / elf.Sym64Size, nil
	}
	return 0, fmt.Errorf("no hash table to count the dynamic symbols: %w", ErrNoDynamic)
}

// gnuHashCount counts the symbols of a DT_GNU_HASH table (room bytes of
// its segment from s): past the highest symbol a bucket starts at, its
// chain goes on to the entry whose low bit ends it. The symbols before
// symoffset are not hashed.
func gnuHashCount(order binary.ByteOrder, s segmentReader, room uint64, u32 func(segmentReader, uint64, uint64) (uint64, error)) (uint64, error) {
	nbuckets, err := u32(s, room, 0)
	if err != nil {
		return 0, err
	}
	symoffset, err := u32(s, room, 1)
	if err != nil {
		return 0, err
	}
	bloomSize, err := u32(s, room, 2)
	if err != nil {
		return 0, err
	}
	buckets := 4 + 2*bloomSize // in 32-bit words: the header, 64-bit bloom words
	if nbuckets > room/4 || buckets > room/4-nbuckets {
		return 0, fmt.Errorf("GNU hash table of %d buckets runs past its segment: %w", nbuckets, ErrCorrupt)
	}
	b := make([]byte, 4*nbuckets)
	if len(b) > 0 {
		if _, err := s.p.ReadAt(b, int64(s.off+4*buckets)); err != nil {
			return 0, err
		}
	}
	var last uint64
	for i := 0; i+4 <= len(b); i += 4 {
		last = max(last, uint64(order.Uint32(b[i:])))
	}
	if last < symoffset {
		return symoffset, nil
	}
	chains := buckets + nbuckets
	for i := last - symoffset; ; i++ {
		v, err := u32(s, room, chains+i)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if v&1 != 0 {
			return symoffset + i + 1, nil
		}
	}
}
