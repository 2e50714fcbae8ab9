package python

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// wrapMemory is target memory for the fuzz targets: every address of the
// user address space reads data, from (addr - base) modulo its length, so
// that any pointer the walk follows leads somewhere.
type wrapMemory struct {
	data  []byte
	reads int // bytes read, to bound a walk's cost
}

const fakeBase = 0x10000

func (m *wrapMemory) readPartial(addr uint64, buf []byte) (int, error) {
	if len(m.data) == 0 || addr < 0x1000 || addr >= 1<<47 {
		return 0, fmt.Errorf("read at %#x: %w", addr, errInconsistent)
	}
	m.reads += len(buf)
	for i := range buf {
		buf[i] = m.data[(addr-fakeBase+uint64(i))%uint64(len(m.data))]
	}
	return len(buf), nil
}

func (m *wrapMemory) read(addr uint64, buf []byte) error {
	_, err := m.readPartial(addr, buf)
	return err
}

// FuzzWalk walks interpreters, thread states, frames, code objects, str
// and bytes objects and line tables through a fake of the target's
// memory; version picks the layout (3.9 to 3.12, or 3.13's read from the
// _Py_DebugOffsets at the start of memory).
func FuzzWalk(f *testing.F) {
	f.Add(uint8(11), bytes.Repeat([]byte{0x10, 0, 1, 0, 0, 0, 0, 0}, 64))
	f.Add(uint8(13), debugOffsets("3.13.0", nil))
	f.Add(uint8(14), debugOffsets("3.14.10", nil))
	f.Add(uint8(15), debugOffsets("3.15.2", nil))
	f.Fuzz(func(t *testing.T, version uint8, data []byte) {
		m := &wrapMemory{data: data}
		r := &Reader{pid: os.Getpid(), mem: m, runtime: fakeBase, types: map[string]uint64{},
			codes: map[uint64]*codeInfo{}, checked: map[uint64]*codeInfo{}}
		minor := 9 + int(version)%7
		if minor >= 13 {
			head := make([]byte, debugOffsetsSize)
			m.read(fakeBase, head)
			l, _, err := parseDebugOffsets(head)
			if err != nil {
				return
			}
			r.l = l
		} else {
			r.l = layouts[minor]
		}
		if version&0x80 != 0 {
			// Types checked: the first words of memory name them.
			for i, name := range typeSymbols {
				b := make([]byte, 8)
				m.read(fakeBase+uint64(8*i), b)
				r.types[name] = le64(b)
			}
		}
		ts, err := r.Threads()
		for _, th := range ts {
			if len(th.Frames) > maxFrames {
				t.Fatalf("%d frames", len(th.Frames))
			}
		}
		_ = err
	})
}

// FuzzImage reads the interpreter's symbols from crafted ELF files.
func FuzzImage(f *testing.F) {
	symtab, strtab := testutil.Symbols(
		testutil.Symbol{Name: "_PyRuntime", Type: elf.STT_OBJECT, Value: 0x2000, Size: 8},
		testutil.Symbol{Name: "Py_Version", Type: elf.STT_OBJECT, Value: 0x3000, Size: 8},
		testutil.Symbol{Name: "version.0", Type: elf.STT_OBJECT, Value: 0x3100, Size: 8},
	)
	f.Add(testutil.ELF(
		testutil.Section{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Link: 2, Entsize: elf.Sym64Size, Data: symtab},
		testutil.Section{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Data: strtab},
		testutil.Section{Name: ".data", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Addr: 0x3000, Data: []byte{0xf0, 7, 11, 3, 0, 0, 0, 0}},
		testutil.Section{Name: ".rodata", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Addr: 0x4000, Data: []byte("/x/3.9.18\x003.9.1\x00")},
	))
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := elfcheck.NewFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, name := range []string{"libpython3.9.so.1.0", "python3.11"} {
			imageOf(ef, name)
		}
	})
}
