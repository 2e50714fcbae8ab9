package python

import (
	"encoding/binary"
	"fmt"
)

// none marks a field a version does not have.
const none = -1

// layout holds the offsets of every CPython field the reader uses. For 3.9
// to 3.12 they are hard-coded below, each taken from that version's headers
// (TestOffsetsMatchHeaders compiles testdata/offsets.c against every
// installed version and checks them); from 3.13 they are read from the
// _Py_DebugOffsets table at the start of _PyRuntime.
type layout struct {
	minor    int  // 9 for 3.9
	stackRef bool // _PyInterpreterFrame.f_executable is a tagged _PyStackRef (3.14+)

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

// firstShimOwner is the least _PyInterpreterFrame.owner of a frame that
// runs no code of its own: the shim an evaluation-loop call pushes on
// entry (FRAME_OWNED_BY_CSTACK, 3 on 3.12 and 3.13; 3.14's
// FRAME_OWNED_BY_INTERPRETER, 3, and FRAME_OWNED_BY_CSTACK, 4; 3.15's
// FRAME_OWNED_BY_INTERPRETER, also the base frame at the bottom of every
// thread's stack).
const firstShimOwner = 3

// stackRefTags are the tag bits of a _PyStackRef (3.14+: Py_TAG_BITS);
// the rest is the object's address.
const stackRefTags = 3

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

// debugSchema says where a release keeps, in its _Py_DebugOffsets table,
// each offset the reader uses: word indexes from the table's start (word
// 0 is the cookie "xdebugpy", 1 the version PY_VERSION_HEX, 2
// free_threaded). The table is a struct of sections of uint64 words, each
// section opening with the size of the structure it describes; it grew
// between releases (3.14 added fields to the interpreter, frame and code
// sections and a set section; 3.15 added thread state fields, an exception
// stack item section and one after the type section), so the schema of a
// table is chosen by its version, and what it reads is checked against
// the sizes the table declares.
type debugSchema struct {
	minor                                                             int // first minor version that has this table
	runtimeSize, runtimeInterpHead                                    int
	interpSize, interpNext, interpThreads, gilLocked, gilHolder       int
	tsSize, tsNext, tsInterp, tsFrame, tsThreadID, tsNativeID         int
	frameSize, framePrevious, frameExecutable, frameInstr, frameOwner int
	codeSize, codeFilename, codeName, codeQualname, codeLinetable     int
	codeFirstLineno, codeAdaptive                                     int
	objectSize, objectType                                            int
	bytesSize, bytesObSize, bytesData                                 int
	unicodeSize, unicodeState, unicodeLength, unicodeASCIISize        int
}

// debugSchemas are the _Py_DebugOffsets tables of 3.13, 3.14 and 3.15
// (Include/internal/pycore_debug_offsets.h of each; 3.13's struct is in
// pycore_runtime.h), newest last. A later release is read with the newest
// where its table passes the checks of parseDebugOffsets.
var debugSchemas = []debugSchema{{
	// runtime_state{size, finalizing, interpreters_head},
	// interpreter_state{size, id, next, threads_head, gc, imports_modules,
	// sysdict, builtins, ceval_gil, gil_runtime_state, _enabled, _locked,
	// _holder}, thread_state{size, prev, next, interp, current_frame,
	// thread_id, native_thread_id, datastack_chunk, status},
	// interpreter_frame{size, previous, executable, instr_ptr, localsplus,
	// owner}, code_object{size, filename, name, qualname, linetable,
	// firstlineno, argcount, localsplusnames, localspluskinds,
	// co_code_adaptive}, pyobject{size, ob_type}, type_object{4},
	// tuple{3}, list{3}, dict{3}, float{2}, long{3}, bytes{size, ob_size,
	// ob_sval}, unicode{size, state, length, asciiobject_size}, gc{2}.
	minor:       13,
	runtimeSize: 3, runtimeInterpHead: 5,
	interpSize: 6, interpNext: 8, interpThreads: 9, gilLocked: 17, gilHolder: 18,
	tsSize: 19, tsNext: 21, tsInterp: 22, tsFrame: 23, tsThreadID: 24, tsNativeID: 25,
	frameSize: 28, framePrevious: 29, frameExecutable: 30, frameInstr: 31, frameOwner: 33,
	codeSize: 34, codeFilename: 35, codeName: 36, codeQualname: 37, codeLinetable: 38, codeFirstLineno: 39, codeAdaptive: 43,
	objectSize: 44, objectType: 45,
	bytesSize: 64, bytesObSize: 65, bytesData: 66,
	unicodeSize: 67, unicodeState: 68, unicodeLength: 69, unicodeASCIISize: 70,
}, {
	// interpreter_state adds threads_main after threads_head and
	// code_object_generation, tlbc_generation at its end;
	// interpreter_frame adds stackpointer, tlbc_index; code_object adds
	// co_tlbc; a set section follows list; gen_object, llist_node and
	// debugger_support follow gc.
	minor:       14,
	runtimeSize: 3, runtimeInterpHead: 5,
	interpSize: 6, interpNext: 8, interpThreads: 9, gilLocked: 18, gilHolder: 19,
	tsSize: 22, tsNext: 24, tsInterp: 25, tsFrame: 26, tsThreadID: 27, tsNativeID: 28,
	frameSize: 31, framePrevious: 32, frameExecutable: 33, frameInstr: 34, frameOwner: 36,
	codeSize: 39, codeFilename: 40, codeName: 41, codeQualname: 42, codeLinetable: 43, codeFirstLineno: 44, codeAdaptive: 48,
	objectSize: 50, objectType: 51,
	bytesSize: 74, bytesObSize: 75, bytesData: 76,
	unicodeSize: 77, unicodeState: 78, unicodeLength: 79, unicodeASCIISize: 80,
}, {
	// thread_state has three more frame fields after current_frame
	// (base_frame, last_profiled_frame and one more) and four after status
	// (holds_gil, gil_requested, current_exception, exc_state); an
	// err_stackitem section of one word follows it, and a section of four
	// words follows type_object.
	minor:       15,
	runtimeSize: 3, runtimeInterpHead: 5,
	interpSize: 6, interpNext: 8, interpThreads: 9, gilLocked: 18, gilHolder: 19,
	tsSize: 22, tsNext: 24, tsInterp: 25, tsFrame: 26, tsThreadID: 30, tsNativeID: 31,
	frameSize: 39, framePrevious: 40, frameExecutable: 41, frameInstr: 42, frameOwner: 44,
	codeSize: 47, codeFilename: 48, codeName: 49, codeQualname: 50, codeLinetable: 51, codeFirstLineno: 52, codeAdaptive: 56,
	objectSize: 58, objectType: 59,
	bytesSize: 86, bytesObSize: 87, bytesData: 88,
	unicodeSize: 89, unicodeState: 90, unicodeLength: 91, unicodeASCIISize: 92,
}}

// debugOffsetsSize is how many bytes of _Py_DebugOffsets are read: the
// newest table's last word used, with room for a later release's table
// that grew.
const debugOffsetsSize = 8 * 128

// schemaFor returns the table layout of a release: its own, or the
// newest for a later one; false for one before 3.13.
func schemaFor(minor int) (debugSchema, bool) {
	for i := len(debugSchemas) - 1; i >= 0; i-- {
		if minor >= debugSchemas[i].minor {
			return debugSchemas[i], true
		}
	}
	return debugSchema{}, false
}

// parseDebugOffsets builds the layout of 3.13 and later from the
// _Py_DebugOffsets table at the start of _PyRuntime, b. A table it cannot
// read (free-threaded, or a release whose table does not pass the checks)
// fails with ErrUnsupported; a table that is no table, errInconsistent.
func parseDebugOffsets(b []byte) (layout, uint64, error) {
	if len(b) < 24 || string(b[:8]) != "xdebugpy" {
		return layout{}, 0, fmt.Errorf("parse _Py_DebugOffsets: no xdebugpy cookie: %w", errInconsistent)
	}
	version := binary.LittleEndian.Uint64(b[8:])
	minor := int(version>>16) & 0xff
	s, ok := schemaFor(minor)
	if version>>24 != 3 || !ok {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets: version %#x: %w", version, ErrUnsupported)
	}
	if binary.LittleEndian.Uint64(b[16:]) != 0 {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets: %w", errFreeThreaded)
	}
	if len(b) < 8*(s.unicodeASCIISize+1) {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets: %d bytes: %w", len(b), errInconsistent)
	}
	u := func(i int) int64 { return int64(binary.LittleEndian.Uint64(b[8*i:])) }
	l := layout{
		minor: minor, stackRef: minor >= 14,
		runtimeInterpHead: u(s.runtimeInterpHead), runtimeGILHolder: none, runtimeGILLocked: none,
		interpNext: u(s.interpNext), interpThreads: u(s.interpThreads), interpGILPtr: none, gilHolder: none, gilLocked: none,
		interpGILLocked: u(s.gilLocked), interpGILHolder: u(s.gilHolder),
		tsNext: u(s.tsNext), tsInterp: u(s.tsInterp), tsFrame: u(s.tsFrame), tsThreadID: u(s.tsThreadID), tsNativeID: u(s.tsNativeID),
		tsCFrame: none, cfCurrent: none,
		frameBack: none, frameCode: none, frameLasti: none,
		iframePrevious: u(s.framePrevious), iframeCode: u(s.frameExecutable), iframeInstr: u(s.frameInstr), iframeOwner: u(s.frameOwner), iframeIsEntry: none,
		codeFilename: u(s.codeFilename), codeName: u(s.codeName), codeQualname: u(s.codeQualname), codeLinetable: u(s.codeLinetable), codeFirstLineno: u(s.codeFirstLineno),
		codeCodeAdaptive: u(s.codeAdaptive), codeFirstTraceable: none,
		objectType: u(s.objectType),
		bytesSize:  u(s.bytesObSize), bytesData: u(s.bytesData),
		unicodeState: u(s.unicodeState), unicodeLen: u(s.unicodeLength), asciiSize: u(s.unicodeASCIISize),
	}
	// PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
	l.compactSize = l.asciiSize + 16
	if err := s.check(u); err != nil {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets of %s: %w", hexVersion(version), err)
	}
	return l, version, nil
}

// check tells whether a table read with schema s makes sense: every
// offset lies inside the structure its section declares the size of
// (sizes bounded: the offsets come from another process's memory, and
// frames, thread states and code objects are read as one block), and the
// object header is x86-64's. A table of a later release whose sections
// moved fails it (errUnknownLayout); so does a torn or foreign table.
func (s debugSchema) check(u func(int) int64) error {
	sections := []struct {
		name  string
		size  int
		limit int64
		words []int
	}{
		{"runtime", s.runtimeSize, 1 << 24, []int{s.runtimeInterpHead}},
		{"interpreter", s.interpSize, 1 << 24, []int{s.interpNext, s.interpThreads, s.gilLocked, s.gilHolder}},
		{"thread state", s.tsSize, 1 << 13, []int{s.tsNext, s.tsInterp, s.tsFrame, s.tsThreadID, s.tsNativeID}},
		{"frame", s.frameSize, 1 << 10, []int{s.framePrevious, s.frameExecutable, s.frameInstr, s.frameOwner}},
		{"code", s.codeSize, 1 << 12, []int{s.codeFilename, s.codeName, s.codeQualname, s.codeLinetable, s.codeFirstLineno, s.codeAdaptive}},
		{"bytes", s.bytesSize, 1 << 8, []int{s.bytesObSize, s.bytesData}},
		{"str", s.unicodeSize, 1 << 8, []int{s.unicodeState, s.unicodeLength, s.unicodeASCIISize}},
	}
	for _, sec := range sections {
		size := u(sec.size)
		if size <= 0 || size > sec.limit {
			return fmt.Errorf("%s size %d: %w", sec.name, size, errUnknownLayout)
		}
		for _, w := range sec.words {
			// asciiobject_size is a size, not an offset: it may equal the
			// size of PyUnicodeObject's head.
			if v := u(w); v < 0 || v >= size && w != s.unicodeASCIISize || v > size {
				return fmt.Errorf("%s offset %d (word %d) outside its %d bytes: %w", sec.name, v, w, size, errUnknownLayout)
			}
		}
	}
	if u(s.objectSize) != 16 || u(s.objectType) != 8 || u(s.bytesObSize) != 16 {
		return fmt.Errorf("object header of %d bytes, type at %d: %w", u(s.objectSize), u(s.objectType), errUnknownLayout)
	}
	return nil
}
