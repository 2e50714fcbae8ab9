package ebpf

import (
	"errors"
	"time"
)

// ErrNotPermitted reports that the caller may not load or attach BPF
// programs: it needs root, or CAP_BPF and CAP_PERFMON.
var ErrNotPermitted = errors.New("not permitted to load BPF programs")

// ErrNoProbedSymbols reports that a library named in Options.Libraries
// exports none of the calls the tracer probes.
var ErrNoProbedSymbols = errors.New("exports no probed call")

// Options configure a Tracer.
type Options struct {
	// Libraries are extra library paths (or file names) to probe: vendor
	// libraries renamed beyond recognition. Each is probed for every call
	// it exports. One named by an absolute path is probed by NewTracer,
	// before any process loads it, so that calls made right after the
	// load are not missed (a library found in a process's maps is probed
	// a millisecond or more after it is mapped).
	Libraries []string
	// RingBufferBytes is what the slots of the rings that carry call
	// records to user space may take in all, default DefaultRingBytes:
	// CPUs share up to 16 rings, each a power of two of 64-byte records, at
	// least 4096 (256 KiB), and a 64-byte header.
	// Process records have a ring buffer of their own (256 KiB).
	RingBufferBytes int
	// NoKernelNames leaves out the probes that name kernels
	// (cuModuleGetFunction, cuLibraryGetKernel, cuKernelGetFunction): a
	// launch through the driver's opaque handles is then known by its
	// handle only (a MACA runtime launch or a host function keeps the ELF
	// name of its function).
	NoKernelNames bool
	// NoCopyEventProbes leaves out the probes of asynchronous copies, event
	// records and queries, stream waits and queries and elapsed times: the
	// launches, synchronizes, synchronous copies and collectives stay. Then
	// a copy is no op of its stream's, a kernel is known complete only at a
	// synchronize (not at a ready query of an event after it), streams are
	// not ordered by their waits on each other, and a thread polling an
	// event (PyTorch's NCCL watchdog) is no waiter: its rank's hang is known
	// by its stack alone.
	NoCopyEventProbes bool
	// NoReturnProbes leaves out the uretprobes: queries, synchronize
	// exits, cudaMemcpy's exit, elapsed times and communicator creation
	// are then not reported. Only for measuring their cost.
	NoReturnProbes bool
	// SingleProbes attaches one uprobe per symbol even where the kernel
	// has uprobe_multi links (6.6+), which attach a library's probes in
	// one call per program. For tests of the fallback and for measuring.
	SingleProbes bool
	// slotsPerRing, when set, lowers the floor of each call ring
	// (tests of overflow).
	slotsPerRing int
	// noHold, when set, holds no process at its loads (hold_linux.go): the
	// anchor of BenchmarkHoldImport.
	noHold bool
	// Linger is how long a library no followed process maps keeps its
	// probes before they are detached; default 10 s.
	Linger time.Duration
}

// NoticeKind says what a Notice tells.
type NoticeKind string

// Notice kinds.
const (
	NoticeAttach  NoticeKind = "attach"  // a library's probes are in
	NoticeMissing NoticeKind = "missing" // symbols a library lacks
	NoticeExec    NoticeKind = "exec"    // a followed process called execve
	NoticeExit    NoticeKind = "exit"    // a followed process exited
	NoticeError   NoticeKind = "error"   // something failed (Err)
)

// Notice tells what the tracer did or could not do for a process.
type Notice struct {
	Kind     NoticeKind // NoticeAttach, NoticeMissing, NoticeExec, NoticeExit, NoticeError
	PID      int        // the process concerned; 0 for a library of Options.Libraries probed ahead
	Library  string     // the library file (attach, missing, error)
	Attached []string   // symbols probed (attach)
	Missing  []string   // symbols the library lacks (missing)
	Err      error      // what failed (error)
	Time     time.Time  // when the tracer made the notice (an attach: when the probes were in)
}

// Stats counts what the tracer has seen.
type Stats struct {
	Events    uint64        // events delivered
	Lost      uint64        // events dropped: call records overwritten before they were read, process records that found the ring buffer full
	Processes int           // processes followed now
	Probes    int           // uprobes and uretprobes of libraries followed processes map (those of Options.Libraries stay until Close)
	Idle      int           // uprobes and uretprobes of libraries nobody maps now, kept for Options.Linger
	Holds     uint64        // times a followed process was held at an exec or a load until probed
	Held      time.Duration // how long those holds lasted in all, from the program's stop to the resume
	Wakeups   uint64        // times a ring passed a quarter of its size: the programs then wake the reader's collector if it rests
	// Coalesced counts process records merged with an earlier one of the
	// same process because the follower was a queue behind the reader:
	// each process is still followed and scanned, but a merged record's
	// notice may be missing.
	Coalesced uint64
	// LookupProbes are the kernel lookups' probes (cuKernelGetFunction's
	// entry and return) attached now, counted in Probes (or Idle): they
	// come while names are to be learned and go when nothing new comes
	// (lookups.go).
	LookupProbes int
}

// DefaultRingBytes is Options.RingBufferBytes when it is 0: 8 MiB.
const DefaultRingBytes = 8 << 20
