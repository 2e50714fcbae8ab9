package python

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// none marks a field a version does not have.
const none = -1

// layout holds the offsets of every CPython field the reader uses. For 3.9
// to 3.12 they are hard-coded below, each taken from that version's headers
// (TestOffsetsMatchHeaders compiles testdata/offsets.c against every
// installed version and checks them); from 3.13 they are read from the
// _Py_DebugOffsets table at the start of _PyRuntime.
type layout struct {
	minor int // 9 for 3.9

	runtimeInterpHead int64 // _PyRuntime.interpreters.head
	runtimeGILHolder  int64 // _PyRuntime.ceval.gil.last_holder (3.9-3.11)
	runtimeGILLocked  int64 // _PyRuntime.ceval.gil.locked (3.9-3.11)

	interpNext      int64 // PyInterpreterState.next
	interpThreads   int64 // PyInterpreterState.tstate_head / threads.head
	interpGILPtr    int64 // PyInterpreterState.ceval.gil, a pointer (3.12)
	gilHolder       int64 // struct _gil_runtime_state.last_holder (3.12)
	gilLocked       int64 // struct _gil_runtime_state.locked (3.12)
	interpGILHolder int64 // PyInterpreterState._gil.last_holder (3.13+)
	interpGILLocked int64 // PyInterpreterState._gil.locked (3.13+)

	tsNext     int64 // PyThreadState.next
	tsInterp   int64 // PyThreadState.interp
	tsThreadID int64 // PyThreadState.thread_id (pthread_t)
	tsNativeID int64 // PyThreadState.native_thread_id (3.11+)
	tsFrame    int64 // PyThreadState.frame (3.9/3.10), current_frame (3.13+)
	tsCFrame   int64 // PyThreadState.cframe (3.11/3.12)
	cfCurrent  int64 // _PyCFrame.current_frame (3.11/3.12)

	frameBack  int64 // PyFrameObject.f_back (3.9/3.10)
	frameCode  int64 // PyFrameObject.f_code (3.9/3.10)
	frameLasti int64 // PyFrameObject.f_lasti (3.9/3.10)

	iframeCode     int64 // _PyInterpreterFrame.f_code / f_executable (3.11+)
	iframePrevious int64 // _PyInterpreterFrame.previous
	iframeInstr    int64 // _PyInterpreterFrame.prev_instr (3.11/3.12) / instr_ptr (3.13+)
	iframeOwner    int64 // _PyInterpreterFrame.owner
	iframeIsEntry  int64 // _PyInterpreterFrame.is_entry (3.11)

	codeFilename       int64
	codeName           int64
	codeQualname       int64 // 3.11+
	codeFirstLineno    int64
	codeLinetable      int64 // co_lnotab (3.9), co_linetable (3.10+)
	codeCodeAdaptive   int64 // co_code_adaptive (3.11+): the instructions
	codeFirstTraceable int64 // _co_firsttraceable (3.11/3.12)

	objectType   int64 // PyObject.ob_type
	bytesSize    int64 // PyVarObject.ob_size
	bytesData    int64 // PyBytesObject.ob_sval
	unicodeLen   int64 // PyASCIIObject.length
	unicodeState int64 // PyASCIIObject.state
	asciiSize    int64 // sizeof(PyASCIIObject): data of compact ASCII strings
	compactSize  int64 // sizeof(PyCompactUnicodeObject): data of other compact strings
}

// Frame owners of _PyInterpreterFrame (3.12+: FRAME_OWNED_BY_CSTACK marks
// the shim frame an evaluation-loop call pushes on entry).
const ownedByCStack = 3

// common fills the fields every version shares.
func common(l layout) layout {
	l.objectType, l.bytesSize, l.bytesData = 8, 16, 32
	l.unicodeLen, l.unicodeState = 16, 32
	return l
}

