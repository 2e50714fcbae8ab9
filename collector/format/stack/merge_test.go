package stack

import (
	"reflect"
	"strings"
	"testing"
)

// frames builds a stack from names: "py:NAME" is a Python frame,
// "py:NAME!" a Python entry frame, anything else a native frame.
func frames(names ...string) []Frame {
	var out []Frame
	for _, n := range names {
		if p, ok := strings.CutPrefix(n, "py:"); ok {
			entry := strings.HasSuffix(p, "!")
			out = append(out, Frame{Func: strings.TrimSuffix(p, "!"), Module: "python", Entry: entry})
			continue
		}
		out = append(out, Frame{Func: n, Module: "libpython.so"})
	}
	return out
}

func names(fs []Frame) string {
	var s []string
	for _, f := range fs {
		if f.Module == "python" {
			s = append(s, "py:"+f.Func)
		} else {
			s = append(s, f.Func)
		}
	}
	return strings.Join(s, " ")
}

func TestMerge(t *testing.T) {
	for _, tc := range []struct {
		name           string
		native, python []string
		want           string
	}{{
		name: "3.10 one eval per frame, torch and nccl kept",
		native: []string{"futex_wait", "ncclGroupEnd", "torch::dist::allreduce", "cfunction_call",
			"_PyEval_EvalFrameDefault", "_PyFunction_Vectorcall", "_PyEval_EvalFrameDefault", "PyEval_EvalCode", "main"},
		python: []string{"py:step!", "py:<module>!"},
		want:   "futex_wait ncclGroupEnd torch::dist::allreduce cfunction_call py:step _PyFunction_Vectorcall py:<module> PyEval_EvalCode main",
	}, {
		name: "3.9 wrappers and cold clone fold into their evaluation",
		native: []string{"pause", "_PyEval_EvalFrameDefault.cold", "_PyEval_EvalFrame", "function_code_fastcall",
			"_PyEval_EvalFrameDefault", "PyEval_EvalFrameEx", "gen_send_ex", "_PyEval_EvalFrameDefault", "main"},
		python: []string{"py:leaf!", "py:gen!", "py:<module>!"},
		want:   "pause py:leaf function_code_fastcall py:gen gen_send_ex py:<module> main",
	}, {
		name:   "3.11 one eval runs frames inline up to is_entry",
		native: []string{"sem_wait", "lock_acquire", "_PyEval_EvalFrameDefault", "gen_send_ex2", "_PyEval_EvalFrameDefault", "Py_RunMain"},
		python: []string{"py:wait", "py:leaf", "py:middle!", "py:run", "py:<module>!"},
		want:   "sem_wait lock_acquire py:wait py:leaf py:middle gen_send_ex2 py:run py:<module> Py_RunMain",
	}, {
		name:   "3.12 shims marked on the frame inside them",
		native: []string{"pause", "PyCFuncPtr_call", "_PyEval_EvalFrameDefault", "PyObject_Call", "_PyEval_EvalFrameDefault", "pymain_run_python"},
		python: []string{"py:in_ctypes", "py:run", "py:_bootstrap_inner!", "py:_bootstrap!"},
		want:   "pause PyCFuncPtr_call py:in_ctypes py:run py:_bootstrap_inner PyObject_Call py:_bootstrap pymain_run_python",
	}, {
		name:   "more groups than evals: outermost takes the rest",
		native: []string{"futex", "_PyEval_EvalFrameDefault", "x", "_PyEval_EvalFrameDefault", "start_thread"},
		python: []string{"py:a!", "py:b!", "py:c!", "py:d!"},
		want:   "futex py:a x py:b py:c py:d start_thread",
	}, {
		name:   "fewer groups than evals: extra evals stay native",
		native: []string{"futex", "_PyEval_EvalFrameDefault", "x", "_PyEval_EvalFrameDefault", "start_thread"},
		python: []string{"py:a", "py:b!"},
		want:   "futex py:a py:b x _PyEval_EvalFrameDefault start_thread",
	}, {
		name:   "no eval frame: python after native",
		native: []string{"futex", "start_thread"},
		python: []string{"py:a!"},
		want:   "futex start_thread py:a",
	}, {
		name:   "no native frames",
		python: []string{"py:a", "py:b!"},
		want:   "py:a py:b",
	}, {
		name:   "no python frames",
		native: []string{"futex", "_PyEval_EvalFrameDefault", "start_thread"},
		want:   "futex _PyEval_EvalFrameDefault start_thread",
	}, {
		name:   "wrapper not next to an eval frame is kept",
		native: []string{"PyEval_EvalFrameEx", "_PyEval_EvalFrameDefault", "main"},
		python: []string{"py:a!"},
		want:   "PyEval_EvalFrameEx py:a main",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			native, python := frames(tc.native...), frames(tc.python...)
			got := Merge(native, python)
			if names(got) != tc.want {
				t.Errorf("Merge:\n got %s\nwant %s", names(got), tc.want)
			}
			if !reflect.DeepEqual(native, frames(tc.native...)) || !reflect.DeepEqual(python, frames(tc.python...)) {
				t.Error("Merge modified its inputs")
			}
			checkKeeps(t, native, python, got)
		})
	}
}

// checkKeeps asserts the invariants: every Python frame appears once, in
// order, and every native frame other than the eval loop and wrappers folded
// into it appears in order.
func checkKeeps(t *testing.T, native, python, got []Frame) {
	t.Helper()
	var gotPy, gotNative []Frame
	for _, f := range got {
		if f.Module == "python" {
			gotPy = append(gotPy, f)
		} else {
			gotNative = append(gotNative, f)
		}
	}
	if len(python) > 0 && !reflect.DeepEqual(gotPy, python) {
		t.Errorf("python frames changed: %s", names(gotPy))
	}
	i := 0
	for _, f := range native {
		if IsEvalFrame(f) || evalWrappers[baseName(f.Func)] {
			continue
		}
		for i < len(gotNative) && gotNative[i] != f {
			i++
		}
		if i == len(gotNative) {
			t.Errorf("native frame %s lost", f.Func)
			return
		}
	}
}

// FuzzMerge checks the invariants on arbitrary stack shapes.
func FuzzMerge(f *testing.F) {
	f.Add([]byte("nEnwEn"), []byte("pPpP"))
	f.Add([]byte("EEE"), []byte("P"))
	f.Add([]byte(""), []byte("pp"))
	f.Fuzz(func(t *testing.T, ns, ps []byte) {
		var native, python []Frame
		for i, c := range ns {
			switch c % 3 {
			case 0:
				native = append(native, Frame{Func: evalLoop, Addr: uint64(i)})
			case 1:
				native = append(native, Frame{Func: "PyEval_EvalFrameEx", Addr: uint64(i)})
			default:
				native = append(native, Frame{Func: "native", Addr: uint64(i)})
			}
		}
		for i, c := range ps {
			python = append(python, Frame{Func: "py", Line: i, Module: "python", Entry: c%2 == 0})
		}
		checkKeeps(t, native, python, Merge(native, python))
	})
}
