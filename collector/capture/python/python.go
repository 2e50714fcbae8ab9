// Package python reads the Python stacks of a running CPython process
// (3.9 to 3.15, default builds) straight from its memory with
// process_vm_readv, without stopping it: it finds _PyRuntime through the
// ELF symbols of libpython or the interpreter's executable, then walks
// interpreters, thread states and frames, and decodes function, file and
// line of every frame. The layout of 3.9 to 3.12 is a table per version;
// from 3.13 on it is read from the _Py_DebugOffsets table at the start of
// _PyRuntime, so a later release whose table still makes sense is read
// too. An interpreter the reader cannot read fails Open with an
// *UnreadError, whose message is the one line a dump carries for it
// ("Python 3.16.0a1: frames not read: unknown layout").
//
// Reads race with the running target, so every pointer is checked (object
// types against PyCode_Type and friends, sizes, cycles) and a walk that
// finds an inconsistency is retried.
package python

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

var (
	// ErrNotPython reports a process with no CPython interpreter in it.
	ErrNotPython = errors.New("not a CPython process")
	// ErrUnsupported reports a CPython version the reader does not know.
	ErrUnsupported = errors.New("unsupported CPython version")
	// errInconsistent reports memory that changed or made no sense while
	// being read; the walk is retried.
	errInconsistent = errors.New("inconsistent interpreter state")
	// errUnknownLayout reports an interpreter whose layout the reader
	// does not know, or whose _Py_DebugOffsets do not make sense.
	errUnknownLayout = fmt.Errorf("unknown layout: %w", ErrUnsupported)
	// errFreeThreaded reports a free-threaded build (python3.14t), whose
	// objects and thread-local bytecode the reader does not read.
	errFreeThreaded = fmt.Errorf("free-threaded build: %w", ErrUnsupported)
)

// UnreadError is an interpreter found in a process whose frames the reader
// cannot read: its version and why. It wraps ErrUnsupported.
type UnreadError struct {
	PID     int    // the process
	Version string // "3.16.0a1"; "" where not even that could be read
	Err     error  // why, wrapping ErrUnsupported
}

// Error is the line a dump carries: "Python 3.16.0a1: frames not read:
// unknown layout".
func (e *UnreadError) Error() string {
	v := e.Version
	if v == "" {
		v = "(version unknown)"
	}
	reason := e.Err.Error()
	switch {
	case errors.Is(e.Err, errFreeThreaded):
		reason = "free-threaded build"
	case errors.Is(e.Err, errUnknownLayout), errors.Is(e.Err, ErrUnsupported):
		reason = "unknown layout"
	}
	return fmt.Sprintf("Python %s: frames not read: %s", v, reason)
}

func (e *UnreadError) Unwrap() error { return e.Err }

// Thread is one Python thread state with its frames.
type Thread struct {
	TID    int           // native thread id (0 when the thread is gone)
	Ident  uint64        // threading.get_ident(): the thread's pthread_t
	Name   string        // /proc/PID/task/TID/comm
	GIL    bool          // holds the GIL
	Frames []stack.Frame // innermost first; Module "python"; Entry marks the outermost frame of each evaluation-loop call
	Error  string        // why Frames may be cut short

	codes []frameCode // of Frames, until Finish names them
}

// Reader reads the Python stacks of one process. It is safe for use by one
// goroutine at a time; calls are serialized.
type Reader struct {
	mu      sync.Mutex
	pid     int
	mem     memory // pid's
	l       layout
	version string
	path    string // file that defines _PyRuntime
	runtime uint64 // address of _PyRuntime in the process
	types   map[string]uint64
	codes   map[uint64]*codeInfo // decoded code objects, revalidated once per walk
	checked map[uint64]*codeInfo // code objects validated during the current walk
	tidOff  int64                // offset of tid in glibc's struct pthread, 0 until found
}

// Open finds the interpreter in process pid.
func Open(pid int) (*Reader, error) {
	maps, err := procfs.Maps(pid)
	if err != nil {
		return nil, fmt.Errorf("read maps of %d: %w", pid, err)
	}
	return OpenMapped(pid, maps)
}

// OpenMapped is Open with pid's mappings already read (/proc/PID/maps of
// a framework's process runs to thousands of lines, milliseconds to read).
func OpenMapped(pid int, maps []procfs.Mapping) (*Reader, error) {
	loc, err := locate(pid, maps)
	if err != nil {
		return nil, err
	}
	r := &Reader{pid: pid, mem: processMemory(pid), path: loc.path, runtime: loc.runtime + loc.bias,
		types: map[string]uint64{}, codes: map[uint64]*codeInfo{}, checked: map[uint64]*codeInfo{}}
	for k, v := range loc.types {
		if v != 0 {
			r.types[k] = v + loc.bias
		}
	}
	head := make([]byte, debugOffsetsSize)
	n, err := r.mem.readPartial(r.runtime, head)
	if err == nil && n < 8 {
		err = fmt.Errorf("%d bytes: %w", n, errInconsistent)
	}
	if err != nil {
		return nil, fmt.Errorf("read _PyRuntime of %d: %w", pid, err)
	}
	if string(head[:8]) == "xdebugpy" {
		l, v, err := parseDebugOffsets(head[:n])
		switch {
		case errors.Is(err, ErrUnsupported):
			return nil, &UnreadError{PID: pid, Version: hexVersion(v), Err: err}
		case err != nil:
			return nil, fmt.Errorf("open python %d: %w", pid, err)
		}
		r.l, r.version = l, hexVersion(v)
		return r, nil
	}
	minor := -1
	switch {
	case loc.version != 0:
		minor = int(loc.version>>16) & 0xff
		r.version = hexVersion(loc.version)
	case loc.nameVers != "":
		fmt.Sscanf(loc.nameVers, "3.%d", &minor)
		r.version = loc.nameVers
		if loc.rodataV != "" {
			r.version = loc.rodataV
		} else if v := r.bufferVersion(loc); v != "" {
			r.version = v
		}
	}
	l, ok := layouts[minor]
	if !ok {
		// 3.13 and later without their table, or before 3.9.
		return nil, &UnreadError{PID: pid, Version: r.version,
			Err: fmt.Errorf("open python %d (%s): %w", pid, loc.path, errUnknownLayout)}
	}
	r.l = l
	return r, nil
}

