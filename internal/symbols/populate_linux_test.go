package symbols

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// mappedAt reports whether an address of ours is mapped.
func mappedAt(t *testing.T, addr uintptr) bool {
	t.Helper()
	maps, err := procfs.Maps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Contains(uint64(addr)) {
			return true
		}
	}
	return false
}

func TestOffHeap(t *testing.T) {
	if b, unmap := offHeap(hugeMin - 1); b != nil || unmap != nil {
		t.Errorf("offHeap below hugeMin made a buffer")
	}
	n := 3<<20 + 5
	b, unmap := offHeap(n)
	if !hugePages() {
		if b != nil {
			t.Errorf("offHeap made a buffer with huge pages off")
		}
		t.Skip("transparent huge pages are off here: offHeap leaves buffers to the Go heap")
	}
	if b == nil {
		t.Fatal("no buffer")
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if len(b) != n || cap(b) != n || p%hugePage != 0 {
		t.Errorf("buffer of %d bytes, cap %d, at %#x", len(b), cap(b), p)
	}
	if i := bytes.IndexFunc(b, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Errorf("byte %d not zero", i)
	}
	for i := range b {
		b[i] = byte(i)
	}
	if !mappedAt(t, p) || !mappedAt(t, p+uintptr(n-1)) {
		t.Fatal("buffer not mapped")
	}
	unmap()
	if mappedAt(t, p) {
		t.Error("still mapped after unmap")
	}
}

// A large compressed DWARF section is inflated off the Go heap, reads as
// it should, and is unmapped once nothing holds it.
func TestOffHeapSection(t *testing.T) {
	if !hugePages() {
		t.Skip("transparent huge pages are off here: sections stay on the Go heap")
	}
	dir := t.TempDir()
	want := textLike(3 << 20)
	if err := os.WriteFile(filepath.Join(dir, "info"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.c"), []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "gcc", "-o", "prog", "main.c")
	run(t, dir, "objcopy", "--add-section", ".debug_info=info", "prog", "prog.info")
	run(t, dir, "objcopy", "--compress-debug-sections=zlib", "prog.info", "prog.debug")
	if typ := compression(t, filepath.Join(dir, "prog.debug"), ".debug_info"); typ != "zlib" {
		t.Fatalf(".debug_info compressed with %q", typ)
	}

	var addr uintptr
	func() {
		f, err := elf.Open(filepath.Join(dir, "prog.debug"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r, err := os.Open(filepath.Join(dir, "prog.debug"))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		s, err := openSection(f, f.Section(".debug_info"), r, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		addr = uintptr(unsafe.Pointer(unsafe.SliceData(s.b)))
		if addr%hugePage != 0 || !mappedAt(t, addr) {
			t.Fatalf("section at %#x: not off the heap", addr)
		}
		if err := s.read(s.size); err != nil {
			t.Fatal(err)
		}
		if s.size != len(want) || !bytes.Equal(s.b[:s.size], want) || s.b[s.size] != 0 {
			t.Fatalf("section of %d bytes read differs", s.size)
		}
	}()
	// Cleanups run after a collection finds the section unreachable.
	for deadline := time.Now().Add(10 * time.Second); mappedAt(t, addr); {
		if time.Now().After(deadline) {
			t.Fatal("the section's buffer is still mapped after it was dropped")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// A symbol table is mapped from the file the object is read from, byte for
// byte what reading it gives, and the symbols found are those of a copy.
func TestSymbolTableMapped(t *testing.T) {
	lib := "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
	r, c, err := fileOpener(lib)()
	if err != nil {
		t.Skipf("no %s: %v", lib, err)
	}
	defer c.Close()
	fi, err := os.Stat(lib)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elfcheck.NewFile(r, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	s := sectionOfType(f, elf.SHT_DYNSYM)
	b, unmap := mapSection(s, true)
	if b == nil {
		t.Fatalf("%s's .dynsym (%d bytes) not mapped", lib, s.Size)
	}
	defer unmap()
	want, err := sectionBytes(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatal("the mapped .dynsym differs from the one read")
	}
	if !mappedAt(t, uintptr(unsafe.Pointer(unsafe.SliceData(b)))) {
		t.Fatal("not a mapping")
	}

	mapped, read := &Object{Path: lib}, &Object{Path: lib}
	mapped.addSymbols(f, "")
	g, err := elfcheck.NewFile(bytes.NewReader(mustRead(t, lib)), fi.Size()) // not a file: read
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := mapSection(sectionOfType(g, elf.SHT_DYNSYM), true); b != nil {
		t.Fatal("a section of bytes in memory mapped")
	}
	read.addSymbols(g, "")
	if len(mapped.syms) == 0 || !slices.Equal(mapped.syms, read.syms) {
		t.Fatalf("mapped: %d symbols, read: %d", len(mapped.syms), len(read.syms))
	}
	if !mapped.strMapped || read.strMapped {
		t.Fatalf("names mapped: %v and %v, want true and false", mapped.strMapped, read.strMapped)
	}
	for _, sy := range mapped.syms[:100] {
		a, okA := mapped.symName(sy)
		b, okB := read.symName(sy)
		if a != b || !okA || !okB || a == "" {
			t.Fatalf("name %q (%v) mapped, %q (%v) read", a, okA, b, okB)
		}
	}
}

// A symbol's name mapped from a file truncated since is not found, and
// nothing crashes.
func TestSymbolNamesTruncated(t *testing.T) {
	path, f := copyELF(t, "/usr/lib/x86_64-linux-gnu/libstdc++.so.6")
	o := &Object{Path: path}
	o.symOnce.Do(func() { o.symbolsFrom(f) })
	if !o.strMapped || len(o.syms) == 0 {
		t.Fatalf("%d symbols, names mapped %v", len(o.syms), o.strMapped)
	}
	sy := o.syms[len(o.syms)/2]
	if name, _, ok := o.symbolAt(sy.addr); !ok || name == "" {
		t.Fatalf("symbol at %#x: %q, %v", sy.addr, name, ok)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if name, _, ok := o.symbolAt(sy.addr); ok {
		t.Fatalf("symbol at %#x of a truncated file: %q", sy.addr, name)
	}
	if _, _, ok := o.addrOf("__cxa_throw"); ok {
		t.Fatal("a name found in a truncated file")
	}
}

// copyELF copies the ELF file src to a temporary file, for a test to
// truncate, and parses the copy read from its file.
func copyELF(t *testing.T, src string) (string, *elf.File) {
	t.Helper()
	b := mustRead(t, src)
	path := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r, c, err := fileOpener(path)()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	f, err := elfcheck.NewFile(r, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return path, f
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A large search table is mapped from the file; a file truncated under it
// makes a lookup fail, not the process.
func TestEhIndexMappedTruncated(t *testing.T) {
	src, err := filepath.EvalSymlinks("/usr/bin/python3") // 80 KB of .eh_frame_hdr
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	path, f := copyELF(t, src)
	ix, err := newEhIndex(f, nil, fileOpener(path))
	if err != nil {
		t.Fatal(err)
	}
	if !ix.mapped || len(ix.table) < populateMin {
		t.Fatalf("%s: a table of %d bytes, mapped %v", src, len(ix.table), ix.mapped)
	}
	n := len(ix.table) / 8
	start, _ := ix.entry(n / 2)
	last, _ := ix.entry(n - 1)
	if _, err := ix.lookup(start); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.lookup(last); err == nil {
		t.Fatal("a lookup in a truncated file succeeded")
	}
}
