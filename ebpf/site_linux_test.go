package ebpf

import (
	"debug/elf"
	"regexp"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// The testbed's libcuda.so.1 exports its launches through NVIDIA's 535
// entry stubs: each gets the site of its conditional jump (entry + 10),
// which the kernel emulates. The (MACA) runtime's functions begin with a
// push and keep their entry.
func TestProbeSitesOfTestbed(t *testing.T) {
	bed := testbed.Build(t)
	launch := regexp.MustCompile(`^cu(LaunchKernel|LaunchKernelEx|LaunchCooperativeKernel|LaunchHostFunc|GraphLaunch)(_ptsz)?$`)
	for _, lib := range []string{"libcuda.so.1", "libmcruntime.so.2"} {
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
			want := uint64(0)
			switch {
			case lib == "libcuda.so.1" && launch.MatchString(s.Name):
				want, n = 10, n+1
			case lib == "libcuda.so.1":
				continue // the compiler's prologue decides
			default:
				n++
			}
			if off-s.Value != want { // the testbed's libraries load at file offset = address
				t.Errorf("%s %s: site at entry + %d, want + %d", lib, s.Name, off-s.Value, want)
			}
		}
		if n < 9 {
			t.Errorf("%s: %d probe symbols checked, want the library's", lib, n)
		}
	}
}
