package elfcheck

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// shdr returns the section header of section i of an ELF64 file b.
func shdr(b []byte, i int) []byte {
	shoff := binary.LittleEndian.Uint64(b[40:])
	return b[shoff+uint64(i)*64:][:64]
}

func TestNewFile(t *testing.T) {
	text := testutil.Section{Name: ".text", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, Data: make([]byte, 64)}
	info := testutil.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(100, make([]byte, 100))}
	for _, tc := range []struct {
		name  string
		build func() []byte
		want  error
	}{
		{"good", func() []byte { return testutil.ELF(text, info) }, nil},
		{"claim 2^40", func() []byte {
			info := info
			info.Data = testutil.Compressed(1<<40, []byte("x"))
			return testutil.ELF(text, info)
		}, ErrCorrupt},
		{"section past the file", func() []byte {
			b := testutil.ELF(text, info)
			binary.LittleEndian.PutUint64(shdr(b, 1)[32:], uint64(len(b)))
			return b
		}, ErrCorrupt},
		{"offset past the file", func() []byte {
			b := testutil.ELF(text, info)
			binary.LittleEndian.PutUint64(shdr(b, 1)[24:], 1<<40)
			return b
		}, ErrCorrupt},
		{"offset and size wrap", func() []byte {
			b := testutil.ELF(text, info)
			binary.LittleEndian.PutUint64(shdr(b, 1)[24:], 16)
			binary.LittleEndian.PutUint64(shdr(b, 1)[32:], 1<<63-8)
			return b
		}, nil}, // debug/elf refuses it: any error
		{"compressed name table", func() []byte {
			b := testutil.ELF(text, info)
			// The name table is the last section; make it 32 KiB of zlib
			// that inflate to 32 MiB of empty names, a claim within
			// MaxRatio: debug/elf would inflate it while parsing.
			n := int(binary.LittleEndian.Uint16(b[60:]))
			h := shdr(b, n-1)
			bomb := testutil.Compressed(32<<20, make([]byte, 32<<20))
			binary.LittleEndian.PutUint64(h[8:], uint64(elf.SHF_COMPRESSED))
			binary.LittleEndian.PutUint64(h[24:], uint64(len(b)))
			binary.LittleEndian.PutUint64(h[32:], uint64(len(bomb)))
			return append(b, bomb...)
		}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.build()
			f, err := NewFile(bytes.NewReader(b), int64(len(b)))
			switch {
			case tc.name == "good" && err != nil:
				t.Fatal(err)
			case tc.name == "good":
				if f.Section(".debug_info") == nil {
					t.Error("no .debug_info")
				}
			case err == nil:
				t.Fatal("NewFile = nil, want an error")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("NewFile = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		s    elf.SectionHeader
		want error
	}{
		{elf.SectionHeader{Type: elf.SHT_PROGBITS, Size: 10}, nil},
		{elf.SectionHeader{Type: elf.SHT_PROGBITS, Size: MaxSection + 1}, ErrTooLarge},
		{elf.SectionHeader{Type: elf.SHT_PROGBITS, Size: 1 << 40}, ErrTooLarge},
	} {
		_, err := Size(&elf.Section{SectionHeader: tc.s})
		if !errors.Is(err, tc.want) {
			t.Errorf("Size(%d bytes) = %v, want %v", tc.s.Size, err, tc.want)
		}
	}
	if _, err := Size(&elf.Section{SectionHeader: elf.SectionHeader{Type: elf.SHT_NOBITS, Size: 10}}); err == nil {
		t.Error("Size of a SHT_NOBITS section = nil, want an error")
	}
}

// Real libraries pass the checks.
func TestOpenSystemLibraries(t *testing.T) {
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/bin/sh", "/proc/self/exe"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		f, err := Open(p)
		if err != nil {
			t.Errorf("Open(%s): %v", p, err)
			continue
		}
		f.Close()
	}
	if _, err := Open("/dev/zero"); err == nil {
		t.Error("Open(/dev/zero) = nil, want an error")
	}
}

func FuzzNewFile(f *testing.F) {
	f.Add(testutil.ELF(testutil.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: testutil.Compressed(64, make([]byte, 64))}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := NewFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, s := range ef.Sections {
			if data, err := Data(s); err == nil && s.Flags&elf.SHF_COMPRESSED != 0 && uint64(len(data)) > MaxRatio*uint64(len(b)) {
				t.Fatalf("section %s inflated to %d bytes from a %d-byte file", s.Name, len(data), len(b))
			}
		}
	})
}

// Header tables that run past the file are refused before debug/elf
// reads them (it allocates 10 MB to find out).
func TestHeaderTables(t *testing.T) {
	for name, patch := range map[string]func(b []byte){
		"phnum": func(b []byte) { binary.LittleEndian.PutUint16(b[0x38:], 0xffff) },
		"phoff": func(b []byte) { binary.LittleEndian.PutUint64(b[0x20:], 1<<40) },
		"shnum": func(b []byte) { binary.LittleEndian.PutUint16(b[0x3c:], 0xfff0) },
		"shoff": func(b []byte) { binary.LittleEndian.PutUint64(b[0x28:], 1<<40) },
		"shnum in 0": func(b []byte) {
			binary.LittleEndian.PutUint16(b[0x3c:], 0)
			binary.LittleEndian.PutUint64(shdr(b, 0)[32:], 1<<62)
		},
	} {
		b := testutil.ELF(testutil.Section{Name: ".text", Type: elf.SHT_PROGBITS, Data: make([]byte, 16)})
		patch(b)
		if _, err := NewFile(bytes.NewReader(b), int64(len(b))); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: NewFile = %v, want %v", name, err, ErrCorrupt)
		}
	}
}