// layouts are the hard-coded tables of 3.9 to 3.12 (x86-64, default build).
var layouts = map[int]layout{
	9: common(layout{
		minor: 9, runtimeInterpHead: 32, runtimeGILHolder: 360, runtimeGILLocked: 368,
		interpNext: 0, interpThreads: 8, interpGILPtr: none, gilHolder: none, gilLocked: none,
		interpGILHolder: none, interpGILLocked: none,
		tsNext: 8, tsInterp: 16, tsThreadID: 176, tsNativeID: none, tsFrame: 24, tsCFrame: none, cfCurrent: none,
		frameBack: 24, frameCode: 32, frameLasti: 104,
		iframeCode: none, iframePrevious: none, iframeInstr: none, iframeOwner: none, iframeIsEntry: none,
		codeFilename: 104, codeName: 112, codeQualname: none, codeFirstLineno: 40, codeLinetable: 120,
		codeCodeAdaptive: none, codeFirstTraceable: none,
		asciiSize: 48, compactSize: 72,
	}),
	10: common(layout{
		minor: 10, runtimeInterpHead: 32, runtimeGILHolder: 360, runtimeGILLocked: 368,
		interpNext: 0, interpThreads: 8, interpGILPtr: none, gilHolder: none, gilLocked: none,
		interpGILHolder: none, interpGILLocked: none,
		tsNext: 8, tsInterp: 16, tsThreadID: 176, tsNativeID: none, tsFrame: 24, tsCFrame: none, cfCurrent: none,
		frameBack: 24, frameCode: 32, frameLasti: 96,
		iframeCode: none, iframePrevious: none, iframeInstr: none, iframeOwner: none, iframeIsEntry: none,
		codeFilename: 104, codeName: 112, codeQualname: none, codeFirstLineno: 40, codeLinetable: 120,
		codeCodeAdaptive: none, codeFirstTraceable: none,
		asciiSize: 48, compactSize: 72,
	}),
	11: common(layout{
		minor: 11, runtimeInterpHead: 40, runtimeGILHolder: 368, runtimeGILLocked: 376,
		interpNext: 0, interpThreads: 16, interpGILPtr: none, gilHolder: none, gilLocked: none,
		interpGILHolder: none, interpGILLocked: none,
		tsNext: 8, tsInterp: 16, tsThreadID: 152, tsNativeID: 160, tsFrame: none, tsCFrame: 56, cfCurrent: 8,
		frameBack: none, frameCode: none, frameLasti: none,
		iframeCode: 32, iframePrevious: 48, iframeInstr: 56, iframeOwner: 69, iframeIsEntry: 68,
		codeFilename: 112, codeName: 120, codeQualname: 128, codeFirstLineno: 72, codeLinetable: 136,
		codeCodeAdaptive: 184, codeFirstTraceable: 168,
		asciiSize: 48, compactSize: 72,
	}),
	12: common(layout{
		minor: 12, runtimeInterpHead: 40, runtimeGILHolder: none, runtimeGILLocked: none,
		interpNext: 0, interpThreads: 72, interpGILPtr: 384, gilHolder: 8, gilLocked: 16,
		interpGILHolder: none, interpGILLocked: none,
		tsNext: 8, tsInterp: 16, tsThreadID: 136, tsNativeID: 144, tsFrame: none, tsCFrame: 56, cfCurrent: 0,
		frameBack: none, frameCode: none, frameLasti: none,
		iframeCode: 0, iframePrevious: 8, iframeInstr: 56, iframeOwner: 70, iframeIsEntry: none,
		codeFilename: 112, codeName: 120, codeQualname: 128, codeFirstLineno: 68, codeLinetable: 136,
		codeCodeAdaptive: 192, codeFirstTraceable: 176,
		asciiSize: 40, compactSize: 56,
	}),
}

// fields names the offsets the way testdata/offsets.c prints them; fields
// a version lacks are left out.
func (l layout) fields() map[string]int64 {
	all := map[string]int64{
		"runtime.interpreters_head": l.runtimeInterpHead,
		"runtime.gil_last_holder":   l.runtimeGILHolder,
		"runtime.gil_locked":        l.runtimeGILLocked,
		"interp.next":               l.interpNext,
		"interp.threads_head":       l.interpThreads,
		"interp.ceval_gil":          l.interpGILPtr,
		"gil.last_holder":           l.gilHolder,
		"gil.locked":                l.gilLocked,
		"interp.gil_last_holder":    l.interpGILHolder,
		"interp.gil_locked":         l.interpGILLocked,
		"tstate.next":               l.tsNext,
		"tstate.interp":             l.tsInterp,
		"tstate.thread_id":          l.tsThreadID,
		"tstate.native_thread_id":   l.tsNativeID,
		"tstate.cframe":             l.tsCFrame,
		"cframe.current_frame":      l.cfCurrent,
		"frame.back":                l.frameBack,
		"frame.code":                l.frameCode,
		"frame.lasti":               l.frameLasti,
		"iframe.code":               l.iframeCode,
		"iframe.previous":           l.iframePrevious,
		"iframe.instr":              l.iframeInstr,
		"iframe.owner":              l.iframeOwner,
		"iframe.is_entry":           l.iframeIsEntry,
		"code.filename":             l.codeFilename,
		"code.name":                 l.codeName,
		"code.qualname":             l.codeQualname,
		"code.firstlineno":          l.codeFirstLineno,
		"code.linetable":            l.codeLinetable,
		"code.code_adaptive":        l.codeCodeAdaptive,
		"code.firsttraceable":       l.codeFirstTraceable,
		"object.type":               l.objectType,
		"bytes.size":                l.bytesSize,
		"bytes.data":                l.bytesData,
		"unicode.length":            l.unicodeLen,
		"unicode.state":             l.unicodeState,
		"unicode.ascii_size":        l.asciiSize,
		"unicode.compact_size":      l.compactSize,
	}
	if l.minor >= 13 {
		all["tstate.current_frame"] = l.tsFrame
	} else {
		all["tstate.frame"] = l.tsFrame
	}
	out := make(map[string]int64)
	for k, v := range all {
		if v != none {
			out[k] = v
		}
	}
	return out
}

