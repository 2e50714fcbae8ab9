package activity

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/capture/gpuwait"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// Kind is what a rank is doing, as the metrics' activity label and the
// log spell it.
type Kind string

// Kinds, in the order the rules try them (see the package comment).
const (
	GC         Kind = "gc"
	Checkpoint Kind = "checkpoint"
	Compile    Kind = "compile"
	DataLoader Kind = "dataloader"
	Collective Kind = "collective"
	GPUWait    Kind = "gpu-wait"
	Python     Kind = "python"
	Unknown    Kind = "unknown"
)

// Kinds lists every kind.
var Kinds = []Kind{GC, Checkpoint, Compile, DataLoader, Collective, GPUWait, Python, Unknown}

// Activity is what a rank is doing, and the frame, wait or collective
// that says so.
type Activity struct {
	Kind   Kind   `json:"activity"`
	Detail string `json:"detail,omitempty"`
}

// Facts are what the probes know a rank waits on (timer.Engine.Awaiting).
type Facts struct {
	TID        int    // the thread waiting longest on GPU work; 0: none
	Call       string // its call ("cuStreamSynchronize")
	Collective string // the collective it waits in ("AllReduce #12 on comm 3f2a..."); "" when none
	Kernel     string // the oldest kernel it waits on not known complete; "" when none
}

// Classify says what the rank pid is doing from one sample of its
// threads (each with native and Python frames, innermost first) and
// what the probes know.
func Classify(pid int, threads []stack.Thread, f Facts) Activity {
	th := mainThread(pid, threads)
	if th == nil {
		return Activity{Kind: Unknown}
	}
	py := innermost(th.Python)
	if collecting(th.Native) {
		return Activity{Kind: GC, Detail: py}
	}
	if fr, ok := outermost(th.Python, savesPython); ok {
		return Activity{Kind: Checkpoint, Detail: fr}
	}
	for _, fr := range th.Native {
		if savesNative(fr.Func) {
			return Activity{Kind: Checkpoint, Detail: fr.Func}
		}
	}
	if fr, ok := outermost(th.Python, compilesPython); ok {
		return Activity{Kind: Compile, Detail: fr}
	}
	for _, fr := range th.Native {
		if strings.HasPrefix(filepath.Base(fr.Module), "libtriton") && !unnamed(fr) {
			return Activity{Kind: Compile, Detail: fr.Func}
		}
	}
	for _, fr := range th.Python {
		if loadsData(fr) {
			return Activity{Kind: DataLoader, Detail: frameString(fr)}
		}
	}
	w, waits := gpuwait.Classify(th.Native)
	probed := f.TID != 0 && f.TID == th.TID
	if waits && w.Momentary() && !probed {
		waits = false // caught in a launch or a query: one sample cannot tell it waits
	}
	if waits || probed {
		if probed && f.Collective != "" {
			return Activity{Kind: Collective, Detail: f.Collective}
		}
		detail := f.Call
		if waits {
			detail = w.String()
		}
		if probed && f.Kernel != "" {
			detail += ", kernel " + f.Kernel
		}
		return Activity{Kind: GPUWait, Detail: detail}
	}
	if py != "" {
		return Activity{Kind: Python, Detail: py}
	}
	for _, fr := range th.Native {
		if !unnamed(fr) && !stack.System(fr.Module) {
			return Activity{Kind: Unknown, Detail: fr.Func}
		}
	}
	return Activity{Kind: Unknown}
}

// mainThread is the thread Classify reads (see the package comment).
func mainThread(pid int, threads []stack.Thread) *stack.Thread {
	for i := range threads {
		if threads[i].TID == pid {
			return &threads[i]
		}
	}
	for i := range threads {
		if len(threads[i].Python) > 0 {
			return &threads[i]
		}
	}
	if len(threads) > 0 {
		return &threads[0]
	}
	return nil
}

// gcRoutines are CPython's collection routines, 3.9 to 3.15.
var gcRoutines = map[string]bool{
	"gc_collect_main": true, "gc_collect_with_callback": true, "gc_collect_generations": true, "gc_collect_impl": true,
	"collect_with_callback": true, "collect_generations": true, "_PyGC_Collect": true, "PyGC_Collect": true,
	"gc_collect_region": true, "gc_collect_full": true, "gc_collect_young": true, "gc_collect_increment": true,
	"_Py_RunGC": true,
}

