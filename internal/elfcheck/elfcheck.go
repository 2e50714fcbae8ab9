// Package elfcheck opens ELF files that come from outside, the libraries
// a job maps, so that no size read from one makes us allocate more than
// the file holds or a stated limit. debug/elf trusts a section's claimed
// uncompressed size (a compressed .debug_info may claim 2^40 bytes) and
// inflates a compressed section name table while it parses the headers;
// NewFile refuses both, and Size states what reading a section will cost
// before anything is allocated for it.
package elfcheck

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxSection is the most bytes one section is read into: a larger one
// (a claim, or a real section of a huge library) is refused, and what it
// holds is not read. The agent's memory limit is 1 GiB.
const MaxSection = 256 << 20

// MaxRatio bounds the claimed uncompressed size of a compressed section by
// its compressed size: deflate cannot expand data more than 1032 times, and
// DWARF compresses by 3 to 10.
const MaxRatio = 1032

// ErrCorrupt reports a size or an offset read from a file that the file
// cannot hold.
var ErrCorrupt = errors.New("corrupt ELF file")

// ErrTooLarge reports a section larger than MaxSection.
var ErrTooLarge = errors.New("section too large")

// NewFile parses the headers of an ELF file of size bytes that r holds,
// and checks every section against the file: it must lie inside it, and a
// compressed one must claim no more than MaxRatio times its size.
func NewFile(r io.ReaderAt, size int64) (*elf.File, error) {
	if err := checkHeaders(r, size); err != nil {
		return nil, err
	}
	f, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, err
	}
	if err := check(f, size); err != nil {
		return nil, err
	}
	return f, nil
}

