package symbols

import (
	"debug/elf"
	"fmt"
	"runtime/debug"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// failOnCrash makes a runtime error that a recover in this package caught
// fail the fuzz target, for the duration of the test.
func failOnCrash(t testing.TB) {
	crashed = func(r any) { panic(fmt.Sprintf("recovered a crash: %v\n%s", r, debug.Stack())) }
	t.Cleanup(func() { crashed = nil })
}

// exercise runs every lookup an unwinder and a dump make on o, at its
// symbols' and units' addresses.
func exercise(o *Object) {
	addrs := []uint64{0, 1, 0x1000, 0x1010, 1<<64 - 1}
	o.loadSymbols()
	for i, s := range o.syms {
		if i == 16 {
			break
		}
		addrs = append(addrs, s.addr, s.addr+s.size/2)
	}
	if lt := o.lineTable(); lt != nil {
		for i, u := range lt.units {
			if i == 16 {
				break
			}
			addrs = append(addrs, u.lo, u.hi-1)
		}
		lt.warm(addrs)
		lt.inflate()
	}
	for _, a := range addrs {
		o.symbolAt(a)
		o.FDE(a)
		o.line(a)
		o.inline(a)
	}
	o.addrOf("main")
	o.Bytes()
}

// FuzzObject parses crafted ELF files: headers, symbol tables, PLT,
// build-id and debuglink notes, call frame information, compressed
// sections and DWARF. Seeds: testdata/fuzz/FuzzObject (compiled
// libraries, plain and with compressed DWARF) and the crafted ones below.
func FuzzObject(f *testing.F) {
	symtab, strtab := testutil.Symbols(testutil.Symbol{Name: "crafted_func", Type: elf.STT_FUNC, Value: 0x1000, Size: 0x40})
	f.Add(testutil.ELF(
		testutil.Section{Name: ".symtab", Type: elf.SHT_SYMTAB, Link: 2, Entsize: elf.Sym64Size, Data: symtab},
		testutil.Section{Name: ".strtab", Type: elf.SHT_STRTAB, Data: strtab},
		testutil.Section{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Data: []byte("\x04\x00\x00\x00\x04\x00\x00\x00\x03\x00\x00\x00GNU\x00\xde\xad\xbe\xef")},
		testutil.Section{Name: ".gnu_debuglink", Type: elf.SHT_PROGBITS, Data: []byte("crafted.debug\x00\x00\x00\x00\x00")},
		testutil.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(16, make([]byte, 16))},
		testutil.Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: []byte{0}},
		testutil.Section{Name: ".debug_line", Type: elf.SHT_PROGBITS, Data: []byte{0}},
	))
	f.Fuzz(func(t *testing.T, b []byte) {
		failOnCrash(t)
		o, err := openObject("/fuzz/lib.so", int64(len(b)), bytesOpener(b), true)
		if err != nil {
			return
		}
		exercise(o)
	})
}

// FuzzDWARF feeds DWARF sections straight to the line and inlined-call
// readers, in a library around them. Seeds: testdata/fuzz/FuzzDWARF, the
// sections of a compiled library.
func FuzzDWARF(f *testing.F) {
	f.Add([]byte{}, []byte{0}, []byte{}, []byte{}, []byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, info, abbrev, line, str, lineStr, rnglists, aranges []byte) {
		failOnCrash(t)
		secs := []testutil.Section{
			{Name: ".debug_info", Type: elf.SHT_PROGBITS, Data: info},
			{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: abbrev},
			{Name: ".debug_line", Type: elf.SHT_PROGBITS, Data: line},
			{Name: ".debug_str", Type: elf.SHT_PROGBITS, Data: str},
			{Name: ".debug_line_str", Type: elf.SHT_PROGBITS, Data: lineStr},
			{Name: ".debug_rnglists", Type: elf.SHT_PROGBITS, Data: rnglists},
		}
		if len(aranges) > 0 {
			secs = append(secs, testutil.Section{Name: ".debug_aranges", Type: elf.SHT_PROGBITS, Data: aranges})
		}
		lib := testutil.ELF(secs...)
		o, err := openObject("/fuzz/lib.so", int64(len(lib)), bytesOpener(lib), true)
		if err != nil {
			t.Fatal(err)
		}
		exercise(o)
	})
}
