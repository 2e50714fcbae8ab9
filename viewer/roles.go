package viewer

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/viewer/culprit"
	"github.com/xpu-timer/xpu-timer/viewer/flame"
)

// What a thread is worth as evidence (culprit.Role) is read from its name
// and frames. Background threads are the helpers communication and runtime
// libraries start: their loops park them anywhere, so a different stack
// there means little.

// helperNames are thread name prefixes of library helpers.
var helperNames = []struct{ prefix, what string }{
	{"pt_nccl_", "NCCL watchdog"},     // PyTorch's ProcessGroupNCCL watchdog and heartbeat
	{"NCCL ", "NCCL proxy"},           // "NCCL Progress 0", "NCCL Service 1", "NCCL UDS Service"
	{"ncclProxy", "NCCL proxy"},       //
	{"cuda-EvtHandlr", "CUDA driver"}, // the driver's event handler
	{"cuda0", "CUDA driver"},          // "cuda00001400006": the driver's per-context threads
	{"gloo", "gloo"},                  //
	{"pt_autograd_", ""},              // autograd device threads run the job's own backward: not helpers
}

// helperRoots are the libraries whose threads are helpers: the first frame
// past the thread start routines lies in one of them.
var helperRoots = []struct{ prefix, what string }{
	{"libgloo", "gloo"},
	{"libnccl", "NCCL proxy"},
	{"librccl", "RCCL proxy"},
	{"libmccl", "MCCL proxy"},
	{"libcuda.so", "CUDA driver"},
	{"libcupti", "CUPTI"},
	{"libnvidia", "NVIDIA driver"},
	{"libgomp", "OpenMP worker"},
	{"libiomp", "OpenMP worker"},
	{"libtorch", "PyTorch runtime"}, // TCPStore, ProcessGroup work loops, thread pools
	{"libc10", "PyTorch runtime"},
}

// helperFuncs are native functions that mark a helper wherever they occur.
var helperFuncs = []struct{ prefix, what string }{
	{"gloo::", "gloo"},
	{"c10d::ProcessGroupGloo::runLoop", "gloo"},
	{"c10d::ProcessGroupNCCL::", "NCCL watchdog"},
	{"c10d::TCPStore", "c10d store"},
	{"ncclProxy", "NCCL proxy"},
}

// helperPython are Python functions (bare name, file suffix) that mark a
// helper thread.
var helperPython = []struct{ fn, file, what string }{
	{"_pin_memory_loop", "pin_memory.py", "pin-memory"},
	{"_feed", "multiprocessing/queues.py", "queue feeder"},
	{"_handle_results", "multiprocessing/pool.py", "pool"},
	{"_handle_tasks", "multiprocessing/pool.py", "pool"},
	{"_handle_workers", "multiprocessing/pool.py", "pool"},
}

// helperOf says what library a background thread helps; "" for an
// application thread.
func helperOf(t *stack.Thread, frames []stack.Frame) string {
	for _, h := range helperNames {
		if strings.HasPrefix(t.Name, h.prefix) {
			return h.what
		}
	}
	for i := range t.Python {
		fn := flame.BareName(t.Python[i].Func)
		for _, h := range helperPython {
			if fn == h.fn && strings.HasSuffix(t.Python[i].File, h.file) {
				return h.what
			}
		}
	}
	if len(t.Python) > 0 {
		return "" // a Python thread of the job's own
	}
	for i := range frames {
		for _, h := range helperFuncs {
			if strings.HasPrefix(frames[i].Func, h.prefix) {
				return h.what
			}
		}
	}
	// The thread's root: the outermost frame past clone, start_thread and
	// the C++ library's trampoline.
	for i := len(frames) - 1; i >= 0; i-- {
		base := filepath.Base(frameObject(&frames[i]))
		if isSystem(base) || strings.HasPrefix(base, "libstdc++") {
			continue
		}
		for _, h := range helperRoots {
			if strings.HasPrefix(base, h.prefix) {
				return h.what
			}
		}
		break
	}
	return ""
}

// isInterpreter says whether module is CPython's executable or library.
func isInterpreter(module string) bool {
	base := filepath.Base(module)
	return strings.HasPrefix(base, "python") || strings.HasPrefix(base, "libpython")
}

// waitSite is the native frame a thread waits or runs in, innermost first:
// the first named frame past the C library and the interpreter (the code
// the wait is for), else the innermost named C library frame (the wait
// itself: clock_nanosleep, a futex), as "func (library)". It looks no further out than the
// innermost Python frame. "" when no frame is named.
func waitSite(frames []stack.Frame) string {
	system := ""
	for i := range frames {
		f := &frames[i]
		if f.Module == "python" {
			break
		}
		if f.Func == "" || f.Func == flame.Unknown {
			continue
		}
		obj := frameObject(f)
		switch {
		case isSystem(obj):
			if system == "" {
				system = siteText(f.Func, obj)
			}
		case isInterpreter(obj):
		default:
			return siteText(f.Func, obj)
		}
	}
	return system
}

// siteText phrases a native frame for reading: "clock_nanosleep
// (libc.so.6)", without the symbol's version (@@GLIBC_2.17).
func siteText(fn, obj string) string {
	if i := strings.Index(fn, "@"); i > 0 {
		fn = fn[:i]
	}
	return fn + " (" + filepath.Base(obj) + ")"
}