// debugOffsetsSize is how many bytes of _Py_DebugOffsets the 3.13 layout
// covers (cookie through the unicode_object section).
const debugOffsetsSize = 8 * 71

// parseDebugOffsets builds the layout of 3.13 from the _Py_DebugOffsets
// table at the start of _PyRuntime: an 8-byte cookie "xdebugpy", the
// version (PY_VERSION_HEX), free_threaded, then sections of uint64 offsets
// in the order of Include/internal/pycore_runtime.h of 3.13.
func parseDebugOffsets(b []byte) (layout, uint64, error) {
	if len(b) < debugOffsetsSize || string(b[:8]) != "xdebugpy" {
		return layout{}, 0, fmt.Errorf("parse _Py_DebugOffsets: no xdebugpy cookie: %w", errInconsistent)
	}
	u := func(i int) int64 { return int64(binary.LittleEndian.Uint64(b[8*i:])) }
	version := uint64(u(1))
	if version>>24 != 3 || (version>>16)&0xff != 13 {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets: version %#x: %w", version, ErrUnsupported)
	}
	if u(2) != 0 {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets: free-threaded build: %w", ErrUnsupported)
	}
	// Word indexes: 3 runtime_state{size, finalizing, interpreters_head},
	// 6 interpreter_state{size, id, next, threads_head, gc, imports_modules,
	// sysdict, builtins, ceval_gil, gil_runtime_state, _enabled, _locked,
	// _holder}, 19 thread_state{size, prev, next, interp, current_frame,
	// thread_id, native_thread_id, datastack_chunk, status},
	// 28 interpreter_frame{size, previous, executable, instr_ptr,
	// localsplus, owner}, 34 code_object{size, filename, name, qualname,
	// linetable, firstlineno, argcount, localsplusnames, localspluskinds,
	// co_code_adaptive}, 44 pyobject{size, ob_type}, 46 type_object{size,
	// tp_name, tp_repr, tp_flags}, 50 tuple{size, ob_item, ob_size}, 53
	// list{3}, 56 dict{3}, 59 float{2}, 61 long{3}, 64 bytes{size, ob_size,
	// ob_sval}, 67 unicode{size, state, length, asciiobject_size}.
	l := layout{
		minor:             13,
		runtimeInterpHead: u(5), runtimeGILHolder: none, runtimeGILLocked: none,
		interpNext: u(8), interpThreads: u(9), interpGILPtr: none, gilHolder: none, gilLocked: none,
		interpGILLocked: u(17), interpGILHolder: u(18),
		tsNext: u(21), tsInterp: u(22), tsFrame: u(23), tsThreadID: u(24), tsNativeID: u(25),
		tsCFrame: none, cfCurrent: none,
		frameBack: none, frameCode: none, frameLasti: none,
		iframePrevious: u(29), iframeCode: u(30), iframeInstr: u(31), iframeOwner: u(33), iframeIsEntry: none,
		codeFilename: u(35), codeName: u(36), codeQualname: u(37), codeLinetable: u(38), codeFirstLineno: u(39),
		codeCodeAdaptive: u(43), codeFirstTraceable: none,
		objectType: u(45),
		bytesSize:  u(65), bytesData: u(66),
		unicodeState: u(68), unicodeLen: u(69), asciiSize: u(70),
	}
	// PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
	l.compactSize = l.asciiSize + 16
	// Offsets come from another process's memory: bound them, tighter for
	// the structures read as one block.
	for name, v := range l.fields() {
		limit := int64(1 << 20)
		if !strings.HasPrefix(name, "runtime.") && !strings.HasPrefix(name, "interp.") {
			limit = 1 << 12
		}
		if v < 0 || v >= limit {
			return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets: %s offset %d out of range: %w", name, v, errInconsistent)
		}
	}
	return l, version, nil
}
