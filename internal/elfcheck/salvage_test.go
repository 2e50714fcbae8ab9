package elfcheck

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// Every damaged variant of a compiled library opens: what lies is left
// out and told; the symbol table ld.so reads is found through the
// program headers; nothing read costs more than the file holds.
func TestSalvageDamagedLibraries(t *testing.T) {
	_, variants := testutil.SpinLibraries(t, t.TempDir())
	for _, v := range variants {
		t.Run(v.Name, func(t *testing.T) {
			b, err := os.ReadFile(v.Path)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			f, damage, err := Salvage(bytes.NewReader(b), int64(len(b)))
			if v.Damage == testutil.Unloadable {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Salvage = %v, want %v", err, ErrCorrupt)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			symtab, strtab, dynErr := DynamicSymbols(f, int64(len(b)))
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > uint64(4*len(b))+64<<10 {
				t.Errorf("%d bytes allocated for a %d-byte file", n, len(b))
			}
			checkSections(t, f, int64(len(b)))
			if (v.Damage == testutil.Headers) != (len(damage) > 0) {
				t.Errorf("damage %q", damage)
			}
			if dynErr != nil {
				t.Fatalf("dynamic symbols: %v", dynErr)
			}
			if !hasSymbol(f.ByteOrder, symtab, strtab, "spin") {
				t.Errorf("no spin among %d dynamic symbols", len(symtab)/elf.Sym64Size)
			}
		})
	}
}

// checkSections checks what Salvage promises of the sections it kept:
// each lies in the file, over no other, and a compressed one claims at
// most MaxRatio times its size.
func checkSections(t testing.TB, f *elf.File, size int64) {
	t.Helper()
	type extent struct{ lo, hi uint64 }
	var ext []extent
	for i, s := range f.Sections {
		if s.Type == elf.SHT_NULL || s.Type == elf.SHT_NOBITS {
			continue
		}
		if s.Offset > uint64(size) || s.FileSize > uint64(size)-s.Offset {
			t.Fatalf("section %d (%s) at %d, %d bytes, past the file's %d", i, s.Name, s.Offset, s.FileSize, size)
		}
		if s.Flags&elf.SHF_COMPRESSED != 0 && s.Size/MaxRatio > s.FileSize {
			t.Fatalf("section %d (%s) of %d bytes claims %d", i, s.Name, s.FileSize, s.Size)
		}
		for _, e := range ext {
			if s.FileSize > 0 && s.Offset < e.hi && e.lo < s.Offset+s.FileSize {
				t.Fatalf("section %d (%s) overlaps another", i, s.Name)
			}
		}
		if s.FileSize > 0 {
			ext = append(ext, extent{s.Offset, s.Offset + s.FileSize})
		}
	}
}

// hasSymbol reports whether the ELF64 symbol table symtab names name.
func hasSymbol(order binary.ByteOrder, symtab, strtab []byte, name string) bool {
	for i := 0; i+elf.Sym64Size <= len(symtab); i += elf.Sym64Size {
		off := order.Uint32(symtab[i:])
		if int(off) < len(strtab) {
			s := strtab[off:]
			if j := bytes.IndexByte(s, 0); j >= 0 && string(s[:j]) == name {
				return true
			}
		}
	}
	return false
}

// Dynamic entries that claim 2^40 bytes or point past the file, and
// hash tables whose counts do, cost no more than the file holds.
func TestDynamicSymbolsBounds(t *testing.T) {
	_, variants := testutil.SpinLibraries(t, t.TempDir())
	lib, err := os.ReadFile(variants[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := Salvage(bytes.NewReader(lib), int64(len(lib)))
	if err != nil {
		t.Fatal(err)
	}
	symtab, strtab, err := DynamicSymbols(f, int64(len(lib)))
	if err != nil {
		t.Fatal(err)
	}
	if !hasSymbol(f.ByteOrder, symtab, strtab, "spin") {
		t.Fatalf("dynamic symbols of the library: %d, no spin", len(symtab)/elf.Sym64Size)
	}
	// Each DT_ value in turn claims 2^40 (or points past the file).
	dyn := progOf(t, f, elf.PT_DYNAMIC)
	for i := 0; i+16 <= int(dyn.Filesz); i += 16 {
		tag := elf.DynTag(binary.LittleEndian.Uint64(lib[dyn.Off+uint64(i):]))
		if tag == elf.DT_NULL {
			break
		}
		for _, v := range []uint64{1 << 40, 1<<64 - 1, 0} {
			b := bytes.Clone(lib)
			binary.LittleEndian.PutUint64(b[dyn.Off+uint64(i)+8:], v)
			f, _, err := Salvage(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			symtab, strtab, err := DynamicSymbols(f, int64(len(b)))
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
				t.Errorf("%v = %#x: %d bytes allocated for a %d-byte file", tag, v, n, len(b))
			}
			if err == nil && len(symtab)+len(strtab) > len(b) {
				t.Errorf("%v = %#x: %d bytes of tables from a %d-byte file", tag, v, len(symtab)+len(strtab), len(b))
			}
		}
	}
	// The GNU hash table's counts claim 2^32-1.
	hash := dynValue(t, f, elf.DT_GNU_HASH)
	for w := 0; w < 3; w++ {
		b := bytes.Clone(lib)
		binary.LittleEndian.PutUint32(b[hash+uint64(4*w):], 0xffffffff)
		f, _, _ := Salvage(bytes.NewReader(b), int64(len(b)))
		if _, _, err := DynamicSymbols(f, int64(len(b))); !errors.Is(err, ErrCorrupt) {
			t.Errorf("GNU hash word %d = 2^32-1: %v, want %v", w, err, ErrCorrupt)
		}
	}
}

func progOf(t *testing.T, f *elf.File, typ elf.ProgType) *elf.Prog {
	t.Helper()
	for _, p := range f.Progs {
		if p.Type == typ {
			return p
		}
	}
	t.Fatalf("no %v", typ)
	return nil
}

// dynValue returns the file offset of the address a tag holds (the
// library's first segment starts at offset and address 0).
func dynValue(t *testing.T, f *elf.File, tag elf.DynTag) uint64 {
	t.Helper()
	v, err := f.DynValue(tag)
	if err != nil || len(v) != 1 {
		t.Fatalf("%v: %v %v", tag, v, err)
	}
	return v[0]
}

func TestReadChdr(t *testing.T) {
	le := binary.LittleEndian
	chdr := func(typ uint32, size, align uint64) []byte {
		b := make([]byte, 24)
		le.PutUint32(b, typ)
		le.PutUint64(b[8:], size)
		le.PutUint64(b[16:], align)
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		n    uint64
		want error
	}{
		{"zlib", chdr(1, 1000, 1), 100, nil},
		{"zstd", chdr(2, 1000, 8), 100, nil},
		{"claims 2^40", chdr(1, 1<<40, 1), 100, ErrCorrupt},
		{"claims 2^64-1", chdr(1, 1<<64-1, 1), 1 << 40, ErrCorrupt},
		{"over MaxSection", chdr(1, MaxSection+1, 1), MaxSection, ErrTooLarge},
		{"unknown kind", chdr(77, 10, 1), 100, ErrCorrupt},
		{"alignment 3", chdr(1, 10, 3), 100, ErrCorrupt},
		{"short", chdr(1, 10, 1)[:20], 100, ErrCorrupt},
		{"section shorter than its header", chdr(1, 10, 1), 10, ErrCorrupt},
	} {
		_, err := ReadChdr(c.b, elf.ELFCLASS64, le, c.n)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	b := make([]byte, 12)
	le.PutUint32(b, 1)
	le.PutUint32(b[4:], 5000)
	le.PutUint32(b[8:], 4)
	if h, err := ReadChdr(b, elf.ELFCLASS32, le, 100); err != nil || h.Size != 5000 || h.Len != 12 {
		t.Errorf("ELF32 header: %+v, %v", h, err)
	}
}

// FuzzReadChdr reads compression headers: what it accepts claims no more
// than MaxRatio times the section and no more than MaxSection.
func FuzzReadChdr(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x00\xe8\x03\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"), false, uint64(100))
	f.Add([]byte("\x01\x00\x00\x00\x88\x13\x00\x00\x04\x00\x00\x00"), true, uint64(100))
	f.Fuzz(func(t *testing.T, b []byte, is32 bool, n uint64) {
		class := elf.ELFCLASS64
		if is32 {
			class = elf.ELFCLASS32
		}
		h, err := ReadChdr(b, class, binary.LittleEndian, n)
		if err != nil {
			return
		}
		if h.Size > MaxSection || h.Size/MaxRatio > n || uint64(h.Len) > n || h.Len > len(b) {
			t.Fatalf("accepted %+v for a section of %d bytes", h, n)
		}
	})
}

// FuzzSalvage parses crafted and damaged ELF files: the sections kept lie
// in the file, over no other, claiming no more than MaxRatio inflated.
// Seeds: testdata/fuzz/FuzzSalvage (minimal libraries, with and without
// section headers, GNU and SysV hash).
func FuzzSalvage(f *testing.F) {
	f.Add(testutil.ELF(testutil.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(64, make([]byte, 64))}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, _, err := Salvage(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		checkSections(t, ef, int64(len(b)))
		for _, s := range ef.Sections {
			if data, err := Data(s); err == nil && uint64(len(data)) > MaxRatio*uint64(len(b)) {
				t.Fatalf("section %s inflated to %d bytes from a %d-byte file", s.Name, len(data), len(b))
			}
		}
	})
}

// FuzzDynamicSymbols reads the dynamic symbol table of crafted files
// through their program headers: no table is larger than the file, and
// nothing read costs more than it. Seeds: testdata/fuzz/FuzzDynamicSymbols
// (minimal libraries, GNU and SysV hash, with and without section
// headers).
func FuzzDynamicSymbols(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, _, err := Salvage(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		symtab, strtab, err := DynamicSymbols(ef, int64(len(b)))
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > uint64(2*len(b))+64<<10 {
			t.Fatalf("%d bytes allocated for a %d-byte file", n, len(b))
		}
		if err == nil && len(symtab)+len(strtab) > len(b) {
			t.Fatalf("%d bytes of dynamic tables from a %d-byte file", len(symtab)+len(strtab), len(b))
		}
	})
}