// collecting says whether a native stack is inside CPython's garbage
// collector.
func collecting(native []stack.Frame) bool {
	for _, fr := range native {
		if gcRoutines[fr.Func] || fr.Func == "collect" && interpreter(fr.Module) {
			return true
		}
	}
	return false
}

// interpreter says whether a module is CPython's: libpython, or a python
// executable that links it statically.
func interpreter(module string) bool {
	base := filepath.Base(module)
	return strings.HasPrefix(base, "libpython") || strings.HasPrefix(base, "python")
}

// savesPython says whether a Python frame saves or loads a checkpoint.
func savesPython(fr stack.Frame) bool {
	file := filepath.ToSlash(fr.File)
	switch {
	case strings.HasSuffix(file, "torch/utils/checkpoint.py"):
		return false // activation checkpointing
	case strings.HasSuffix(file, "torch/serialization.py"):
		switch bare(fr.Func) {
		case "save", "_save", "_legacy_save", "load", "_load", "_legacy_load":
			return true
		}
		return false
	case strings.Contains(file, "torch/distributed/checkpoint/"), strings.Contains(file, "safetensors/"):
		return true
	}
	words := strings.FieldsFunc(strings.ToLower(fr.Func), func(r rune) bool { return r == '_' || r == '.' })
	var ckpt, io bool
	for _, w := range words {
		switch w {
		case "save", "saving":
			return true
		case "checkpoint", "ckpt", "checkpointing":
			ckpt = true
		case "write", "dump", "store", "persist", "load":
			io = true
		}
	}
	return ckpt && io
}

// savesNative says whether a native frame is PyTorch's checkpoint writer
// or reader.
func savesNative(fn string) bool {
	return strings.Contains(fn, "PyTorchStreamWriter") || strings.Contains(fn, "PyTorchStreamReader")
}

// compileFiles are the Python files of torch.compile's and Triton's
// compilers (not of the paths compiled code runs through).
var compileFiles = []string{
	"torch/_dynamo/convert_frame.py", "torch/_dynamo/symbolic_convert.py", "torch/_dynamo/output_graph.py",
	"torch/_inductor/compile_fx.py", "torch/_inductor/graph.py", "torch/_inductor/codecache.py",
	"torch/_inductor/async_compile.py", "torch/_inductor/scheduler.py", "torch/_inductor/codegen/",
	"torch/_functorch/aot_autograd.py", "torch/_functorch/_aot_autograd/", "triton/compiler/",
}

func compilesPython(fr stack.Frame) bool {
	file := filepath.ToSlash(fr.File)
	for _, f := range compileFiles {
		if strings.Contains(file, f) {
			return true
		}
	}
	return false
}

// loadsData says whether a Python frame is DataLoader's.
func loadsData(fr stack.Frame) bool {
	file := filepath.ToSlash(fr.File)
	if strings.HasSuffix(file, "torch/utils/data/dataloader.py") || strings.Contains(file, "torch/utils/data/_utils/") {
		return true
	}
	switch bare(fr.Func) {
	case "_next_data", "_get_data", "_try_get_data":
		return true
	}
	return false
}

// outermost is the outermost frame (frames are innermost first) for
// which match holds, as func@file:line.
func outermost(frames []stack.Frame, match func(stack.Frame) bool) (string, bool) {
	for i := len(frames) - 1; i >= 0; i-- {
		if match(frames[i]) {
			return frameString(frames[i]), true
		}
	}
	return "", false
}

// innermost is the innermost Python frame as func@file:line, "" when none.
func innermost(python []stack.Frame) string {
	if len(python) == 0 {
		return ""
	}
	return frameString(python[0])
}

// frameString writes a Python frame as func@file:line, the file by its
// base name (the detail is a label value: short, and the same on every
// node whatever the install path).
func frameString(fr stack.Frame) string {
	s := fr.Func + "@" + filepath.Base(fr.File)
	if fr.Line > 0 {
		s += ":" + strconv.Itoa(fr.Line)
	}
	return s
}

// bare is a function's name without its class: dumps of CPython 3.11
// and later may carry qualified names ("_MultiProcessingDataLoaderIter._get_data").
func bare(fn string) string { return fn[strings.LastIndexByte(fn, '.')+1:] }

func unnamed(fr stack.Frame) bool { return fr.Func == "" || fr.Func == "??" }
