//go:build linux && (386 || amd64)

package ebpf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/timer"
)

// realCUDART is NVIDIA's runtime from Debian non-free (libcudart11.0), whose
// names carry versions (cudaLaunchKernel@@libcudart.so.11.0). It makes
// every call through the driver's entry points, where they are probed
// (probes.bpf.c, "One trap per call"): the runtime itself gets no probe.
// Without a driver (this machine) its calls fail
// (cudaErrorInsufficientDriver, 35) before they reach one, and nothing is
// recorded.
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
	var calls []callLine
	for _, c := range parseCalls(t, out) {
		if _, probed := callKinds[c.Name]; probed {
			calls = append(calls, c)
		}
	}
	if len(calls) < 10 {
		t.Fatalf("the program made %d probed calls of the runtime: %v", len(calls), out)
	}
	file, err := filepath.EvalSymlinks(realCUDART) // maps name the file: libcudart.so.11.8.89
	if err != nil {
		t.Fatal(err)
	}
	// The process's exit comes after its calls' records, had there been any.
	p.stdin.Close()
	rec.waitFor(t, "the exit", func(evs []timer.Event, _ []Notice) bool {
		return hasEvent(evs, p.pid(), timer.KindProcessExit)
	})
	for _, e := range rec.of(p.pid()) {
		if e.Kind < timer.KindProcessExec {
			t.Errorf("a %s record from the runtime, which has no probe: %+v", e.Kind, e)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, n := range rec.notices {
		if n.Library == file && (n.Kind == NoticeAttach || n.Kind == NoticeMissing) {
			t.Errorf("%s notice for %s, which has no probe: %+v", n.Kind, realCUDART, n)
		}
	}
}
