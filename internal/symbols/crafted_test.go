package symbols

import (
	"bufio"
	"crypto/rand"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// craftedLib returns a library with a function symbol and the given DWARF
// sections; the symbol table's string table is section 2.
func craftedLib(debug ...testutil.Section) []byte {
	symtab, strtab := testutil.Symbols(testutil.Symbol{Name: "crafted_func", Type: elf.STT_FUNC, Value: 0x1000, Size: 0x40})
	secs := []testutil.Section{
		{Name: ".symtab", Type: elf.SHT_SYMTAB, Link: 2, Entsize: elf.Sym64Size, Data: symtab},
		{Name: ".strtab", Type: elf.SHT_STRTAB, Data: strtab},
	}
	return testutil.ELF(append(secs, debug...)...)
}

// A compressed .debug_info claiming 2^40 bytes killed the monitor with
// "out of memory" (issue 16), then cost the library its names (issue
// 43): the section is left out, and the rest read.
func TestCompressedClaimRefused(t *testing.T) {
	lib := craftedLib(
		testutil.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(1<<40, []byte("tiny"))},
		testutil.Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: []byte{0}},
	)
	o, err := openObject("/crafted.so", int64(len(lib)), bytesOpener(lib), true)
	if err != nil {
		t.Fatal(err)
	}
	if name, _, ok := o.symbolAt(0x1010); !ok || name != "crafted_func" {
		t.Errorf("symbolAt = %q, %v; want crafted_func", name, ok)
	}
	if d := o.Damage(); !strings.Contains(d, "(.debug_info): compression header claims 1099511627776 bytes") || !strings.HasSuffix(d, "names from .symtab") {
		t.Errorf("damage %q", d)
	}
	if o.Bytes() > 1<<20 {
		t.Errorf("object holds %d bytes", o.Bytes())
	}
}

// A claim a compressed section may hold but no memory should (more than
// elfcheck.MaxSection) costs the library its debug information, never its
// symbols.
func TestCompressedClaimOverLimit(t *testing.T) {
	noise := make([]byte, elfcheck.MaxSection/elfcheck.MaxRatio+4096)
	rand.Read(noise)
	lib := craftedLib(
		testutil.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(elfcheck.MaxSection+1, noise)},
		testutil.Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: []byte{0}},
		testutil.Section{Name: ".debug_line", Type: elf.SHT_PROGBITS, Data: []byte{0}},
	)
	o, err := openObject("/crafted.so", int64(len(lib)), bytesOpener(lib), true)
	if err != nil {
		t.Fatal(err)
	}
	if name, _, ok := o.symbolAt(0x1010); !ok || name != "crafted_func" {
		t.Errorf("symbolAt = %q, %v; want crafted_func", name, ok)
	}
	if o.lineTable() != nil || !errors.Is(o.lineErr, elfcheck.ErrTooLarge) {
		t.Errorf("line table read, error %v; want %v", o.lineErr, elfcheck.ErrTooLarge)
	}
}

// A section that claims more bytes than the file holds is left out
// before anything is allocated for it.
func TestSectionPastFile(t *testing.T) {
	lib := craftedLib()
	// Section 1 (.symtab): its sh_size, in the headers at the file's end.
	shoff := binary.LittleEndian.Uint64(lib[40:])
	binary.LittleEndian.PutUint64(lib[shoff+64+32:], 1<<31-1)
	o, err := openObject("/crafted.so", int64(len(lib)), bytesOpener(lib), true)
	if err != nil {
		t.Fatal(err)
	}
	if name, _, ok := o.symbolAt(0x1010); ok {
		t.Errorf("symbolAt = %q from a table left out", name)
	}
	if d := o.Damage(); !strings.Contains(d, "section 1 (.symtab): 2147483647 bytes at") {
		t.Errorf("damage %q", d)
	}
	if o.Bytes() > 1<<20 {
		t.Errorf("object holds %d bytes", o.Bytes())
	}
}

// A line program whose offset or length runs past .debug_line is an
// error, not an index out of range.
func TestReadLineBounds(t *testing.T) {
	line := make([]byte, 16)
	binary.LittleEndian.PutUint32(line, 0xffffffff)
	binary.LittleEndian.PutUint64(line[4:], 1<<62)
	di := &debugInfo{order: binary.LittleEndian, line: &section{b: line, n: len(line), size: len(line)}}
	for _, off := range []int64{0, 13, 16, 1 << 40, 1<<63 - 1} {
		if err := di.readLine(off); err == nil {
			t.Errorf("readLine(%d) = nil, want an error", off)
		}
	}
}

// Sections each under the limit but over it together cost the library its
// debug information, not a multiple of the limit in memory.
func TestDebugSectionsTogetherOverLimit(t *testing.T) {
	noise := make([]byte, elfcheck.MaxSection/2/elfcheck.MaxRatio+4096)
	rand.Read(noise)
	claim := uint64(elfcheck.MaxSection/2 + 1)
	lib := craftedLib(
		testutil.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(claim, noise)},
		testutil.Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(claim, noise)},
		testutil.Section{Name: ".debug_line", Type: elf.SHT_PROGBITS, Data: []byte{0}},
	)
	o, err := openObject("/crafted.so", int64(len(lib)), bytesOpener(lib), true)
	if err != nil {
		t.Fatal(err)
	}
	if o.lineTable() != nil || !errors.Is(o.lineErr, elfcheck.ErrTooLarge) {
		t.Errorf("line table read, error %v; want %v", o.lineErr, elfcheck.ErrTooLarge)
	}
	if o.Bytes() > 1<<20 {
		t.Errorf("object holds %d bytes", o.Bytes())
	}
}

// A process mapping the crafted library of issue 16 (2^40 bytes claimed)
// executable: reading it ahead, as the agent does when the process makes
// its first GPU call, reads its symbols, without its DWARF, and the rest
// of the process.
func TestWarmCraftedLibrary(t *testing.T) {
	lib := craftedLib(
		testutil.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(1<<40, []byte("tiny"))},
		testutil.Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: []byte{0}},
	)
	path := filepath.Join(t.TempDir(), "libcrafted.so")
	if err := os.WriteFile(path, lib, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-c", `import mmap, sys, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC)
print("mapped", flush=True)
time.sleep(60)`, path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "mapped\n" {
		t.Fatalf("python: %q, %v", line, err)
	}
	c := NewCache()
	if err := c.Warm(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	p, err := c.Process(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range p.Mappings() {
		if m.Path != path || !m.Exec() {
			continue
		}
		found = true
		mod, ok := p.Module(m.Start)
		if !ok || mod.Object == nil {
			t.Fatalf("crafted library not read: %+v", mod)
		}
		if name, _, ok := mod.Object.symbolAt(0x1010); !ok || name != "crafted_func" {
			t.Errorf("symbolAt = %q, %v; want crafted_func", name, ok)
		}
		if mod.Object.lineTable() != nil {
			t.Error("DWARF read from a section left out")
		}
	}
	if !found {
		t.Fatal("the crafted library is not mapped executable")
	}
	if c.Len() == 0 {
		t.Error("nothing else of the process was read ahead")
	}
}
