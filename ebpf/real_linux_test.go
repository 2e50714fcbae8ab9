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
// Its launches and its calls made now and then (cudaMalloc, cudaFree) are
// not probed: NVIDIA's runtime makes them through the driver's, where
// they are (probes.bpf.c, "One trap per call").
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
	var calls []callLine
	for _, c := range parseCalls(t, out) {
		if k := callKinds[c.Name].kind; k != timer.KindLaunch && k != timer.KindGraphLaunch && k != timer.KindCall {
			calls = append(calls, c)
		}
	}
	evs := matchCalls(t, calls, rec.of(p.pid()), timer.VendorCUDA)
	for _, c := range calls {
		if _, probed := callKinds[c.Name]; !probed {
			continue
		}
		if _, ok := evs[c.Name]; !ok {
			t.Errorf("%s: nothing fired", c.Name)
		}
	}
	if evs["EventQuery"].Ret == 0 {
		t.Errorf("query ret %d, want the runtime's failure", evs["EventQuery"].Ret)
	}
	for _, e := range rec.of(p.pid()) {
		if e.Kind == timer.KindLaunch || e.Kind == timer.KindGraphLaunch {
			t.Errorf("a %s record of the runtime: %+v", e.Kind, e)
		}
	}
	file, err := filepath.EvalSymlinks(realCUDART) // maps name the file: libcudart.so.11.8.89
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, n := range rec.notices {
		if n.Kind == "attach" && n.Library == file {
			for _, sym := range []string{"cudaStreamSynchronize_ptsz", "cudaMemcpy_ptds", "cudaEventQuery"} {
				if !slices.Contains(n.Attached, sym) {
					t.Errorf("%s not attached in %s: %v", sym, realCUDART, n.Attached)
				}
			}
			for _, sym := range []string{"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaGraphLaunch"} {
				if slices.Contains(n.Attached, sym) {
					t.Errorf("%s attached in %s: a launch of it would trap twice", sym, realCUDART)
				}
			}
			t.Logf("attached on the real runtime: %v", n.Attached)
			return
		}
	}
	t.Errorf("no attach notice for %s: %+v", realCUDART, rec.notices)
}
