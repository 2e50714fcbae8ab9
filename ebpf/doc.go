// Package ebpf captures CUDA, NCCL, MACA and MCCL calls of a process tree
// with eBPF uprobes and hands them on as decoded timer.Events.
//
// A Tracer loads the programs of probes.bpf.c once, follows the processes it
// is told to (and their descendants, through scheduler hooks in the kernel),
// finds their vendor libraries in /proc/PID/maps by file name, by exported
// symbol, or as named in Options.Libraries, and attaches to each library
// file once, whoever maps it; the BPF programs record only followed thread
// groups. Libraries mapped later (dlopen) are found on the return of the
// mmap that maps them, and probed from then on; those named by path in
// Options.Libraries are probed before any process loads them. When the last
// process holding a library exits, its probes go.
//
// Call records reach Go through rings (CPUs share at most 16) in a
// memory-mapped BPF array, read without system calls or wakeups and
// delivered in time order (internal/ring reads that memory); process
// records (fork, exec, exit, dlopen) through a BPF ring buffer that wakes
// the reader at once (probes.bpf.c states the contract, reader_linux.go
// the reading side).
//
// # Two halves
//
// A Tracer is a facade over two halves that share no lock:
//
//   - the reader (reader_linux.go) owns the call rings and the process ring
//     buffer, the wakeups, the decode, the kernel names (kernelNames) and
//     the communicators' ids (commIDs). It runs on Run's goroutine, with
//     a collector goroutine that drains the call rings (ring.Rings.Poll),
//     and delivers every event. It never takes the follower's lock, never
//     reads /proc to follow a process, never reads a library to probe it
//     and never attaches or detaches: a scan there once cost an H100
//     thousands of records at each attach. (Naming a launch may read the
//     process's maps and symbol tables, on its first unnamed launch and
//     again after a library load, and forgetting a process walks the
//     names map: kernelNames.)
//   - the follower (follower_linux.go) owns following: the processes and
//     the libraries they map, the reads of their maps and symbol tables
//     (scans), the probes (attach_linux.go), the kernel lookups' probes
//     (lookups_linux.go) and the holds' bookkeeping (hold_linux.go). Its
//     state is under its own lock, taken by its goroutine (started by Run,
//     ended before Run returns) and by Follow, Stats, Probed and Close on
//     the callers' goroutines.
//
// What crosses between them goes through a mailbox (mailbox.go), whose
// lock only moves values in and out:
//
//   - reader to follower: each process record (fork, exec, exit, a
//     loader's change of libraries, and whether the programs hold the
//     process until it is probed), in order, on a bounded queue that never
//     blocks the reader: when it is full, records are merged per process
//     (an exit ends what came before; a load after a fork or exec is
//     covered by its scan) into a backlog the follower takes after the
//     queue, counted in Stats.Coalesced; the kernel lookups' news
//     (names learned, handles never named), merged until taken; and
//     whether the reader found the process ring buffer empty, for the
//     scans that wait for a burst of loads to end and the holds whose
//     record never came;
//   - follower to reader: the notices, which the reader hands to Run's
//     onNotice, woken for them.
//
// The holds' maps (holds, hold_linux.go) have a lock of their own: the
// reader beats there, saying for how long processes may be held (no
// longer than the follower is seen at work), and Close lets every held
// process go there even while the follower is stuck. The process and the
// kernel-name records the reader delivers and the follower handles are
// the same; each half forgets what an exec or an exit ends on its own
// side (the reader its names and communicators, the follower the
// process's libraries).
//
// CUDA calls are probed in the driver only (NVIDIA's runtime makes each
// through it: one trap per call by any path; probes.bpf.c, "One trap per
// call"), MACA's in its runtime. A launch is named, for the driver's
// opaque CUfunction and CUkernel handles, by the name the process looked
// the handle up with (cuModuleGetFunction, cuLibraryGetKernel, and
// cuKernelGetFunction from a named CUkernel), else by the ELF symbol at its
// function pointer (a MACA runtime launch's host stub, a host function).
package ebpf
