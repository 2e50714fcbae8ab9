package ebpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// libKey names a library file: the device and inode of its mapping.
type libKey struct {
	Dev   string
	Inode uint64
}

// mappedLib is an executable file mapping of a process.
type mappedLib struct {
	Key  libKey
	Path string // as the process sees it
}

// execMappings lists the distinct executable file mappings of pid.
func execMappings(pid int) ([]mappedLib, error) {
	maps, err := procfs.Maps(pid)
	if err != nil {
		return nil, err
	}
	seen := map[libKey]bool{}
	var out []mappedLib
	for _, m := range maps {
		if !m.Exec() || m.Inode == 0 || len(m.Path) == 0 || m.Path[0] != '/' {
			continue
		}
		k := libKey{Dev: m.Dev, Inode: m.Inode}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, mappedLib{Key: k, Path: m.Path})
	}
	return out, nil
}

// exportedProbeSymbols reads the dynamic (and, when present, the static)
// symbol table of an ELF file and returns which of our probe symbols it
// defines as functions, each with its file offset (what a uprobe is
// attached at): attaching then needs no second read of the symbols. A
// library stripped to .dynsym is enough.
func exportedProbeSymbols(path string) (map[string]uint64, error) {
	f, err := elfcheck.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	out, err := probeSymbolsOf(f.File)
	if err != nil {
		return nil, fmt.Errorf("read symbols of %s: %w", path, err)
	}
	return out, nil
}

// probeSymbolsOf returns which of our probe symbols f, a file checked by
// elfcheck, defines as functions, with the file offsets of their probe
// sites (the entry, or an instruction after it the kernel emulates:
// ProbeSite), and, beside the
// loader's _dl_debug_state, where its _r_debug lies (rDebugSymbol).
func probeSymbolsOf(f *elf.File) (map[string]uint64, error) {
	out := map[string]uint64{}
	var rDebug, dlState uint64 // addresses
	for _, typ := range []elf.SectionType{elf.SHT_DYNSYM, elf.SHT_SYMTAB} {
		syms, err := elfcheck.Symbols(f, typ)
		if err != nil {
			if errors.Is(err, elf.ErrNoSymbols) {
				continue
			}
			return nil, err
		}
		for _, s := range syms {
			if s.Name == rDebugSymbol && elf.ST_TYPE(s.Info) == elf.STT_OBJECT && s.Section != elf.SHN_UNDEF && rDebug == 0 {
				rDebug = s.Value
				continue
			}
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			if s.Name == loaderProbe.Symbol && dlState == 0 {
				dlState = s.Value
			}
			if _, ok := probeBySymbol[s.Name]; !ok {
				continue
			}
			if _, done := out[s.Name]; done {
				continue
			}
			off := fileOffset(f, s.Value)
			if s.Name != loaderProbe.Symbol { // r_debug is found from its entry
				off += uint64(ProbeSiteAt(f, s.Value))
			}
			out[s.Name] = off
		}
	}
	// r_debug is data, in no executable segment: kept at its distance
	// from _dl_debug_state, which is all the loader probe needs.
	if off, ok := out[loaderProbe.Symbol]; ok && rDebug != 0 {
		out[rDebugSymbol] = off + (rDebug - dlState)
	}
	return out, nil
}

// fileOffset converts a symbol's virtual address to its offset in the
// file, through the executable PT_LOAD segment that holds it; without one
// the address is taken as the offset, as link.Executable does.
func fileOffset(f *elf.File, addr uint64) uint64 {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= addr && addr < p.Vaddr+p.Memsz {
			return addr - p.Vaddr + p.Off
		}
	}
	return addr
}

// ProbeSiteAt is ProbeSite for the function at virtual address addr of f,
// read from the executable PT_LOAD segment that holds it (0 without one).
func ProbeSiteAt(f *elf.File, addr uint64) int {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= addr && addr < p.Vaddr+p.Filesz {
			b := make([]byte, min(uint64(maxSiteSkip+16), p.Vaddr+p.Filesz-addr))
			k, _ := p.ReadAt(b, int64(addr-p.Vaddr))
			return ProbeSite(b[:k])
		}
	}
	return 0
}

// wanted reports whether a mapped file deserves a symbol scan: a known
// vendor name, a library the user named, the dynamic loader, or any
// library not known to be a system one (renamed vendor libraries are found
// by their symbols).
func (o *Options) wanted(path string) bool {
	for _, l := range o.Libraries {
		if l == path || filepath.Base(l) == filepath.Base(path) {
			return true
		}
	}
	return knownName(path) || loader(path) || !boring(path)
}
