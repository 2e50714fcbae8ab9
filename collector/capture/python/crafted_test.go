package python

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// writeTemp writes b to a file of the test's and returns its path.
func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// craftedPython is a library defining _PyRuntime and Py_Version, the
// latter in a section of its own, data.
func craftedPython(data testutil.Section) []byte {
	symtab, strtab := testutil.Symbols(
		testutil.Symbol{Name: "_PyRuntime", Type: elf.STT_OBJECT, Value: 0x2000, Size: 8},
		testutil.Symbol{Name: "Py_Version", Type: elf.STT_OBJECT, Value: 0x3000, Size: 8},
	)
	return testutil.ELF(
		testutil.Section{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Link: 2, Entsize: elf.Sym64Size, Data: symtab},
		testutil.Section{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Data: strtab},
		data,
	)
}

// Py_Version in a compressed section: debug/elf gives such a section no
// ReaderAt, and reading the word through it was a nil dereference.
func TestImageCompressedVersion(t *testing.T) {
	lib := craftedPython(testutil.Section{Name: ".data", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Addr: 0x3000,
		Data: testutil.Compressed(8, []byte{0xf0, 7, 11, 3, 0, 0, 0, 0})})
	im, err := parseImage(writeTemp(t, "libpython3.11.so", lib), "/usr/lib/libpython3.11.so")
	if err != nil {
		t.Fatal(err)
	}
	if im == nil || im.runtime != 0x2000 || im.version != 0 {
		t.Fatalf("image = %+v, want _PyRuntime at 0x2000 and no version", im)
	}
}

// A word at the very top of the address space must not wrap the bounds
// check into reading it.
func TestImageVersionAtTop(t *testing.T) {
	lib := craftedPython(testutil.Section{Name: ".data", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Addr: 1<<64 - 4, Data: make([]byte, 16)})
	if im, err := parseImage(writeTemp(t, "libpython3.11.so", lib), "libpython3.11.so"); err != nil || im == nil {
		t.Fatalf("parseImage = %+v, %v", im, err)
	}
}

// A crafted .rodata claiming 2^40 bytes is refused.
func TestImageRodataClaim(t *testing.T) {
	lib := craftedPython(testutil.Section{Name: ".rodata", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(1<<40, []byte("3.9.18\x00"))})
	if _, err := parseImage(writeTemp(t, "libpython3.9.so", lib), "libpython3.9.so"); err == nil {
		t.Fatal("parseImage = nil, want an error")
	}
}
