package ebpf

import (
	"debug/elf"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// The testbed's libcuda.so.1 exports NVIDIA's entry stubs: every probed
// driver symbol gets the site of its conditional jump (entry + 10), which
// the kernel emulates; the runtime's functions begin with a push and keep
// their entry.
func TestProbeSitesOfTestbed(t *testing.T) {
	bed := testbed.Build(t)
	for lib, wantSkip := range map[string]uint64{"libcuda.so.1": 10, "libcudart.so.12": 0} {
		path := bed.Lib(lib)
		syms, err := exportedProbeSymbols(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		dyn, err := f.DynamicSymbols()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range dyn {
			off, ok := syms[s.Name]
			if !ok || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			n++
			if off-s.Value != wantSkip { // the testbed's libraries load at file offset = address
				t.Errorf("%s %s: site at entry + %d, want + %d", lib, s.Name, off-s.Value, wantSkip)
			}
		}
		if n < 10 {
			t.Errorf("%s: %d probe symbols checked, want the library's", lib, n)
		}
	}
}
