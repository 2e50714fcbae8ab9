//go:build linux && (386 || amd64)

package ebpf

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/timer"
)

// realCUDART is NVIDIA's runtime from Debian non-free (libcudart11.0), whose
// names carry versions (cudaLaunchKernel@@libcudart.so.11.0). Without a
// driver its calls fail (cudaErrorInsufficientDriver, 35) but are made.
const realCUDART = "/usr/lib/x86_64-linux-gnu/libcudart.so.11.0"

func TestRealCUDART(t *testing.T) {
	privileged.Root(t)
	if _, err := os.Stat(realCUDART); err != nil {
		privileged.Skip(t, "NVIDIA's libcudart11.0 is not installed (scripts/deps.sh installs it)")
	}
	s := buildStubs(t)
	tr := newTracer(t, Options{})
	rec := record(t, tr)
	p := start(t, s.Calls, "cuda", realCUDART, "-", "-", "-", "0", "1")
	out := p.followed(t, tr)
	rec.waitFor(t, "the device synchronize's exit", func(evs []timer.Event, _ []Notice) bool {
		for _, e := range evs {
			if e.PID == p.pid() && e.Kind == timer.KindDeviceSynchronize && e.Phase == timer.PhaseExit {
				return true
			}
		}
		return false
	})
	calls := parseCalls(t, out)
	evs := matchCalls(t, calls, rec.of(p.pid()), timer.VendorCUDA)
	for _, c := range calls {
		if _, probed := callKinds[c.Name]; !probed {
			continue
		}
		if _, ok := evs[c.Name]; !ok {
			t.Errorf("%s: nothing fired", c.Name)
		}
	}
	if evs["LaunchKernel"].Ret != 0 || evs["EventQuery"].Ret == 0 {
		// Launches are reported at entry (Ret 0); the query's failure comes back.
		t.Errorf("launch ret %d, query ret %d", evs["LaunchKernel"].Ret, evs["EventQuery"].Ret)
	}
	file, err := filepath.EvalSymlinks(realCUDART) // maps name the file: libcudart.so.11.8.89
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, n := range rec.notices {
		if n.Kind == "attach" && n.Library == file {
			for _, sym := range []string{"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaStreamSynchronize_ptsz", "cudaMemcpy_ptds", "cudaEventQuery"} {
				if !slices.Contains(n.Attached, sym) {
					t.Errorf("%s not attached in %s: %v", sym, realCUDART, n.Attached)
				}
			}
			t.Logf("attached on the real runtime: %v", n.Attached)
			return
		}
	}
	t.Errorf("no attach notice for %s: %+v", realCUDART, rec.notices)
}
