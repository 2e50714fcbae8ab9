// Package native captures the native stacks of every thread of a live
// process: it stops the threads briefly with ptrace (PTRACE_SEIZE and
// PTRACE_INTERRUPT, no signal injected), copies their registers and stack
// memory, resumes them, and unwinds the copies afterwards with the DWARF call
// frame information of each module (frame pointers where there is none).
package native

import (
	"errors"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
)

// Sentinel errors of Dump.
var (
	ErrNoProcess    = errors.New("no such process")
	ErrNotPermitted = errors.New("not permitted to trace the process")
	ErrExited       = errors.New("process exited during the dump")
)

// Defaults of Options.
const (
	DefaultMaxStop  = 2 * time.Second
	DefaultMaxStack = 512 << 10
	MaxFrames       = 4096
)

// Options tune one dump.
type Options struct {
	MaxStop      time.Duration // bound on how long threads stay stopped; DefaultMaxStop when 0
	MaxStack     int           // bytes of stack copied per thread; DefaultMaxStack when 0
	WhileStopped func() error  // runs while every thread is stopped (the Python read)
	// ReturnAddress gives the return address a uretprobe replaced with the
	// kernel's trampoline at stack address slot of thread tid (see
	// ebpf.Tracer.ReturnAddress). Without it a stack ends at the trampoline.
	ReturnAddress ReturnAddressFunc
	// Process is pid's resolver from the unwinder's cache, when the caller
	// has made it (its mappings read); nil: Dump reads them.
	Process *symbols.Process
	// Stragglers, when set, is how much longer, after the stopped threads
	// were copied and let go, the dump waits for those that did not stop
	// within half of MaxStop (a thread spinning on a loaded machine,
	// waiting for a CPU to reach its stop): each is copied as it stops and
	// let go at once, the others running meanwhile.
	Stragglers time.Duration
	// Lines names frames from the debug information too, as gdb does:
	// source lines, inlined calls, functions left by tail calls. Without
	// it frames are named from the symbol tables alone, as eu-stack does,
	// and no debug information (.debug_info, .debug_line) is read.
	Lines bool
}

// ReturnAddressFunc looks up the return address that a uretprobe moved out
// of stack address slot of thread tid.
type ReturnAddressFunc func(tid int, slot uint64) (uint64, bool)

// Result is the native capture of one process.
type Result struct {
	Threads    []stack.Thread // Native filled, innermost first; Error says why a stack is missing or short
	StoppedFor time.Duration  // longest time any thread was stopped
	State      string         // process state when the dump began, e.g. "S (sleeping)"
	// WhileStoppedErr is what Options.WhileStopped returned; it does not fail the dump.
	WhileStoppedErr error
	// Partial is set when MaxStop ran out before every thread stopped.
	Partial bool
	// Damage says, for each file on the stacks whose headers lie or whose
	// debug file is not its own, what was left out and where its names
	// came from ("path: what", symbols.Process.Damage).
	Damage []string
	// Released is CLOCK_MONOTONIC ns (the probes' clock) just after the
	// stopped threads were let go, before their copies were unwound: the
	// instant the stacks show, as near as the caller can order a probe
	// event against it (no call was made while they were stopped). 0 when
	// nothing was stopped.
	Released int64
}

// Unwinder dumps native stacks. Parsed files are cached in its symbol cache
// across dumps. It is safe for concurrent use.
type Unwinder struct {
	cache *symbols.Cache
}

// NewUnwinder returns an unwinder resolving symbols through cache (a new
// cache when nil).
func NewUnwinder(cache *symbols.Cache) *Unwinder {
	if cache == nil {
		cache = symbols.NewCache()
	}
	return &Unwinder{cache: cache}
}

// Cache returns the unwinder's symbol cache.
func (u *Unwinder) Cache() *symbols.Cache { return u.cache }