// File is an ELF file opened by Open, with what closes it.
type File struct {
	*elf.File
	Size int64
	f    *os.File
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Open opens and checks the ELF file at path; only a regular file is read.
func Open(path string) (*File, error) {
	osf, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := osf.Stat()
	if err != nil {
		osf.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		osf.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	ef, err := NewFile(osf, fi.Size())
	if err != nil {
		osf.Close()
		return nil, fmt.Errorf("parse elf %s: %w", path, err)
	}
	return &File{File: ef, Size: fi.Size(), f: osf}, nil
}

// check checks f's sections against size, the file's.
func check(f *elf.File, size int64) error {
	for i, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL {
			continue
		}
		if s.Offset > uint64(size) || s.FileSize > uint64(size)-s.Offset {
			return fmt.Errorf("section %d (%s) at %d, %d bytes, runs past the file's %d: %w", i, s.Name, s.Offset, s.FileSize, size, ErrCorrupt)
		}
		if s.Flags&elf.SHF_COMPRESSED != 0 && s.Size/MaxRatio > s.FileSize {
			return fmt.Errorf("section %d (%s) of %d bytes claims %d inflated: %w", i, s.Name, s.FileSize, s.Size, ErrCorrupt)
		}
	}
	return nil
}

// Size returns the bytes s's contents take in memory, inflated, after
// checking them against MaxSection.
func Size(s *elf.Section) (int, error) {
	if s.Type == elf.SHT_NOBITS {
		return 0, fmt.Errorf("section %s has no data", s.Name)
	}
	if s.Size > MaxSection {
		return 0, fmt.Errorf("section %s of %d bytes, more than %d: %w", s.Name, s.Size, MaxSection, ErrTooLarge)
	}
	return int(s.Size), nil
}

// Data returns s's contents, inflated, once Size accepts them.
func Data(s *elf.Section) ([]byte, error) {
	if _, err := Size(s); err != nil {
		return nil, err
	}
	return s.Data()
}

// checkHeaders refuses a file whose program or section header table runs
// past its end (debug/elf would read it in 10 MB chunks before finding
// out), and one whose section name table is compressed: a table debug/elf
// would inflate, whatever its claimed size, while parsing the headers.
// Other oddities are left for debug/elf to find.
func checkHeaders(r io.ReaderAt, size int64) error {
	var h [64]byte
	if size < 52 {
		return nil
	}
	n, _ := r.ReadAt(h[:min(size, 64)], 0)
	if n < 52 || string(h[:4]) != elf.ELFMAG {
		return nil
	}
	var order binary.ByteOrder = binary.LittleEndian
	if elf.Data(h[elf.EI_DATA]) == elf.ELFDATA2MSB {
		order = binary.BigEndian
	}
	// Offsets of e_shoff, e_shentsize, e_shstrndx, and in a section
	// header of sh_flags and sh_link, by class.
	var phoff, phentsize, phnum, shoff, shentsize, shnum, shstrndx, flagsLen, linkOff uint64
	switch elf.Class(h[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		if n < 64 {
			return nil
		}
		phoff, phentsize, phnum = order.Uint64(h[0x20:]), uint64(order.Uint16(h[0x36:])), uint64(order.Uint16(h[0x38:]))
		shoff, shentsize, shnum, shstrndx = order.Uint64(h[0x28:]), uint64(order.Uint16(h[0x3a:])), uint64(order.Uint16(h[0x3c:])), uint64(order.Uint16(h[0x3e:]))
		flagsLen, linkOff = 8, 40
	case elf.ELFCLASS32:
		phoff, phentsize, phnum = uint64(order.Uint32(h[0x1c:])), uint64(order.Uint16(h[0x2a:])), uint64(order.Uint16(h[0x2c:]))
		shoff, shentsize, shnum, shstrndx = uint64(order.Uint32(h[0x20:])), uint64(order.Uint16(h[0x2e:])), uint64(order.Uint16(h[0x30:])), uint64(order.Uint16(h[0x32:]))
		flagsLen, linkOff = 4, 24
	default:
		return nil
	}
	if phnum > 0 && (phoff > uint64(size) || phnum*phentsize > uint64(size)-phoff) {
		return fmt.Errorf("%d program headers at %d run past the file's %d bytes: %w", phnum, phoff, size, ErrCorrupt)
	}
	if shoff > uint64(size) {
		return fmt.Errorf("section headers at %d past the file's %d bytes: %w", shoff, size, ErrCorrupt)
	}
	if shoff > 0 && shnum == 0 && shentsize >= linkOff+4 {
		// The count is the sh_size of section 0.
		var cnt [8]byte
		if _, err := r.ReadAt(cnt[:flagsLen], int64(shoff+linkOff-flagsLen)); err == nil {
			shnum = uint64(order.Uint32(cnt[:]))
			if flagsLen == 8 {
				shnum = order.Uint64(cnt[:])
			}
		}
	}
	if shnum > 0 && shentsize > 0 && shnum > (uint64(size)-shoff)/shentsize {
		return fmt.Errorf("%d section headers at %d run past the file's %d bytes: %w", shnum, shoff, size, ErrCorrupt)
	}
	if shoff == 0 || shoff > uint64(size) || shstrndx == 0 || shentsize < linkOff+4 {
		return nil
	}
	if shstrndx == uint64(elf.SHN_XINDEX) {
		// The index is the sh_link of section 0.
		var link [4]byte
		if _, err := r.ReadAt(link[:], int64(shoff+linkOff)); err != nil {
			return nil
		}
		shstrndx = uint64(order.Uint32(link[:]))
	}
	off := shoff + shstrndx*shentsize + 8 // sh_flags follows sh_name and sh_type
	if shstrndx > uint64(size) || off+flagsLen > uint64(size) {
		return nil // past the file: debug/elf refuses it
	}
	var fl [8]byte
	if _, err := r.ReadAt(fl[:flagsLen], int64(off)); err != nil {
		return nil
	}
	flags := uint64(order.Uint32(fl[:]))
	if flagsLen == 8 {
		flags = order.Uint64(fl[:])
	}
	if flags&uint64(elf.SHF_COMPRESSED) != 0 {
		return fmt.Errorf("compressed section name table: %w", ErrCorrupt)
	}
	return nil
}

// Symbols returns the symbols of f's table of type typ (SHT_SYMTAB or
// SHT_DYNSYM), as debug/elf reads them, once Size accepts the table and
// its strings; elf.ErrNoSymbols when f has no such table.
func Symbols(f *elf.File, typ elf.SectionType) ([]elf.Symbol, error) {
	s := f.SectionByType(typ)
	if s == nil {
		return nil, elf.ErrNoSymbols
	}
	if _, err := Size(s); err != nil {
		return nil, err
	}
	if s.Link > 0 && s.Link < uint32(len(f.Sections)) {
		if _, err := Size(f.Sections[s.Link]); err != nil {
			return nil, err
		}
	}
	if typ == elf.SHT_DYNSYM {
		return f.DynamicSymbols()
	}
	return f.Symbols()
}
