// Package stack holds the stacks of a process as captured: frames, threads,
// and the merge of native and Python frames into one stack per thread.
package stack

// Frame is one stack frame. Native frames carry Addr and Module; Python
// frames carry File and Line and have Module "python".
type Frame struct {
	Func   string `json:"func"`             // demangled function name; "??" when unknown
	File   string `json:"file,omitempty"`   // source file, when known
	Line   int    `json:"line,omitempty"`   // source line, when known
	Module string `json:"module,omitempty"` // mapped object path (library, executable, "[vdso]"), or "python"
	Addr   uint64 `json:"addr,omitempty"`   // program counter (native frames)
	// Entry marks a Python frame that is the outermost one run by its
	// native evaluation-loop call (_PyEval_EvalFrameDefault): Merge splits
	// the Python frames into one group per native eval frame at these marks.
	Entry bool `json:"entry,omitempty"`
}

// Thread is one thread's stacks. Every frame list is innermost first, as
// gdb's bt and py-spy's dump print them.
type Thread struct {
	TID    int     `json:"tid"`
	Name   string  `json:"name,omitempty"`   // /proc/PID/task/TID/comm, or the Python thread name
	State  string  `json:"state,omitempty"`  // one-letter kernel state, e.g. "S"
	GIL    bool    `json:"gil,omitempty"`    // this thread holds the GIL
	Native []Frame `json:"native,omitempty"` // native frames
	Python []Frame `json:"python,omitempty"` // Python frames
	Merged []Frame `json:"merged,omitempty"` // native frames with the interpreter's frames replaced by the Python frames they ran
	Error  string  `json:"error,omitempty"`  // why a stack is missing or cut short
}
