//go:build linux && amd64

package native

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/regnum"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
)

// TestSyntheticFrames unwinds made-up registers of a live process whose pc
// sits where no thread can be held for a test: a PLT stub (call frame
// information by expression), a vDSO function (an image read from the
// process), and anonymous memory such as JIT code (no module: `??`, then
// the frame pointer).
func TestSyntheticFrames(t *testing.T) {
	privileged.Root(t)
	bin := build(t, "threads.c")
	tg := start(t, bin, 1, "5")
	proc, err := symbols.NewCache().Process(tg.pid)
	if err != nil {
		t.Fatal(err)
	}
	var exe, vdso procfs.Mapping
	for _, m := range proc.Mappings() {
		switch {
		case m.Path == bin && m.Exec():
			exe = m
		case m.Path == "[vdso]":
			vdso = m
		}
	}
	mod, ok := proc.Module(exe.Start)
	if !ok || mod.Object == nil || vdso.Start == 0 {
		t.Fatalf("no executable or vDSO mapping: %+v %+v", exe, vdso)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var main uint64
	for _, s := range syms {
		if s.Name == "main" {
			main = s.Value + mod.Bias
		}
	}
	plt, pltName := firstPLT(t, bin)
	plt += mod.Bias
	clock := vdsoFunc(t, tg.pid, vdso, "__vdso_clock_gettime")

	// A stack copy at a made-up address: the return address into main at
	// sp, and a frame pointer chain for the anonymous case.
	const lo = 0x10000
	stk := make([]byte, 64)
	sp := uint64(lo + 16)
	binary.LittleEndian.PutUint64(stk[16:], main+1) // [sp]: return address
	binary.LittleEndian.PutUint64(stk[32:], 0)      // [bp]: caller's frame pointer
	binary.LittleEndian.PutUint64(stk[40:], main+1) // [bp+8]: return address
	live := func(b []byte, addr uint64) (int, error) { return readMem(tg.pid, b, addr) }

	for _, tc := range []struct {
		name   string
		pc, bp uint64
		first  string
		module string
	}{
		{"plt", plt, 0, pltName, bin},
		{"vdso", clock, 0, "clock_gettime", "[vdso]"}, // as gdb names it
		{"anonymous", lo + 48, lo + 32, "??", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &snapshot{tid: tg.pid, stackLo: lo, stack: stk}
			s.regs.Rip, s.regs.Rsp, s.regs.Rbp = tc.pc, sp, tc.bp
			frames, err := unwind(proc, s, live, nil, true)
			if err != nil || len(frames) != 2 {
				t.Fatalf("unwind: %v, %+v", err, frames)
			}
			if f := frames[0]; f.Func != tc.first || f.Addr != tc.pc || f.Module != tc.module {
				t.Errorf("frame 0: %+v, want %s in %q at %#x", f, tc.first, tc.module, tc.pc)
			}
			if f := frames[1]; f.Func != "main" || f.Addr != main+1 {
				t.Errorf("frame 1: %+v, want main at %#x", f, main+1)
			}
		})
	}
}

// firstPLT returns the address and name of the first function PLT entry of
// bin, as objdump names it.
func firstPLT(t *testing.T, bin string) (uint64, string) {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "-j", ".plt", bin).Output()
	if err != nil {
		t.Skipf("objdump: %v", err)
	}
	m := regexp.MustCompile(`(?m)^([0-9a-f]+) <([A-Za-z_]\w*@plt)>:$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no PLT entry in objdump's output:\n%s", out)
	}
	addr, _ := strconv.ParseUint(string(m[1]), 16, 64)
	return addr, string(m[2])
}

// vdsoFunc returns the address of a function of the vDSO of pid.
func vdsoFunc(t *testing.T, pid int, m procfs.Mapping, name string) uint64 {
	t.Helper()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	img := make([]byte, m.End-m.Start)
	if _, err := mem.ReadAt(img, int64(m.Start)); err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return m.Start + s.Value
		}
	}
	t.Fatalf("no %s in the vDSO", name)
	return 0
}

// TestRegisterNumbers checks our DWARF register numbers against delve's.
func TestRegisterNumbers(t *testing.T) {
	for i, want := range []int{regnum.AMD64_Rax, regnum.AMD64_Rdx, regnum.AMD64_Rcx, regnum.AMD64_Rbx,
		regnum.AMD64_Rsi, regnum.AMD64_Rdi, regnum.AMD64_Rbp, regnum.AMD64_Rsp, regnum.AMD64_R8,
		regnum.AMD64_R9, regnum.AMD64_R10, regnum.AMD64_R11, regnum.AMD64_R12, regnum.AMD64_R13,
		regnum.AMD64_R14, regnum.AMD64_R15, regnum.AMD64_Rip} {
		got := []int{regRax, regRdx, regRcx, regRbx, regRsi, regRdi, regRbp, regRsp, regR8,
			regR9, regR10, regR11, regR12, regR13, regR14, regR15, regRip}[i]
		if got != want {
			t.Errorf("register %d: ours %d, delve's %d (%s)", i, got, want, regnum.AMD64ToName(uint64(want)))
		}
	}
}
