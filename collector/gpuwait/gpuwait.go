// Package gpuwait knows a thread that waits on the GPU by its native
// stack: inside a synchronize, a synchronous copy, an event or stream
// query polled in a loop, one of NCCL's blocking calls, or a PyTorch c10d
// work wait. The frames it knows are one table (table.go), CUDA names and
// their MetaX MACA twins side by side.
//
// This sees what the probes may miss: on a real GPU a waiting thread
// spins inside the driver (state R, its scheduler counters rising), so
// from /proc it looks busy; a job that hung before tracing began has no
// call entry for the probes to have seen. Its stack still says where it
// waits.
//
// Classify reads one stack. A Sampler (Linux, amd64) takes the native
// stacks of every thread of a rank at once, stopped for a few
// milliseconds, and hands the threads it finds waiting to timer.Engine's
// rule for waits known by their stack (see timer's package comment).
package gpuwait

import (
	"path/filepath"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/stack"
)

// Wait is a GPU wait read from one thread's native stack.
type Wait struct {
	// Call is the innermost frame of the table: the call the thread waits
	// in ("cuStreamSynchronize"), or the framework routine (Role Work)
	// when no call of the table is inside it.
	Call string
	// From is the routine the wait is for: the innermost framework frame
	// of the table (Work or Site) above Call, else the first named frame
	// above the wait that is neither the GPU libraries' nor the C
	// runtimes' ("c10::cuda::device_synchronize"); "" when none.
	From   string
	Role   Role   // Call's role
	Vendor string // "cuda" or "maca"
}

// String names the wait: "cuStreamSynchronize from
// c10d::AsyncAllreduceCUDAHostWork::run".
func (w Wait) String() string {
	if w.From == "" {
		return w.Call
	}
	return w.Call + " from " + w.From
}

// Classify says whether a native stack (innermost frame first) waits on
// the GPU, and on what. The thread must be inside the wait: frames inside
// a Block or Poll call are the GPU libraries' or the C runtimes' own (or
// unnamed); inside a Work routine any frame may be (its loop polls,
// sleeps, checks a timeout). A Site frame alone is no wait.
func Classify(native []stack.Frame) (Wait, bool) {
	call := -1
	var m match
	for i, f := range native {
		if mm, ok := lookup(f.Func); ok && mm.role != Site {
			call, m = i, mm
			break
		}
	}
	if call < 0 {
		return Wait{}, false
	}
	if m.role != Work {
		for _, f := range native[:call] {
			if !inside(f) {
				return Wait{}, false // the thread runs its own code, called from the wait
			}
		}
	}
	w := Wait{Call: name(native[call].Func), Role: m.role, Vendor: m.vendor}
	// The framework routine the wait serves, where the table knows one.
	for _, f := range native[call+1:] {
		if mm, ok := lookup(f.Func); ok && (mm.role == Work || mm.role == Site) {
			w.From = name(f.Func)
			return w, true
		}
	}
	// Else the first frame above the wait that is neither a call of the
	// table nor the libraries' own.
	for _, f := range native[call+1:] {
		if _, ok := lookup(f.Func); ok || unnamed(f) || inLibraries(f.Module, gpuLibraries) || inLibraries(f.Module, systemLibraries) {
			continue
		}
		w.From = name(f.Func)
		break
	}
	return w, true
}

// lookup finds a function in the table.
func lookup(fn string) (match, bool) {
	if fn == "" || fn == "??" {
		return match{}, false
	}
	m, ok := byName[name(fn)]
	return m, ok
}

// name drops what a compiler appends to a function's symbol for its
// split-off parts (" [clone .cold]").
func name(fn string) string {
	if i := strings.Index(fn, " [clone "); i > 0 {
		return fn[:i]
	}
	return fn
}

// inside says whether a frame may lie inside a Block or Poll call: the GPU
// libraries' internals, the C runtimes, or a frame with no name.
func inside(f stack.Frame) bool {
	return unnamed(f) || inLibraries(f.Module, gpuLibraries) || inLibraries(f.Module, systemLibraries)
}

func unnamed(f stack.Frame) bool { return f.Func == "" || f.Func == "??" }

func inLibraries(module string, libs []string) bool {
	base := filepath.Base(module)
	for _, l := range libs {
		if strings.HasPrefix(base, l) {
			return true
		}
	}
	return false
}
