package testutil

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// spinLib is the library SpinLibraries damages: spin never returns.
const spinLib = `volatile unsigned long spun;
void spin(void) { for (;;) spun++; }
`

// liarLib has the same layout as spinLib, its function named otherwise:
// the debug file a lying .gnu_debuglink leads to.
const liarLib = `volatile unsigned long spun;
void not_spin(void) { for (;;) spun++; }
`

// spinProg loads the library named by its argument with dlopen, parks a
// thread in its spin (called from park) and says "ready PID" once the
// thread is on its way there; it exits with status 1 when ld.so refuses
// the library.
const spinProg = `#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static volatile int parked;

__attribute__((noinline)) void *park(void *spin) {
	parked = 1;
	((void (*)(void))spin)();
	return spin;
}

int main(int argc, char **argv) {
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void *spin = dlsym(h, "spin");
	if (!spin) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	pthread_t t;
	pthread_create(&t, 0, park, spin);
	while (!parked)
		usleep(1000);
	printf("ready %d\n", getpid());
	fflush(stdout);
	for (;;)
		pause();
}
`

// SpinVariant is one library of SpinLibraries.
type SpinVariant struct {
	Name   string
	Path   string
	Damage Damage
}

// Damage says where a variant of SpinLibraries lies.
type Damage int

const (
	Sound      Damage = iota
	Headers           // its section headers lie
	Gone              // it has no section headers (e_shoff 0): ld.so needs none
	Contents          // what sound headers point at lies: DWARF, a debug link, a symbol table's link
	Unloadable        // its program headers lie: ld.so refuses it, and so should a reader
)

