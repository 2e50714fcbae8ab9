// Package elfcheck opens ELF files that come from outside, the libraries
// a job maps, so that no size read from one makes us allocate more than
// the file holds or a stated limit. debug/elf trusts a section's claimed
// uncompressed size (a compressed .debug_info may claim 2^40 bytes) and
// inflates a compressed section name table while it parses the headers;
// NewFile refuses both, Salvage reads what can be trusted of such a file
// (as ld.so loads it, through its program headers), DynamicSymbols reads
// its symbols as ld.so does, and Size states what reading a section will
// cost before anything is allocated for it.
package elfcheck

import (
	"debug/elf"
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
// and checks every section against the file: it must lie inside it, over
// no other section, and a compressed one must claim no more than MaxRatio
// times its size. It refuses what Salvage would leave out.
func NewFile(r io.ReaderAt, size int64) (*elf.File, error) {
	f, damage, err := Salvage(r, size)
	if err != nil {
		return nil, err
	}
	if len(damage) > 0 {
		return nil, fmt.Errorf("%s: %w", damage[0], ErrCorrupt)
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
