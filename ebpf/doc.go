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
// Call records reach Go through rings (CPUs share at most 16) in a memory-mapped BPF
// array, read without system calls or wakeups and delivered in time order;
// process records (fork, exec, exit, dlopen) through a BPF ring buffer that
// wakes the reader at once (probes.bpf.c states the contract, calls_linux.go
// and Tracer.Run the reading side).
//
// CUDA calls are probed in the driver only (NVIDIA's runtime makes each
// through it: one trap per call by any path; probes.bpf.c, "One trap per
// call"), MACA's in its runtime. A launch is named, for the driver's
// opaque CUfunction and CUkernel handles, by the name the process looked
// the handle up with (cuModuleGetFunction, cuLibraryGetKernel, and
// cuKernelGetFunction from a named CUkernel), else by the ELF symbol at its
// function pointer (a MACA runtime launch's host stub, a host function).
package ebpf