// pyFrame phrases a thread's innermost Python frame, "func (file.py:line)";
// when that lies in the standard library or an installed package, the
// innermost frame of the job's own code follows: "wait (threading.py:320)
// from next_batch (train.py:88)".
func pyFrame(t *stack.Thread) string {
	if len(t.Python) == 0 {
		return ""
	}
	s := pyText(&t.Python[0])
	if isLibraryPy(t.Python[0].File) {
		for i := 1; i < len(t.Python); i++ {
			if !isLibraryPy(t.Python[i].File) {
				return s + " from " + pyText(&t.Python[i])
			}
		}
	}
	return s
}

func pyText(f *stack.Frame) string {
	k := flame.FrameKey(f)
	if f.Line > 0 {
		return fmt.Sprintf("%s (%s:%d)", k.Func, filepath.Base(f.File), f.Line)
	}
	return fmt.Sprintf("%s (%s)", k.Func, filepath.Base(k.File))
}

// isLibraryPy says whether a Python source file belongs to the standard
// library or an installed package rather than to the job.
func isLibraryPy(file string) bool {
	return strings.Contains(file, "/lib/python3") || strings.Contains(file, "-packages/") || strings.HasPrefix(file, "<frozen")
}

// driverOf picks the thread that drives training among a rank's threads:
// the main thread when it runs Python, else the GIL holder, else the main
// thread; -1 when none is known.
func driverOf(threads []stack.Thread, pid int) int {
	main, gil := -1, -1
	for i := range threads {
		if threads[i].TID == pid {
			main = i
		}
		if threads[i].GIL && gil < 0 {
			gil = i
		}
	}
	if main >= 0 && len(threads[main].Python) > 0 || gil < 0 {
		return main
	}
	return gil
}

// Waits: a thread whose stack is inside one of these is waiting on its
// peers or on the GPU. A rank with no GPU work in flight and such a thread
// is a waiter, never the culprit (see package culprit).
var (
	// waitFuncs are native functions, by prefix, and what they wait in.
	waitFuncs = []struct{ prefix, what string }{
		{"cudaStreamSynchronize", "CUDA synchronize"},
		{"cudaDeviceSynchronize", "CUDA synchronize"},
		{"cudaEventSynchronize", "CUDA synchronize"},
		{"cuStreamSynchronize", "CUDA synchronize"},
		{"cuCtxSynchronize", "CUDA synchronize"},
		{"cuEventSynchronize", "CUDA synchronize"},
		{"c10d::Reducer::finalize_backward", "c10d wait"}, // DDP's backward waits for its all-reduce
		{"c10d::TCPStore::get", "c10d store wait"},
		{"c10d::TCPStore::wait", "c10d store wait"},
		{"c10d::TCPStore::doWait", "c10d store wait"},
		{"c10d::TCPStore::doGet", "c10d store wait"},
	}
	// waitPy are Python source files whose frames are a collective or a
	// wait of torch.distributed.
	waitPy = []struct{ suffix, what string }{
		{"torch/distributed/distributed_c10d.py", "torch.distributed collective"},
	}
)

// waitOf says what a thread waits in when its stack (frames, innermost
// first) is inside a collective or a wait: a gloo collective's wait
// (gloo's transport loop, idle in epoll, is not one), a c10d work's or
// store's wait, an NCCL call of the application's (not of NCCL's own
// helper threads), a CUDA synchronize, a torch.distributed call; "" when
// none.
func waitOf(t *stack.Thread, frames []stack.Frame, role culprit.Role) string {
	for i := range frames {
		fn := frames[i].Func
		switch {
		case strings.HasPrefix(fn, "gloo::") && strings.Contains(fn, "::wait"):
			return "gloo collective"
		case strings.HasPrefix(fn, "c10d::") && (strings.HasSuffix(fn, "::wait") || strings.Contains(fn, "::wait(")):
			return "c10d wait"
		case role != culprit.Background && isCollAPI(fn) && isCollLib(frameObject(&frames[i])):
			return "collective call (" + fn + ")"
		}
		for _, w := range waitFuncs {
			if strings.HasPrefix(fn, w.prefix) {
				return w.what
			}
		}
	}
	for i := range t.Python {
		for _, w := range waitPy {
			if strings.HasSuffix(t.Python[i].File, w.suffix) {
				return w.what
			}
		}
	}
	return ""
}

// isCollAPI says whether fn is an entry point of NCCL's API (ncclAllReduce,
// ncclGroupEnd, ncclCommInitRank; RCCL's and MCCL's alike), not a device
// kernel or an internal function.
func isCollAPI(fn string) bool {
	for _, p := range []string{"nccl", "mccl", "rccl"} {
		if rest, ok := strings.CutPrefix(fn, p); ok && rest != "" && rest[0] >= 'A' && rest[0] <= 'Z' {
			return !strings.HasPrefix(rest, "Dev") && !strings.HasPrefix(rest, "Kernel") && !strings.HasPrefix(rest, "Proxy")
		}
	}
	return false
}

// roleOf is a thread's culprit.Role and, for a helper, what it helps.
func roleOf(t *stack.Thread, frames []stack.Frame, driver bool) (culprit.Role, string) {
	if driver {
		return culprit.Driver, ""
	}
	if h := helperOf(t, frames); h != "" {
		return culprit.Background, h
	}
	return culprit.App, ""
}
