package symbols

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

func TestDemangle(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"_ZN4fake9attention14softmax_kernelIfEEvPT_i", "fake::attention::softmax_kernel<float>"},
		{"cudaLaunchKernel@@libcudart.so.11.0", "cudaLaunchKernel"},
		{"pthread_cond_wait@GLIBC_2.2.5", "pthread_cond_wait"},
		{"_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE", "std::condition_variable::wait"},
		{"inner.constprop.0", "inner"},
		{"main", "main"},
		{"_Znotvalid", "_Znotvalid"},
	} {
		if got := Demangle(tc.in); got != tc.want {
			t.Errorf("Demangle(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// buildProg builds testdata/prog with a versioned library and a stripped
// library whose debug information lives in a build-id debug file under
// debugRoot.
func buildProg(t *testing.T) (bin, debugRoot string) {
	dir := t.TempDir()
	src, _ := filepath.Abs("testdata")
	run(t, dir, "gcc", "-O2", "-g", "-fPIC", "-shared", "-Wl,--version-script="+src+"/libv.map", "-o", "libv.so", src+"/libv.c")
	run(t, dir, "g++", "-O2", "-g", "-fPIC", "-shared", "-Wl,--build-id", "-o", "libs.so", src+"/libs.cc")
	f, err := elf.Open(filepath.Join(dir, "libs.so"))
	if err != nil {
		t.Fatal(err)
	}
	id := buildID(f)
	f.Close()
	if id == "" {
		t.Fatal("libs.so has no build-id")
	}
	debugRoot = filepath.Join(dir, "debug")
	idDir := filepath.Join(debugRoot, ".build-id", id[:2])
	if err := os.MkdirAll(idDir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "objcopy", "--only-keep-debug", "libs.so", filepath.Join(idDir, id[2:]+".debug"))
	run(t, dir, "strip", "--strip-all", "libs.so")
	run(t, dir, "gcc", "-O2", "-g", "-pie", "-fPIE", "-o", "prog", src+"/prog.c", "-L.", "-lv", "-ls", "-Wl,-rpath,"+dir)
	return filepath.Join(dir, "prog"), debugRoot
}

func startProg(t *testing.T, bin string) (*exec.Cmd, map[string]uint64) {
	cmd := exec.Command(bin)
	stdin, stdout := testutil.Start(t, cmd)
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	addrs := map[string]uint64{}
	sc := bufio.NewScanner(stdout)
	for len(addrs) < 3 && sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			v, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			addrs[f[0]] = v
		}
	}
	if len(addrs) < 3 {
		t.Fatalf("target printed %v", addrs)
	}
	return cmd, addrs
}

func TestProcessLookup(t *testing.T) {
	privileged.Root(t)
	bin, debugRoot := buildProg(t)
	old := DebugRoot
	DebugRoot = debugRoot
	t.Cleanup(func() { DebugRoot = old })
	cmd, addrs := startProg(t, bin)

	c := NewCache()
	p, err := c.Process(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fn, module, file string
	}{
		{"local_function", "prog", "prog.c"},
		{"lib_versioned", "libv.so", "libv.c"},
		{"lib_stripped", "libs.so", "libs.cc"}, // lines only in the build-id debug file
	} {
		addr := addrs[tc.fn]
		s, ok := p.Lookup(addr + 1)
		if !ok || s.Name != tc.fn || s.Offset != 1 || filepath.Base(s.Module) != tc.module || filepath.Base(s.File) != tc.file || s.Line == 0 {
			t.Errorf("Lookup(%s+1) = %+v, %v", tc.fn, s, ok)
		}
	}
	if _, ok := p.Lookup(8); ok {
		t.Error("Lookup(8) found a symbol")
	}
	// The vDSO is read from process memory.
	var vdso uint64
	for _, m := range p.Mappings() {
		if m.Path == "[vdso]" {
			vdso = m.Start
		}
	}
	mod, ok := p.Module(vdso)
	if vdso == 0 || !ok || mod.Object == nil {
		t.Fatalf("no vdso module: %#x %+v", vdso, mod)
	}
	found := false
	if err := mod.Object.loadSymbols(); err != nil {
		t.Fatal(err)
	}
	for _, s := range mod.Object.syms {
		name := cstring(mod.Object.strtab[s.tab], s.name)
		if strings.Contains(name, "clock_gettime") {
			got, ok := p.Lookup(s.addr + mod.Bias)
			found = ok && strings.Contains(got.Name, "clock_gettime") && got.Module == "[vdso]"
			break
		}
	}
	if !found {
		t.Error("clock_gettime not resolved in the vdso")
	}

	// A second process of the same files reuses the cached objects, and
	// concurrent lookups are safe.
	n := c.Len()
	cmd2, addrs2 := startProg(t, bin)
	p2, err := c.Process(cmd2.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fn, a := range addrs2 {
				if s, ok := p2.Lookup(a); !ok || s.Name != fn {
					t.Errorf("second process Lookup(%s) = %+v", fn, s)
				}
			}
		}()
	}
	wg.Wait()
	if c.Len() != n {
		t.Errorf("cache grew from %d to %d objects for the same files", n, c.Len())
	}
}

func TestCFI(t *testing.T) {
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".eh_frame")
	if s == nil {
		t.Skip("test binary has no .eh_frame")
	}
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	fdes, err := ParseCFI(data, binary.LittleEndian, s.Addr)
	if err != nil || len(fdes) == 0 {
		t.Fatalf("ParseCFI: %d entries, %v", len(fdes), err)
	}
}

