package python

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
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

// debugTable is the word order of one release's _Py_DebugOffsets, as
// its header declares the struct: after the cookie "xdebugpy" (word 0),
// the version, PY_VERSION_HEX (1), and free_threaded (2), sections of
// uint64 words, most opening with the size of the structure whose offsets
// they hold. The struct grew between releases, in the middle as well as
// at the end, so the table of a release is chosen by its version, and
// what is read is checked against the sizes it declares.
type debugTable struct {
	minor int // first minor version with this table
	// sections, "section: field field ...; ...": the header's names; "-"
	// is a field the reader does not use.
	sections string
}

// Sections of _Py_DebugOffsets that several releases share.
const (
	runtimeSection = `runtime_state: size finalizing interpreters_head;`
	// 3.14 added threads_main, code_object_generation and tlbc_generation.
	interp314Section = `interpreter_state: size id next threads_head threads_main gc imports_modules sysdict
		builtins ceval_gil gil_runtime_state gil_runtime_state_enabled gil_runtime_state_locked
		gil_runtime_state_holder code_object_generation tlbc_generation;`
	thread313Section = `thread_state: size prev next interp current_frame thread_id native_thread_id
		datastack_chunk status;`
	// 3.14 added stackpointer and tlbc_index, and co_tlbc.
	frameCode314Sections = `interpreter_frame: size previous executable instr_ptr localsplus owner stackpointer
		tlbc_index;
	code_object: size filename name qualname linetable firstlineno argcount localsplusnames
		localspluskinds co_code_adaptive co_tlbc;`
	typeSections = `pyobject: size ob_type;
	type_object: size tp_name tp_repr tp_flags;`
	// 3.14 added set_object.
	objects314Sections = `tuple_object: size ob_item ob_size;
	list_object: size ob_item ob_size;
	set_object: size used table mask;
	dict_object: size ma_keys ma_values;
	float_object: size ob_fval;
	long_object: size lv_tag ob_digit;
	bytes_object: size ob_size ob_sval;
	unicode_object: size state length asciiobject_size;`
)

// debugTables are the tables of 3.13, 3.14 and 3.15 (3.13's in
// Include/internal/pycore_runtime.h, later ones in pycore_debug_offsets.h),
// oldest first. A later release is read with the newest where its table
// passes the checks of parseDebugOffsets.
var debugTables = []debugTable{
	{13, runtimeSection + `
	interpreter_state: size id next threads_head gc imports_modules sysdict builtins ceval_gil
		gil_runtime_state gil_runtime_state_enabled gil_runtime_state_locked gil_runtime_state_holder;` +
		thread313Section + `
	interpreter_frame: size previous executable instr_ptr localsplus owner;
	code_object: size filename name qualname linetable firstlineno argcount localsplusnames
		localspluskinds co_code_adaptive;` + typeSections + `
	tuple_object: size ob_item ob_size;
	list_object: size ob_item ob_size;
	dict_object: size ma_keys ma_values;
	float_object: size ob_fval;
	long_object: size lv_tag ob_digit;
	bytes_object: size ob_size ob_sval;
	unicode_object: size state length asciiobject_size;
	gc: size collecting`},
	{14, runtimeSection + interp314Section + thread313Section + frameCode314Sections + typeSections +
		objects314Sections + `
	gc: size collecting;
	gen_object: size gi_name gi_iframe gi_frame_state;
	llist_node: next prev;
	debugger_support: eval_breaker remote_debugger_support remote_debugging_enabled
		debugger_pending_call debugger_script_path debugger_script_path_size`},
	// 3.15: thread_state has three more words after current_frame and
	// four after status; an err_stackitem section follows it, and a
	// section of four words follows type_object.
	{15, runtimeSection + interp314Section + `
	thread_state: size prev next interp current_frame - - - thread_id native_thread_id datastack_chunk
		status - - - -;
	err_stackitem: exc_value;` + frameCode314Sections + typeSections + `
	-: - - - -;` + objects314Sections},
}

// debugFields are the fields of _Py_DebugOffsets the reader uses.
var debugFields = []string{
	"runtime_state.interpreters_head",
	"interpreter_state.next", "interpreter_state.threads_head",
	"interpreter_state.gil_runtime_state_locked", "interpreter_state.gil_runtime_state_holder",
	"thread_state.next", "thread_state.interp", "thread_state.current_frame",
	"thread_state.thread_id", "thread_state.native_thread_id",
	"interpreter_frame.previous", "interpreter_frame.executable", "interpreter_frame.instr_ptr", "interpreter_frame.owner",
	"code_object.filename", "code_object.name", "code_object.qualname", "code_object.linetable",
	"code_object.firstlineno", "code_object.co_code_adaptive",
	"pyobject.size", "pyobject.ob_type",
	"bytes_object.ob_size", "bytes_object.ob_sval",
	"unicode_object.state", "unicode_object.length", "unicode_object.asciiobject_size",
}

// words returns the word index of every "section.field" of the table.
func (t debugTable) words() map[string]int {
	out := map[string]int{}
	i := 3
	for _, sec := range strings.Split(t.sections, ";") {
		name, fields, _ := strings.Cut(sec, ":")
		name = strings.TrimSpace(name)
		for _, f := range strings.Fields(fields) {
			if f != "-" {
				out[name+"."+f] = i
			}
			i++
		}
	}
	return out
}

