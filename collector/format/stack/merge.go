package stack

import "strings"

// evalLoop is CPython's evaluation loop: each native frame of it runs
// Python frames.
const evalLoop = "_PyEval_EvalFrameDefault"

// evalWrappers are thin native entries into the evaluation loop (3.9/3.10:
// PyEval_EvalFrameEx -> _PyEval_EvalFrame -> interp->eval_frame). Directly
// outside an evaluation-loop frame they belong to that same evaluation and
// are folded into it; anywhere else they are kept.
var evalWrappers = map[string]bool{
	"_PyEval_EvalFrame":  true,
	"PyEval_EvalFrameEx": true,
	"PyEval_EvalFrame":   true,
}

// baseName strips compiler clone suffixes: "_PyEval_EvalFrameDefault.cold"
// and ".constprop.0" parts are the same function.
func baseName(fn string) string {
	if i := strings.IndexByte(fn, '.'); i > 0 {
		return fn[:i]
	}
	return fn
}

// IsEvalFrame reports whether a native frame runs CPython's evaluation loop.
func IsEvalFrame(f Frame) bool { return baseName(f.Func) == evalLoop }

// Merge returns one stack, innermost first, in which every native frame of
// the evaluation loop is replaced by the Python frames it ran, so the
// picture reads `train.py:step → torch → libnccl → futex`.
//
// The Python frames (innermost first) split into one group per
// evaluation-loop call: a group ends at a frame marked Entry (every frame
// on 3.9/3.10; is_entry on 3.11; the frame inside a C-stack shim on 3.12+).
// The innermost eval frame gets the innermost group, and so on outwards.
// When the counts disagree nothing is dropped: the outermost eval frame
// takes every group left, an eval frame with no group left stays as it
// is, and with no eval frame at all the Python frames go after (outside)
// the native ones. Native frames other than the eval loop and its thin
// wrappers are always kept.
func Merge(native, python []Frame) []Frame {
	if len(python) == 0 {
		return append([]Frame(nil), native...)
	}
	if len(native) == 0 {
		return append([]Frame(nil), python...)
	}
	var groups [][]Frame
	start := 0
	for i, f := range python {
		if f.Entry || i == len(python)-1 {
			groups = append(groups, python[start:i+1])
			start = i + 1
		}
	}
	evals := 0
	for _, f := range native {
		if IsEvalFrame(f) {
			evals++
		}
	}
	out := make([]Frame, 0, len(native)+len(python))
	if evals == 0 {
		out = append(out, native...)
		return append(out, python...)
	}
	seen, g := 0, 0
	prevEval := false
	for _, f := range native {
		switch {
		case IsEvalFrame(f):
			seen++
			switch {
			case seen == evals && g < len(groups):
				for ; g < len(groups); g++ {
					out = append(out, groups[g]...)
				}
			case g < len(groups):
				out = append(out, groups[g]...)
				g++
			default:
				out = append(out, f)
			}
			prevEval = true
			continue
		case prevEval && evalWrappers[baseName(f.Func)]:
			continue // same evaluation as the eval frame just inside it
		}
		prevEval = false
		out = append(out, f)
	}
	return out
}
