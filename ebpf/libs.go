package ebpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"

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
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	out := map[string]uint64{}
	for _, read := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, err := read()
		if err != nil {
			if errors.Is(err, elf.ErrNoSymbols) {
				continue
			}
			return nil, fmt.Errorf("read symbols of %s: %w", path, err)
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			if _, ok := probeBySymbol[s.Name]; !ok {
				continue
			}
			if _, done := out[s.Name]; done {
				continue
			}
			if off, ok := fileOffset(f, s.Value); ok {
				out[s.Name] = off
			}
		}
	}
	return out, nil
}

// fileOffset converts a symbol's virtual address to its offset in the
// file, through the executable PT_LOAD segment that holds it.
func fileOffset(f *elf.File, addr uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= addr && addr < p.Vaddr+p.Memsz {
			return addr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
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