// debugWords are the word indexes of debugTables, worked out once.
var debugWords = sync.OnceValue(func() []map[string]int {
	out := make([]map[string]int, len(debugTables))
	for i, t := range debugTables {
		out[i] = t.words()
	}
	return out
})

// tableFor returns the word indexes of a release's table: its own, or the
// newest for a later one; false for one before 3.13.
func tableFor(minor int) (map[string]int, bool) {
	for i := len(debugTables) - 1; i >= 0; i-- {
		if minor >= debugTables[i].minor {
			return debugWords()[i], true
		}
	}
	return nil, false
}

// debugOffsetsSize is how many bytes of _Py_DebugOffsets are read: the
// newest table's last word used, with room for a later release's table
// that grew.
const debugOffsetsSize = 8 * 128

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
	w, ok := tableFor(minor)
	if version>>24 != 3 || !ok {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets: version %#x: %w", version, ErrUnsupported)
	}
	if binary.LittleEndian.Uint64(b[16:]) != 0 {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets: %w", errFreeThreaded)
	}
	if err := checkDebugOffsets(b, w); err != nil {
		return layout{}, version, fmt.Errorf("parse _Py_DebugOffsets of %s: %w", hexVersion(version), err)
	}
	u := func(field string) int64 { return int64(binary.LittleEndian.Uint64(b[8*w[field]:])) }
	l := layout{
		minor: minor, stackRef: minor >= 14,
		runtimeInterpHead: u("runtime_state.interpreters_head"), runtimeGILHolder: none, runtimeGILLocked: none,
		interpNext: u("interpreter_state.next"), interpThreads: u("interpreter_state.threads_head"),
		interpGILPtr: none, gilHolder: none, gilLocked: none,
		interpGILLocked: u("interpreter_state.gil_runtime_state_locked"), interpGILHolder: u("interpreter_state.gil_runtime_state_holder"),
		tsNext: u("thread_state.next"), tsInterp: u("thread_state.interp"), tsFrame: u("thread_state.current_frame"),
		tsThreadID: u("thread_state.thread_id"), tsNativeID: u("thread_state.native_thread_id"),
		tsCFrame: none, cfCurrent: none,
		frameBack: none, frameCode: none, frameLasti: none,
		iframePrevious: u("interpreter_frame.previous"), iframeCode: u("interpreter_frame.executable"),
		iframeInstr: u("interpreter_frame.instr_ptr"), iframeOwner: u("interpreter_frame.owner"), iframeIsEntry: none,
		codeFilename: u("code_object.filename"), codeName: u("code_object.name"), codeQualname: u("code_object.qualname"),
		codeLinetable: u("code_object.linetable"), codeFirstLineno: u("code_object.firstlineno"),
		codeCodeAdaptive: u("code_object.co_code_adaptive"), codeFirstTraceable: none,
		objectType: u("pyobject.ob_type"),
		bytesSize:  u("bytes_object.ob_size"), bytesData: u("bytes_object.ob_sval"),
		unicodeState: u("unicode_object.state"), unicodeLen: u("unicode_object.length"), asciiSize: u("unicode_object.asciiobject_size"),
	}
	// PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
	l.compactSize = l.asciiSize + 16
	return l, version, nil
}

// sizeLimits bound the structure sizes a table may declare (the offsets
// come from another process's memory; frames, thread states and code
// objects are read as one block).
var sizeLimits = map[string]int64{
	"runtime_state": 1 << 24, "interpreter_state": 1 << 24, "thread_state": 1 << 13,
	"interpreter_frame": 1 << 10, "code_object": 1 << 12, "pyobject": 1 << 8,
	"bytes_object": 1 << 8, "unicode_object": 1 << 8,
}

// checkDebugOffsets tells whether the table b, read with the word indexes
// w, makes sense: every field the reader uses lies inside the structure
// whose size its section declares, and the object header is x86-64's. A
// later release's table whose sections moved fails it (errUnknownLayout),
// as does a torn or foreign one.
func checkDebugOffsets(b []byte, w map[string]int) error {
	for _, field := range debugFields {
		sec, name, _ := strings.Cut(field, ".")
		i, ok := w[field]
		if !ok {
			return fmt.Errorf("no %s: %w", field, errUnknownLayout)
		}
		if 8*(max(i, w[sec+".size"])+1) > len(b) {
			return fmt.Errorf("%s beyond the %d bytes read: %w", field, len(b), errInconsistent)
		}
		v, size := int64(binary.LittleEndian.Uint64(b[8*i:])), int64(binary.LittleEndian.Uint64(b[8*w[sec+".size"]:]))
		if size <= 0 || size > sizeLimits[sec] {
			return fmt.Errorf("%s size %d: %w", sec, size, errUnknownLayout)
		}
		// A size (asciiobject_size, the head of PyUnicodeObject) may
		// equal its structure's; an offset lies inside it.
		if v < 0 || v > size || v == size && !strings.HasSuffix(name, "size") {
			return fmt.Errorf("%s %d outside its %d bytes: %w", field, v, size, errUnknownLayout)
		}
	}
	u := func(field string) uint64 { return binary.LittleEndian.Uint64(b[8*w[field]:]) }
	if u("pyobject.size") != 16 || u("pyobject.ob_type") != 8 || u("bytes_object.ob_size") != 16 {
		return fmt.Errorf("object header of %d bytes, type at %d: %w", u("pyobject.size"), u("pyobject.ob_type"), errUnknownLayout)
	}
	return nil
}