// memory is the target's memory, as the reader reads it.
type memory interface {
	// read reads len(buf) bytes at addr, all or an error.
	read(addr uint64, buf []byte) error
	// readPartial reads up to len(buf) bytes at addr, as far as they are
	// mapped, and returns how many.
	readPartial(addr uint64, buf []byte) (int, error)
}

// processMemory reads the memory of the process it is the id of.
type processMemory int

func (p processMemory) read(addr uint64, buf []byte) error { return readMem(int(p), addr, buf) }
func (p processMemory) readPartial(addr uint64, buf []byte) (int, error) {
	return readPartial(int(p), addr, buf)
}

// hexVersion spells a PY_VERSION_HEX value: 0x030b07f0 is "3.11.7".
func hexVersion(v uint64) string {
	s := fmt.Sprintf("%d.%d.%d", v>>24&0xff, v>>16&0xff, v>>8&0xff)
	if level := v >> 4 & 0xf; level != 0xf {
		s += fmt.Sprintf("%s%d", map[uint64]string{0xa: "a", 0xb: "b", 0xc: "rc"}[level], v&0xf)
	}
	return s
}

// PID is the process read.
func (r *Reader) PID() int { return r.pid }

// Version is the interpreter's version, "3.11.7" (only "3.10" where the
// micro version could not be found).
func (r *Reader) Version() string { return r.version }

// Threads reads every thread of every interpreter (Walk, then Finish).
func (r *Reader) Threads() ([]Thread, error) {
	ts, err := r.Walk()
	if err != nil {
		return nil, err
	}
	if err := r.Finish(ts); err != nil {
		return nil, err
	}
	return ts, nil
}

// Walk reads what changes as the target runs, to be read while its threads
// are stopped: every thread of every interpreter, its thread id where the
// thread state holds it (3.11+), and its frames, each as the header of its
// code object and where the frame is in it; Finish names them. A walk
// that meets inconsistent memory (the target ran meanwhile) is retried a
// few times.
func (r *Reader) Walk() ([]Thread, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		var ts []Thread
		clear(r.checked)
		if ts, err = r.threads(); err == nil {
			return ts, nil
		}
		if !errors.Is(err, errInconsistent) {
			break
		}
	}
	if _, serr := procfs.ReadStat(r.pid); serr != nil {
		return nil, fmt.Errorf("read python threads of %d: %w", r.pid, serr)
	}
	return nil, fmt.Errorf("read python threads of %d: %w", r.pid, err)
}

// Finish completes what Walk read, once the threads go on: it reads what
// does not change (the file name, name and line table of each code object
// new to the reader) and names each frame, and fills each thread's TID
// (3.9, 3.10: from glibc's struct pthread; 0 for a thread that ended
// meanwhile) and name (/proc). On a first dump of a torch rank, that took
// the Python part of the stop from 1.6-1.9 ms to 1.1-1.3.
func (r *Reader) Finish(ts []Thread) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range ts {
		r.finish(&ts[i])
	}
	if err := r.nameThreads(ts); err != nil {
		return fmt.Errorf("name python threads of %d: %w", r.pid, err)
	}
	return nil
}

// versionPrefix returns the version at the start of b: 3.MINOR.MICRO, a
// pre-release tag (a1, b2, rc1) and a "+" (a build from a branch) if
// there, as the regular expression ^3\.\d+\.\d+((a|b|rc)\d+)?\+? would
// find it (by hand: compiling that took a third of a millisecond of
// every start of a one-shot dump binary); nil when there is none.
func versionPrefix(b []byte) []byte {
	digits := func(i int) int { // the end of the digits from i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i
	}
	if len(b) < 2 || b[0] != '3' || b[1] != '.' {
		return nil
	}
	i := digits(2)
	if i == 2 || i >= len(b) || b[i] != '.' {
		return nil
	}
	j := digits(i + 1)
	if j == i+1 {
		return nil
	}
	for _, tag := range []string{"a", "b", "rc"} {
		if k := j + len(tag); bytes.HasPrefix(b[j:], []byte(tag)) && digits(k) > k {
			j = digits(k)
			break
		}
	}
	if j < len(b) && b[j] == '+' {
		j++
	}
	return b[:j]
}

// bufferVersion reads the version from Py_GetVersion's static buffer,
// which the interpreter fills at start ("3.9.18 (main, ...) [GCC ...]").
func (r *Reader) bufferVersion(loc *located) string {
	if loc.buffer == 0 {
		return ""
	}
	b := make([]byte, 32)
	if err := r.mem.read(loc.buffer+loc.bias, b); err != nil {
		return ""
	}
	v := string(versionPrefix(b))
	if !strings.HasPrefix(v, loc.nameVers+".") {
		return ""
	}
	return v
}
