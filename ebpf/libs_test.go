package ebpf

import (
	"bytes"
	"crypto/rand"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

func craftedProbeLib(flags elf.SectionFlag, dynsym func([]byte) []byte) []byte {
	symtab, strtab := testutil.Symbols(testutil.Symbol{Name: "cuLaunchKernel", Type: elf.STT_FUNC, Value: 0x1000, Size: 16})
	return testutil.ELF(
		testutil.Section{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: flags, Link: 2, Entsize: elf.Sym64Size, Data: dynsym(symtab)},
		testutil.Section{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Data: strtab},
	)
}

func TestExportedProbeSymbolsCrafted(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.so", craftedProbeLib(elf.SHF_ALLOC, func(b []byte) []byte { return b }))
	syms, err := exportedProbeSymbols(good)
	if _, ok := syms["cuLaunchKernel"]; err != nil || !ok {
		t.Fatalf("exportedProbeSymbols(good) = %v, %v; want cuLaunchKernel", syms, err)
	}
	// .dynsym compressed, claiming 2^40 bytes.
	bomb := write("bomb.so", craftedProbeLib(elf.SHF_COMPRESSED, func(b []byte) []byte { return testutil.Compressed(1<<40, b) }))
	if _, err := exportedProbeSymbols(bomb); err == nil {
		t.Error("exportedProbeSymbols(bomb) = nil, want an error")
	}
	// A real bomb, within the ratio (noise pads the section): zlib that
	// inflates to more than elfcheck.MaxSection.
	big := write("big.so", craftedProbeLib(elf.SHF_COMPRESSED, func(b []byte) []byte {
		noise := make([]byte, 64<<10)
		rand.Read(noise)
		n := (elfcheck.MaxSection/elf.Sym64Size + 1) * elf.Sym64Size
		z := testutil.Compressed(uint64(n), append(b, make([]byte, n-len(b))...))
		return append(z, noise...)
	}))
	if _, err := exportedProbeSymbols(big); err == nil {
		t.Error("exportedProbeSymbols(big) = nil, want an error")
	}
	if _, err := exportedProbeSymbols("/dev/zero"); err == nil {
		t.Error("exportedProbeSymbols(/dev/zero) = nil, want an error")
	}
}

// FuzzProbeSymbols reads probe symbols from crafted ELF files.
func FuzzProbeSymbols(f *testing.F) {
	f.Add(craftedProbeLib(elf.SHF_ALLOC, func(b []byte) []byte { return b }))
	f.Add(craftedProbeLib(elf.SHF_COMPRESSED, func(b []byte) []byte { return testutil.Compressed(uint64(len(b)), b) }))
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := elfcheck.NewFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		syms, err := probeSymbolsOf(ef)
		for name := range syms {
			if name == rDebugSymbol {
				if _, ok := syms[loaderProbe.Symbol]; ok && err == nil {
					continue
				}
			}
			if _, ok := probeBySymbol[name]; !ok || err != nil {
				t.Fatalf("symbol %q, error %v", name, err)
			}
		}
	})
}