// SpinLibraries builds, in dir, a program that dlopens the library named
// by its argument and parks a thread in its spin(), and that library
// (with DWARF, plain and compressed) damaged in the ways a library on a
// real node may be (a section's header lying about its size or place,
// compression headers lying, section headers cut or gone, the file cut
// short, a .gnu_debuglink naming another file): each variant is a file
// of dir. Which of them ld.so still loads is for the caller to find out:
// it reads only the program headers and the dynamic segment.
func SpinLibraries(t testing.TB, dir string) (prog string, variants []SpinVariant) {
	t.Helper()
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
	}
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("spin.c", spinLib)
	write("liar.c", liarLib)
	write("prog.c", spinProg)
	lib := []string{"-O2", "-g", "-fPIC", "-shared", "-fasynchronous-unwind-tables"}
	run("gcc", append(lib, "-o", "spin.so", "spin.c")...)
	run("gcc", append(lib, "-gz=zlib", "-o", "spinz.so", "spin.c")...)
	run("gcc", append(lib, "-Wl,--build-id=none", "-o", "nobid.so", "spin.c")...)
	run("gcc", append(lib, "-Wl,--build-id=none", "-o", "liar.so", "liar.c")...)
	run("gcc", "-O0", "-g", "-pthread", "-o", "prog", "prog.c", "-ldl")

	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	add := func(name string, damage Damage, b []byte) {
		t.Helper()
		path := filepath.Join(dir, name+".so")
		if err := os.WriteFile(path, b, 0o755); err != nil {
			t.Fatal(err)
		}
		variants = append(variants, SpinVariant{Name: name, Path: path, Damage: damage})
	}
	plain, zipped := read("spin.so"), read("spinz.so")
	add("good", Sound, plain)
	add("good-compressed", Sound, zipped)

	// Section header fields, patched in a copy.
	patch := func(b []byte, section string, field int, v uint64) []byte {
		t.Helper()
		b = bytes.Clone(b)
		h := sectionHeader(t, b, section)
		switch field {
		case shName, shType, shLink:
			binary.LittleEndian.PutUint32(h[field:], uint32(v))
		default:
			binary.LittleEndian.PutUint64(h[field:], v)
		}
		return b
	}
	fileOf := func(b []byte, section string) (off, size uint64) {
		h := sectionHeader(t, b, section)
		return binary.LittleEndian.Uint64(h[shOffset:]), binary.LittleEndian.Uint64(h[shSize:])
	}
	// The compression header of .debug_info claims 2^40 bytes, or a size
	// a section may hold but no memory should, or a kind unknown.
	chdr := func(field int, v uint64) []byte {
		b := bytes.Clone(zipped)
		off, _ := fileOf(b, ".debug_info")
		binary.LittleEndian.PutUint64(b[off+uint64(field):], v)
		if field == 0 {
			binary.LittleEndian.PutUint32(b[off:], uint32(v))
		}
		return b
	}
	add("chdr-claims-2^40", Headers, chdr(8, 1<<40))
	add("chdr-claims-1GiB", Headers, chdr(8, 1<<30))
	add("chdr-claims-1-byte", Contents, chdr(8, 1))
	add("chdr-unknown-kind", Headers, chdr(0, 77))
	b := bytes.Clone(zipped)
	off, size := fileOf(b, ".debug_info")
	for i := off + 24 + 2; i < off+size; i++ {
		b[i] ^= 0x5a // a zlib stream that fails mid-way
	}
	add("zlib-corrupt", Contents, b)
	b = bytes.Clone(plain)
	off, size = fileOf(b, ".debug_info")
	for i := off; i < off+size; i++ {
		b[i] = byte(i * 7)
	}
	add("debug-info-garbage", Contents, b)
	// Sizes and places that the file cannot hold.
	for _, s := range []string{".debug_info", ".debug_abbrev", ".debug_line", ".eh_frame", ".eh_frame_hdr", ".symtab", ".strtab", ".dynsym", ".dynstr", ".dynamic", ".gnu_debuglink", ".note.gnu.build-id"} {
		base := plain
		if s == ".gnu_debuglink" {
			continue // added below
		}
		add("huge-size"+s, Headers, patch(base, s, shSize, 1<<40))
		add("offset-past-end"+s, Headers, patch(base, s, shOffset, 1<<40))
	}
	add("huge-size-compressed.debug_info", Headers, patch(zipped, ".debug_info", shSize, 1<<40))
	// Overlapping sections: one section's offset moved onto another's.
	textOff, _ := fileOf(plain, ".text")
	symOff, _ := fileOf(plain, ".symtab")
	dynsymOff, _ := fileOf(plain, ".dynsym")
	add("overlap-symtab-on-text", Headers, patch(plain, ".symtab", shOffset, textOff))
	add("overlap-debug-info-on-symtab", Headers, patch(plain, ".debug_info", shOffset, symOff))
	add("overlap-symtab-on-dynsym", Headers, patch(plain, ".symtab", shOffset, dynsymOff))
	_, infoSize := fileOf(plain, ".debug_info")
	infoOff, _ := fileOf(plain, ".debug_info")
	add("overlap-debug-info-to-end", Headers, patch(plain, ".debug_info", shSize, uint64(len(plain))-infoOff))
	_ = infoSize
	// Links and types that lie.
	add("symtab-link-past-sections", Contents, patch(plain, ".symtab", shLink, 1000))
	add("symtab-compressed-flag", Headers, patch(plain, ".symtab", shFlags, uint64(elf.SHF_COMPRESSED)))
	add("dynsym-compressed-flag", Headers, patch(plain, ".dynsym", shFlags, uint64(elf.SHF_COMPRESSED|elf.SHF_ALLOC)))
	// The section header table itself.
	hdr := func(base []byte, field int, size int, v uint64) []byte {
		b := bytes.Clone(base)
		if size == 2 {
			binary.LittleEndian.PutUint16(b[field:], uint16(v))
		} else {
			binary.LittleEndian.PutUint64(b[field:], v)
		}
		return b
	}
	add("huge-section-count", Headers, hdr(plain, 0x3c, 2, 0xffff))
	b = hdr(plain, 0x3c, 2, 0)
	shoff := binary.LittleEndian.Uint64(plain[0x28:])
	binary.LittleEndian.PutUint64(b[shoff+shSize:], 1<<40) // the count in section 0
	add("huge-extended-section-count", Headers, b)
	add("section-headers-past-end", Headers, hdr(plain, 0x28, 8, uint64(len(plain))+4096))
	add("section-headers-at-2^60", Headers, hdr(plain, 0x28, 8, 1<<60))
	add("section-name-table-past-sections", Headers, hdr(plain, 0x3e, 2, 0xfff0))
	add("section-header-size-wrong", Headers, hdr(plain, 0x3a, 2, 32))
	add("section-name-table-past-end", Headers, patch(plain, ".shstrtab", shOffset, 1<<40))
	b = hdr(plain, 0x28, 8, 0)
	b = hdr(b, 0x3c, 2, 0)
	add("section-headers-gone", Gone, hdr(b, 0x3e, 2, 0))
	add("program-headers-past-end", Unloadable, hdr(plain, 0x20, 8, 1<<40))
	// Cut short: at the start of its section headers (their end is the
	// file's), in the middle of its symbols, after its last segment.
	add("truncated-at-end", Headers, plain[:shoff+64*3])
	add("truncated-in-section-headers", Headers, plain[:shoff])
	add("truncated-in-symtab", Headers, plain[:symOff+48])
	add("truncated-in-debug-info", Headers, plain[:infoOff+16])
	// Stripped: of its symbol table and DWARF, and of its sections too.
	run("strip", "--strip-all", "-o", "stripped.so", "spin.so")
	stripped := read("stripped.so")
	add("stripped", Sound, stripped)
	b = hdr(stripped, 0x28, 8, 0)
	b = hdr(b, 0x3c, 2, 0)
	add("stripped-of-sections", Gone, hdr(b, 0x3e, 2, 0))
	// A .gnu_debuglink naming a debug file that is another library's:
	// the link's CRC (of the right file when the link was made) no longer
	// matches, and neither file has a build-id to tell them apart.
	run("objcopy", "--only-keep-debug", "nobid.so", "lie.debug")
	run("strip", "--strip-all", "-o", "lie-stripped.so", "nobid.so")
	run("objcopy", "--add-gnu-debuglink=lie.debug", "lie-stripped.so", "lying-debuglink.so")
	run("objcopy", "--only-keep-debug", "liar.so", "lie.debug")
	variants = append(variants, SpinVariant{Name: "lying-debuglink", Path: filepath.Join(dir, "lying-debuglink.so"), Damage: Contents})
	return filepath.Join(dir, "prog"), variants
}

// Section header fields of ELF64.
const (
	shName   = 0
	shType   = 4
	shFlags  = 8
	shOffset = 24
	shSize   = 32
	shLink   = 40
)

// sectionHeader returns the header of the named section of an ELF64 file.
func sectionHeader(t testing.TB, b []byte, name string) []byte {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range f.Sections {
		if s.Name == name {
			shoff := binary.LittleEndian.Uint64(b[0x28:])
			return b[shoff+uint64(i)*64:][:64]
		}
	}
	t.Fatalf("no section %s", name)
	return nil
}
