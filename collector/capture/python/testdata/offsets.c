// offsets.c prints offsetof() of every CPython field the python package
// reads, compiled against one interpreter's own headers. The Go test
// TestOffsetsMatchHeaders builds it per installed version and checks the
// printed values equal the table in offsets.go.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <internal/pycore_runtime.h>
#include <internal/pycore_interp.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#include <internal/pycore_code.h>
#else
#include <frameobject.h>
#endif
#include <internal/pycore_gil.h>

#define P(name, value) printf("%s %ld\n", name, (long)(value))

int main(void) {
	P("runtime.interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX < 0x030C0000
	P("runtime.gil_last_holder", offsetof(_PyRuntimeState, ceval.gil.last_holder));
	P("runtime.gil_locked", offsetof(_PyRuntimeState, ceval.gil.locked));
#endif
	P("interp.next", offsetof(PyInterpreterState, next));
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
	P("interp.ceval_gil", offsetof(PyInterpreterState, ceval.gil));
	P("gil.last_holder", offsetof(struct _gil_runtime_state, last_holder));
	P("gil.locked", offsetof(struct _gil_runtime_state, locked));
#endif
#if PY_VERSION_HEX >= 0x030B0000
	P("interp.threads_head", offsetof(PyInterpreterState, threads.head));
#else
	P("interp.threads_head", offsetof(PyInterpreterState, tstate_head));
#endif
	P("tstate.next", offsetof(PyThreadState, next));
	P("tstate.interp", offsetof(PyThreadState, interp));
	P("tstate.thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
	P("tstate.native_thread_id", offsetof(PyThreadState, native_thread_id));
#if PY_VERSION_HEX >= 0x030D0000
	P("tstate.current_frame", offsetof(PyThreadState, current_frame));
	P("iframe.code", offsetof(_PyInterpreterFrame, f_executable));
	P("iframe.instr", offsetof(_PyInterpreterFrame, instr_ptr));
	P("interp.gil_last_holder", offsetof(PyInterpreterState, _gil.last_holder));
	P("interp.gil_locked", offsetof(PyInterpreterState, _gil.locked));
#else
	P("tstate.cframe", offsetof(PyThreadState, cframe));
	P("cframe.current_frame", offsetof(_PyCFrame, current_frame));
	P("iframe.code", offsetof(_PyInterpreterFrame, f_code));
	P("iframe.instr", offsetof(_PyInterpreterFrame, prev_instr));
	P("code.firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
#endif
	P("iframe.previous", offsetof(_PyInterpreterFrame, previous));
	P("iframe.owner", offsetof(_PyInterpreterFrame, owner));
#if PY_VERSION_HEX < 0x030C0000
	P("iframe.is_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
	P("code.qualname", offsetof(PyCodeObject, co_qualname));
	P("code.linetable", offsetof(PyCodeObject, co_linetable));
	P("code.code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#else
	P("tstate.frame", offsetof(PyThreadState, frame));
	P("frame.back", offsetof(PyFrameObject, f_back));
	P("frame.code", offsetof(PyFrameObject, f_code));
	P("frame.lasti", offsetof(PyFrameObject, f_lasti));
#if PY_VERSION_HEX >= 0x030A0000
	P("code.linetable", offsetof(PyCodeObject, co_linetable));
#else
	P("code.linetable", offsetof(PyCodeObject, co_lnotab));
#endif
#endif
	P("code.filename", offsetof(PyCodeObject, co_filename));
	P("code.name", offsetof(PyCodeObject, co_name));
	P("code.firstlineno", offsetof(PyCodeObject, co_firstlineno));
	P("object.type", offsetof(PyObject, ob_type));
	P("bytes.size", offsetof(PyVarObject, ob_size));
	P("bytes.data", offsetof(PyBytesObject, ob_sval));
	P("unicode.length", offsetof(PyASCIIObject, length));
	P("unicode.state", offsetof(PyASCIIObject, state));
	P("unicode.ascii_size", sizeof(PyASCIIObject));
	P("unicode.compact_size", sizeof(PyCompactUnicodeObject));
	return 0;
}
