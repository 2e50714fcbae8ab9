// Package gpuwait knows a thread that waits on the GPU by its native
// stack: inside any call into the GPU libraries (the CUDA driver and
// runtime, NCCL, MetaX's MACA runtime and MCCL: a synchronize, a copy, a
// launch waiting for a slot or, under CUDA_LAUNCH_BLOCKING, for its
// kernel, a free, NCCL's calls), or in a PyTorch c10d work wait. One rule
// decides, not a list of calls: the frames on top of the stack are the
// GPU libraries' own (or the C runtimes', or unnamed), below them comes
// the caller's. The framework routines it knows are one table
// (table.go).
//
// This sees what the probes may miss: on a real GPU a waiting thread
// spins inside the driver (state R, its scheduler counters rising), so
// from /proc it looks busy; a job that hung before tracing began has no
// call entry for the probes to have seen, and a launch's return is not
// probed at all. Its stack still says where it waits.
//
// Classify reads one stack. A Sampler (Linux, amd64) takes the native
// stacks of every thread of a rank at once, stopped for a few
// milliseconds, and hands the threads it finds waiting to timer.Engine's
// rule for waits known by their stack (see timer's package comment).
package gpuwait

import (
	"path/filepath"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Wait is a GPU wait read from one thread's native stack.
type Wait struct {
	// Call is the call the thread waits in: the innermost frame named as
	// a GPU API function ("cuStreamSynchronize", "cudaLaunchKernel",
	// "cuMemFree_v2"), or the framework routine (Role Work) when no GPU
	// call is inside it; "" when no frame names the call (a stripped
	// driver's internals called from a stub that left no frame: Library
	// says where it is).
	Call string
	// Library is the file name of the GPU library the thread is in
	// ("libcuda.so.1"), for a call no frame names; "" for a Work wait.
	Library string
	// From is the routine the wait is for: the innermost framework frame
	// of the table (Work or Site) above Call, else the first named frame
	// above the wait that is neither the GPU libraries' nor the C
	// runtimes' ("c10::cuda::device_synchronize"); "" when none.
	From string
	// Kernel is the kernel a launch is for, where the frame that called
	// the launch is the host stub nvcc writes for it
	// ("__device_stub__ZN2at4cuda...11spin_kernelEl", the kernel's
	// mangled name after "__device_stub_"), demangled; "" otherwise. It is
	// the one frame of a launch blocked under CUDA_LAUNCH_BLOCKING=1 (its
	// kernel then holds it) or behind a full queue (its kernel waits
	// behind the one that holds it) that names the kernel, when no probe
	// saw the launch.
	Kernel string
	Role   Role   // Call (a GPU call) or Work
	Vendor string // "cuda" or "maca"
}

// Momentary says whether the call returns at once in a job that runs
// well, so that one sample of a thread inside it says nothing of a wait:
// a launch, an asynchronous copy, an event record, a stream wait, a query,
// or a call no frame names. Only the same wait seen again later (the
// engine's rule) or the probes tell such a call blocks.
func (w Wait) Momentary() bool {
	if w.Role != Call {
		return false
	}
	if w.Call == "" {
		return true
	}
	for _, s := range []string{"Launch", "Async", "Query", "Record", "WaitEvent"} {
		if strings.Contains(w.Call, s) {
			return true
		}
	}
	return false
}

// String names the wait as the engine names a waiter's:
// "cuStreamSynchronize from c10d::AsyncAllreduceCUDAHostWork::run",
// "cuLaunchKernel of at::cuda::(anonymous namespace)::spin_kernel from
// at::cuda::sleep".
func (w Wait) String() string {
	tw := timer.ThreadWait{Call: w.Call, Library: w.Library, From: w.From, Kernel: w.Kernel}
	return tw.Name()
}

// Classify says whether a native stack (innermost frame first) waits on
// the GPU, and on what:
//   - a GPU call: the frames on top of the stack, down to the caller's,
//     are the GPU libraries' (by file, or named as their API functions
//     wherever they lie: a runtime linked into a framework), the C
//     runtimes' or unnamed, at least one of them the GPU libraries', and
//     a frame outside them called it (a library's own thread, which no
//     one called, waits for work to do, not for the GPU);
//   - a framework's work wait (Role Work in the table): any frame may be
//     inside it (its loop polls, sleeps, checks a timeout).
//
// A Site frame alone is no wait: it only names a GPU call inside it.
func Classify(native []stack.Frame) (Wait, bool) { return classify(native, false) }

// ClassifyCut is Classify for a stack whose unwinding stopped before its
// end (stack.Thread.Error): at the trampoline of another tracer's return
// probe, which took the return address a GPU call was entered with (it
// sits on the stacks of every process that maps the library). A GPU call
// on top of it was called from somewhere: it is a wait, its caller
// unknown.
func ClassifyCut(native []stack.Frame) (Wait, bool) { return classify(native, true) }

func classify(native []stack.Frame, cut bool) (Wait, bool) {
	top := 0
	gpu := false
	for top < len(native) && inside(native[top]) {
		gpu = gpu || gpuFrame(native[top])
		top++
	}
	if gpu && (top < len(native) || cut) {
		w := Wait{Role: Call}
		for _, f := range native[:top] {
			switch {
			case w.Call == "" && apiName(name(f.Func)):
				w.Call = name(f.Func)
				w.Vendor = vendorOf(w.Call, f.Module)
			case w.Library == "" && inLibraries(f.Module, gpuLibraries):
				w.Library = filepath.Base(f.Module)
				if w.Vendor == "" {
					w.Vendor = vendorOf("", f.Module)
				}
			}
		}
		if w.Call != "" {
			w.Library = ""
		}
		above := native[top:]
		if len(above) > 0 {
			if w.Kernel = launchStub(above[0].Func); w.Kernel != "" {
				above = above[1:] // the stub: the routine is its caller
			}
		}
		w.From = from(above)
		return w, true
	}
	for i, f := range native {
		if m, ok := lookup(f.Func); ok && m.role == Work {
			return Wait{Call: name(f.Func), Role: Work, Vendor: m.vendor, From: from(native[i+1:])}, true
		}
	}
	return Wait{}, false
}

// stubPrefix begins the name of the host function nvcc writes for each
// kernel, which a <<<>>> launch calls and which calls cudaLaunchKernel:
// "__device_stub_" and the kernel's mangled name.
const stubPrefix = "__device_stub_"

// launchStub is the kernel a launch stub named fn launches, demangled;
// "" when fn is no launch stub.
func launchStub(fn string) string {
	fn = name(fn)
	if !strings.HasPrefix(fn, stubPrefix) || len(fn) == len(stubPrefix) {
		return ""
	}
	return symbols.Demangle(fn[len(stubPrefix):])
}

// from is the routine a wait is for, from the frames above it: the
// innermost framework frame of the table, else the first named frame
// that is neither a GPU call nor the libraries' own.
func from(above []stack.Frame) string {
	for _, f := range above {
		if m, ok := lookup(f.Func); ok && (m.role == Work || m.role == Site) {
			return name(f.Func)
		}
	}
	for _, f := range above {
		if inside(f) {
			continue
		}
		return name(f.Func)
	}
	return ""
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

// apiPrefixes begin the names of the GPU libraries' API functions, each
// followed by a capital: cuLaunchKernel, cudaFree, ncclAllReduce and
// NCCL's pnccl* twins, MACA's mcFree and mcclAllReduce.
var apiPrefixes = []string{"cuda", "cu", "pnccl", "nccl", "pmccl", "mccl", "mc"}

// apiName says whether fn is named as a GPU API function.
func apiName(fn string) bool {
	for _, p := range apiPrefixes {
		if len(fn) > len(p) && strings.HasPrefix(fn, p) && fn[len(p)] >= 'A' && fn[len(p)] <= 'Z' {
			return true
		}
	}
	return false
}

// vendorOf is the vendor of a GPU call, by its name, else its file.
func vendorOf(fn, module string) string {
	if strings.HasPrefix(fn, "mc") || strings.HasPrefix(fn, "pmccl") || fn == "" && inLibraries(module, macaLibraries) {
		return "maca"
	}
	return "cuda"
}

// gpuFrame says whether a frame is the GPU libraries': in one of their
// files, or named as one of their API functions.
func gpuFrame(f stack.Frame) bool {
	return inLibraries(f.Module, gpuLibraries) || apiName(name(f.Func))
}

// inside says whether a frame may lie inside a GPU call: the GPU
// libraries' own, the C runtimes', or a frame with no name.
func inside(f stack.Frame) bool {
	return unnamed(f) || gpuFrame(f) || inLibraries(f.Module, systemLibraries)
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