func FuzzParseCFI(f *testing.F) {
	ef, err := elf.Open("/proc/self/exe")
	if err == nil {
		if s := ef.Section(".eh_frame"); s != nil {
			if d, err := s.Data(); err == nil && len(d) > 4096 {
				f.Add(d[:4096], true)
			}
		}
		ef.Close()
	}
	f.Add([]byte{0x14, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b}, true)
	f.Add([]byte{0x10, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 4}, false)
	f.Add([]byte{0x10, 0, 0, 0, 0x20, 0, 0, 0, 4, 0, 0}, true)
	f.Fuzz(func(t *testing.T, data []byte, eh bool) {
		addr := uint64(0)
		if eh {
			addr = 0x1000
		}
		fdes, err := ParseCFI(data, binary.LittleEndian, addr)
		if err != nil {
			return
		}
		for _, fde := range fdes {
			if fde.CIE == nil {
				continue
			}
			func() {
				defer func() { recover() }() // EstablishFrame is delve's; we guard it in the unwinder
				fde.EstablishFrame(fde.Begin())
			}()
		}
	})
}

// Lookups in a separate debug file compressed with zlib name the right
// lines, read lazily and after Warm inflated it whole.
func TestCompressedDebugFile(t *testing.T) {
	privileged.Root(t)
	bin, debugRoot := buildProg(t)
	debugs, _ := filepath.Glob(filepath.Join(debugRoot, ".build-id", "*", "*.debug"))
	if len(debugs) != 1 {
		t.Fatalf("debug files %v", debugs)
	}
	old := DebugRoot
	DebugRoot = debugRoot
	t.Cleanup(func() { DebugRoot = old })
	cmd, addrs := startProg(t, bin)

	// zlib is inflated in memory; zstd is streamed through debug/elf.
	for _, method := range []string{"zlib", "zstd"} {
		run(t, debugRoot, "objcopy", "--compress-debug-sections="+method, debugs[0])
		if typ := compression(t, debugs[0], ".debug_info"); typ != method {
			t.Fatalf("%s: .debug_info compressed with %q", method, typ)
		}
		t.Run(method, func(t *testing.T) { lookupCompressed(t, cmd.Process.Pid, addrs["lib_stripped"]) })
	}
}

// compression names how section name of the ELF file at path is
// compressed: "zlib", "zstd", or "" when it is not.
func compression(t *testing.T, path, name string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(name)
	if s == nil || s.Flags&elf.SHF_COMPRESSED == 0 {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch elf.CompressionType(f.ByteOrder.Uint32(b[s.Offset:])) {
	case elf.COMPRESS_ZLIB:
		return "zlib"
	case elf.COMPRESS_ZSTD:
		return "zstd"
	}
	return "other"
}

// lookupCompressed checks lookups of lib_stripped (at addr in pid), whose
// debug file is compressed, read lazily and after Warm.
func lookupCompressed(t *testing.T, pid int, addr uint64) {
	for _, warm := range []bool{false, true} {
		c := NewCache()
		if warm {
			if err := c.Warm(pid); err != nil {
				t.Fatal(err)
			}
		}
		p, err := c.Process(pid)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := p.Lookup(addr + 1); !ok || s.Name != "lib_stripped" || filepath.Base(s.File) != "libs.cc" || s.Line == 0 {
			t.Errorf("warm %v: Lookup = %+v, %v", warm, s, ok)
		}
		mod, ok := p.Module(addr)
		if !ok || mod.Object == nil {
			t.Fatalf("no module for lib_stripped: %+v", mod)
		}
		lt := mod.Object.lineTable()
		if lt == nil || lt.di.info.n == 0 || len(lt.di.units) == 0 {
			t.Fatal("libs.so: no debug information read")
		}
		if warm && !lt.di.done() {
			t.Errorf("after Warm: sections not read whole")
		}
	}
}

// A small file is opened and parsed once: its symbols, call frame
// information and lines come with its headers. A large one is read a part
// at a time, each opening it again.
func TestSmallFileOpenedOnce(t *testing.T) {
	bin, _ := buildProg(t)
	path := filepath.Join(filepath.Dir(bin), "libv.so")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var fn uint64
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			fn = s.Value
			break
		}
	}
	f.Close()
	if fn == 0 {
		t.Fatal("libv.so: no function symbol")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{fi.Size(), eagerFile + 1} {
		opens := 0
		open := fileOpener(path)
		o, err := openObject(path, size, func() (io.ReaderAt, io.Closer, error) {
			opens++
			return open()
		}, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.FDE(fn); err != nil {
			t.Errorf("size %d: FDE: %v", size, err)
		}
		if name, _, ok := o.symbolAt(fn); !ok || name == "" {
			t.Errorf("size %d: no symbol at %#x", size, fn)
		}
		if file, line := o.line(fn); file == "" || line == 0 {
			t.Errorf("size %d: no line at %#x", size, fn)
		}
		want := 1
		if size > eagerFile {
			want = 4 // headers, symbols and the call frames' search table, the FDE, lines
		}
		if opens != want {
			t.Errorf("size %d: opened %d times, want %d", size, opens, want)
		}
	}
}

// A symbol takes 24 bytes: libtorch_cpu.so has 35,000.
func TestSymSize(t *testing.T) {
	if n := unsafe.Sizeof(sym{}); n != 24 {
		t.Fatalf("sym is %d bytes", n)
	}
}
