//go:build ignore

/*
 * probes.bpf.c: uprobes on the CUDA runtime and driver, NCCL, MACA and MCCL
 * calls listed below (where each argument sits), and the scheduler hooks
 * that follow a process tree. Loaded by tracer_linux.go; bpf2go turns it
 * into probes_x86_bpfel.o.
 *
 * Contract with the Go side
 * -------------------------
 * Every record is one `struct call` (below, exported to Go with bpf2go
 * -type call, so the layouts cannot drift), 64 bytes: one cache line, the
 * one line a launch writes. A header (seq, time, pid, tid, kind, phase,
 * vendor, op, ret) and four payload fields whose meaning depends on the
 * kind (decode in decode_linux.go); ret is the return value of an exit
 * record (and of a query) and, in the entry records of launches and
 * collectives, which have none, holds a word of theirs:
 *
 *   kind              stream      handle          handle2           size            ret (entry)
 *   LAUNCH            stream      func            grid x|y<<32|z<<48 shmem          block x|y<<11|z<<22
 *   GRAPH_LAUNCH      stream      graph exec
 *   MEMCPY(_ASYNC)    stream      -               copy kind         bytes
 *   EVENT_RECORD      stream      event
 *   EVENT_QUERY/SYNC  -           event
 *   STREAM_SYNC/QUERY stream
 *   STREAM_WAIT_EVENT stream      event
 *   EVENT_ELAPSED     -           start event     end               float bits of the ms
 *   COMM_INIT         comm_id[0]  comm_id[1]      comm              nranks|rank<<32
 *     a split (op 1)  -           parent comm     comm              color|key<<32
 *   COMM_DESTROY      -           -               comm
 *   COLLECTIVE        stream      dtype|redop<<32 comm              count           peer/root (-1: none)
 *   CALL              1st arg                                                       (op: the call's id)
 *   EV_FORK           -           parent pid
 *
 * A launch's dimensions are packed to CUDA's limits (grid x 32 bits, y
 * and z 16; block x and y 11 bits, z 10): a launch beyond them fails, and
 * its record keeps the low bits. kind holds an enum kind, whose values are
 * timer.Kind's, or an enum proc_kind (EV_*, >= 100, beyond every
 * timer.Kind). Both enums are exported too (bpf2go -type kind -type
 * proc_kind); kinds_linux_test.go checks them against timer. Fields a kind
 * does not use are zero.
 *
 * Two transports:
 *   - Call records (every uprobe and uretprobe) go into rings in the
 *     BPF_F_MMAPABLE array `calls` (CPU c writes into ring c & ring_mask),
 *     which Go maps and reads without system calls (calls_linux.go). A
 *     record is reserved with one atomic fetch-and-add on its ring's
 *     head, written, and published by storing
 *     its seq (position + 1) last (reserve, publish). No wakeup per
 *     record: Go drains the rings on its own while records come
 *     (ebpf/internal/ring, CollectInterval), seldom while they are idle
 *     (IdleInterval), before each process record, and when a ring passes
 *     a quarter of its size (the ring buffer `wakes`), and delivers them
 *     in time order (reader_linux.go). A full ring overwrites its oldest records;
 *     Go counts what it missed as lost.
 *   - Process records (fork, exec, exit, loader) go on the ring buffer
 *     `procs`, and wake Go at once: scans wait on them. A failed
 *     reservation there is counted in `lost`, never silent.
 *
 * Each program serves the CUDA and the MACA name of a call; the attach
 * cookie says which: bits 0-7 vendor (0 CUDA, 1 MACA), bits 8-15 the
 * collective op (timer.CollOp) or the timer.Kind of a generic exit probe,
 * bits 16-23 the copy kind of a driver copy (its name says it: cuMemcpyHtoD
 * is 1, cudaMemcpyHostToDevice) or the id of a K_CALL (table.go, callNames),
 * bit 24 (COOKIE_DRIVER) set on the driver's calls (table.go,
 * probe.Cookie).
 *
 * One trap per call
 * -----------------
 * NVIDIA's runtime (libcudart 12 and 13, static or shared) dlopens
 * libcuda.so.1 and makes every call through the driver's exported entry
 * points: cudaLaunchKernel calls cuLaunchKernel(_ptsz), cudaLaunchKernelExC
 * cuLaunchKernelEx, cudaMemcpyAsync cuMemcpyAsync (or a cuMemcpy*Async_v2),
 * cudaEventRecord cuEventRecord(WithFlags), cudaDeviceSynchronize
 * cuCtxSynchronize(_v2), cudaEventElapsedTime cuEventElapsedTime(_v2), and
 * so on. Triton, XLA, cuBLASLt and NCCL 2.22+ launch through the driver
 * directly (cuLaunchKernelEx). So every CUDA call is probed in the driver
 * only (table.go probes no CUDA runtime): a call, by any path, is one trap
 * and one record (an entry and a return where the call's result or its
 * end matters: synchronizes, synchronous copies, queries), with the stream
 * and grid the driver gets, and the records name the driver's calls. The
 * runtime's calls are probed only where no driver is probed (MACA, whose
 * runtime has its driver linked in). A runtime launch's kernel is then a
 * driver handle: the name comes from the lookup the runtime made for it
 * (cuModuleGetFunction, cuLibraryGetKernel: func_names, learnt once per
 * kernel); a handle whose lookup came before we attached keeps the handle
 * as its identity. cuKernelGetFunction, which cuBLASLt calls before each
 * launch of its kernels, is probed only while names are to be learned
 * (lookups_linux.go): in steady state a launch is one trap.
 *
 * Where arguments sit (x86-64 System V, at function entry; [sp+8] is the
 * first stack argument, [sp] the return address):
 *   LaunchKernel(func di, grid si=x|y<<32 dx=z, block cx=x|y<<32 r8=z,
 *                args r9, shmem [sp+8], stream [sp+16])
 *   LaunchKernelExC(cfg di -> {grid u32[3], block u32[3], shmem u64, stream u64},
 *                func si, args dx); cuLaunchKernelEx alike (see launch_config)
 *   cuLaunchKernel, cuLaunchCooperativeKernel(f di, gx si, gy dx, gz cx,
 *                bx r8, by r9, bz [sp+8], shmem [sp+16], stream [sp+24],
 *                params [sp+32])
 *   cuLaunchKernelEx(const CUlaunchConfig *cfg di -> {gridDimX,Y,Z,
 *                blockDimX,Y,Z, sharedMemBytes: u32 each, pad, hStream u64 at
 *                byte 32, attrs, numAttrs}, f si, params dx, extra cx)
 *                (LaunchKernelExC's, see launch_ex)
 *   LaunchHostFunc(stream di, fn si, data dx)              a launch of fn, grid 0
 *   cuModuleGetFunction(CUfunction *f di, module si, name dx),
 *   cuLibraryGetKernel(CUkernel *k di, library si, name dx)  at exit: no event;
 *                *f and the name go into the map func_names
 *   cuKernelGetFunction(CUfunction *f di, CUkernel k si)   at exit: no event;
 *                *f gets the name k has in func_names
 *   GraphLaunch(exec di, stream si)
 *   MemcpyAsync(dst di, src si, n dx, kind cx, stream r8)
 *   cuMemcpy*Async(dst di, src si, n dx, stream cx)         copy kind: cookie
 *   Memcpy(dst di, src si, n dx, kind cx)                   enter + exit
 *   cuMemcpy, cuMemcpyHtoD_v2...(dst di, src si, n dx)      enter + exit, kind: cookie
 *   EventRecord(event di, stream si), cuEventRecordWithFlags(same, flags dx)
 *   EventQuery(event di) / StreamQuery(stream di)           one event at exit, ret = ax
 *   EventSynchronize(event di), StreamSynchronize(stream di),
 *   DeviceSynchronize(), cuCtxSynchronize(_v2)              enter + exit
 *   StreamWaitEvent(stream di, event si, flags dx)
 *   EventElapsedTime(float *ms di, start si, end dx)        at exit: *ms read back
 *   ncclCommInitRank(comm* di, nranks si, id 128 bytes at [sp+8], rank dx)
 *   ncclCommInitRankConfig(same, config cx)                 at exit: *comm read back
 *   ncclCommSplit(comm di, color si, key dx, newcomm* cx, config r8)
 *   ncclCommDestroy/Abort(comm di)
 *   ncclAllReduce/ReduceScatter(send di, recv si, count dx, dtype cx,
 *                op r8, comm r9, stream [sp+8])
 *   ncclAllGather(send di, recv si, count dx, dtype cx, comm r8, stream r9)
 *   ncclBroadcast(send di, recv si, count dx, dtype cx, root r8, comm r9, stream [sp+8])
 *   ncclReduce(send di, recv si, count dx, dtype cx, op r8, root r9,
 *                comm [sp+8], stream [sp+16])
 *   ncclSend/Recv(buf di, count si, dtype dx, peer cx, comm r8, stream r9)
 *   ncclGroupStart/End()
 *   the calls made now and then (K_CALL: cuMemFree_v2(ptr di),
 *                cuStreamDestroy_v2(stream di), ...)        enter + exit
 * A CUfunction or CUkernel of NVIDIA's driver is an opaque handle no ELF
 * symbol names: func_names maps (tgid, handle) to the name the process
 * looked it up by, for Go to name the launches of it.
 * The 128-byte ncclUniqueId is folded into a 16-byte comm_id by two
 * independent 64-bit multiply-xor hashes over its 16 words (idHash in
 * decode.go computes the same in Go).
 *
 * Only thread groups present in the map `followed` are recorded. A fork
 * of a followed process adds the child here, before it can run; exec, exit
 * and dynamic loader updates (dlopen) of followed processes are
 * reported to Go, which (re)scans their libraries. Go sees a call record
 * up to its poll interval (20 ms, 200 ms after the rings were idle) after
 * the call.
 *
 * x86-64 only: the call rings rely on its total store order (see barrier).
 * Minimum kernel: 5.15 (ring buffer 5.8, tp_btf 5.5, BPF_F_MMAPABLE 5.5,
 * atomic fetch-and-add 5.12, so -mcpu=v3; task storage in tracing
 * programs and bpf_get_current_task_btf 5.11; uprobe attach cookie 5.15), with
 * BTF (CONFIG_DEBUG_INFO_BTF): the process hooks are tp_btf programs and a
 * uprobe on ld.so, so no tracefs mount is needed.
 */
#include "include/types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* x86-64 System V integer arguments (Debian's libbpf lacks PT_REGS_PARM6). */
#define ARG1(ctx) ((ctx)->di)
#define ARG2(ctx) ((ctx)->si)
#define ARG3(ctx) ((ctx)->dx)
#define ARG4(ctx) ((ctx)->cx)
#define ARG5(ctx) ((ctx)->r8)
#define ARG6(ctx) ((ctx)->r9)

enum proc_kind {
	EV_FORK = 100, /* a followed process forked: pid is the child, handle the parent */
	EV_EXEC = 101, /* a followed process called exec */
	EV_EXIT = 102, /* a followed process (thread group) exited */
	EV_MMAP = 103, /* a followed process (un)loaded libraries (ld.so told us) */
};

/* Why a process is in unheld. */
enum unheld_why {
	UNHELD_COMPLETE = 1,    /* its GPU libraries are probed: until it execs */
	UNHELD_INTERACTIVE = 2, /* a child of an interactive shell: for good */
};

/* The phase of a process record (struct call's phase). */
enum proc_phase {
	PROC_RUNS = 0, /* the process runs on */
	PROC_HELD = 1, /* the process was stopped (SIGSTOP) until Go resumes it */
};

/* timer.Kind values. */
enum kind {
	K_LAUNCH = 1,
	K_GRAPH_LAUNCH = 2,
	K_MEMCPY_ASYNC = 3,
	K_MEMCPY = 4,
	K_EVENT_RECORD = 5,
	K_EVENT_QUERY = 6,
	K_EVENT_SYNC = 7,
	K_STREAM_SYNC = 8,
	K_STREAM_QUERY = 9,
	K_STREAM_WAIT_EVENT = 10,
	K_DEVICE_SYNC = 11,
	K_EVENT_ELAPSED = 12,
	K_COMM_INIT = 13,
	K_COMM_DESTROY = 14,
	K_COLLECTIVE = 15,
	K_GROUP_START = 16,
	K_GROUP_END = 17,
	/* 18, 19: Go's own (a process started, exited) */
	K_CALL = 20,
};

enum { PHASE_ENTER = 0, PHASE_EXIT = 1 };

/* Stash keys of calls that are no timer.Kind (beyond every kind). */
enum {
	STASH_GET_FUNCTION = 64,
	STASH_SPLIT = 64 + K_COMM_INIT,
	STASH_KERNEL_FUNCTION = 64 + K_LAUNCH,
	STASH_CALL = 256, /* + a K_CALL's id: two calls of a thread may nest */
};

#define COOKIE_DRIVER (1ULL << 24)
#define VENDOR_CUDA 0

/*
 * One call or process record (Go: probesCall), 64 bytes: a slot of the
 * call rings is one cache line. The header is the same for every kind;
 * the four payload fields (and ret, in the entry records of launches and
 * collectives) mean what the table in the file's header comment says, per
 * kind, and are zero where a kind has nothing.
 */
struct call {
	__u64 seq;  /* call rings: position + 1 once complete, 0 while written */
	__u64 time; /* bpf_ktime_get_ns */
	__u32 pid;  /* thread group id */
	__u32 tid;
	__u8 kind;
	__u8 phase;
	__u8 vendor;
	__u8 op; /* timer.CollOp; 1 on the K_COMM_INIT of a split */
	__s32 ret;
	__u64 stream;
	__u64 handle;
	__u64 handle2;
	__u64 size;
};

/* Arguments kept from entry to return, keyed by kind << 32 | tid. */
struct stash {
	__u64 a0, a1, a2;
	__u64 id[2];
	__s32 nranks, rank;
	__u64 ret_slot, ret_addr; /* see save_return */
};

/* Process records (fork, exec, exit, loader): few, and each wakes Go. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10); /* Go: procRingBytes */
} procs SEC(".maps");

/*
 * The call rings: ring_mask + 1 blocks of slot_mask + 2 entries, ring r at
 * r * (slot_mask + 2); CPU c writes into ring c & ring_mask (at most 16
 * rings: ebpf/internal/ring, MaxRings). The block's first entry is its header,
 * whose seq is the ring's head: how many records were ever reserved in it. Then come
 * its slot_mask + 1 slots; record number pos lives in slot pos & slot_mask.
 * Go sizes the map (calls_linux.go) and reads it through a shared mapping.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* replaced by Go */
	__type(key, __u32);
	__type(value, struct call);
} calls SEC(".maps");

/* Slots per ring minus one, and rings minus one (powers of two minus
 * one), set by Go. */
volatile const __u64 slot_mask = 0;
volatile const __u32 ring_mask = 0;

/*
 * The collector's wakeups (ebpf/internal/ring, Poll): reserve writes the ring's
 * number here, with a wakeup, each time a ring's head passes a multiple of
 * wake_mask + 1 (a quarter of the ring, set by Go). The collector then
 * sleeps long while the rings are idle and still reads a burst before it
 * laps its ring: one wakeup per quarter ring, not per record, and none at
 * rest; under load it polls on its own and only counts them. A full
 * buffer (a collector that does not read) drops the wakeup, and its timer
 * reads the rings anyway.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* Go: wakeRingBytes */
} wakes SEC(".maps");

volatile const __u64 wake_mask = 0;

/*
 * The followed thread groups, one bit per tgid: bit tgid%64 of word
 * tgid/64, for every pid the kernel can give (PID_MAX_LIMIT, 2^22 on
 * 64-bit: 65536 words, 512 KiB). Every program asks it first, on every hit;
 * an array lookup, which the verifier inlines, costs a third of a hash
 * lookup (BenchmarkProbeOverhead's followed-check row). Go sets and clears
 * bits with atomic operations on the mapped words (followed_linux.go), the
 * fork and exit programs with BPF atomics.
 */
#define FOLLOWED_WORDS (1 << 16) /* Go: followedWords */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, FOLLOWED_WORDS);
	__type(key, __u32);   /* tgid / 64 */
	__type(value, __u64); /* bit tgid % 64 */
} followed SEC(".maps");

/*
 * Holding a process while its new code is probed. A followed process that
 * execs, or whose loader has just changed its libraries (dl_state), is
 * stopped with SIGSTOP by the program itself, before it runs one more
 * instruction of its own; Go reads its maps, probes what appeared and sends
 * SIGCONT (follower_linux.go, hold_linux.go). So no first call into a library is
 * missed, however soon after its dlopen it comes. Holding needs a live
 * reader: Go writes the time into hold_alive on every turn of its loop,
 * and a process is held only while that is younger than HOLD_ALIVE_NS, so
 * a dead or stuck agent never stops a job. A process is held only with its
 * record reserved, so that the record that makes Go resume it is never
 * lost. The processes in unheld are never held: those whose GPU libraries
 * are all probed (nothing left to miss), and the children of an
 * interactive shell, whose job control would take the stop for the
 * user's.
 */
#define HOLD_ALIVE_NS (5ULL * 1000000000ULL) /* Go: beatEvery is far below it */
#define SIGSTOP 19

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64); /* bpf_ktime_get_ns of Go's last turn; 0: never hold */
} hold_alive SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);  /* tgid */
	__type(value, __u8); /* enum unheld_why */
} unheld SEC(".maps");

/* The processes held now and since when (bpf_ktime_get_ns): Go deletes
 * each as it resumes it, and resumes what is left at Close. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, __u64);
} held SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stash);
} stashes SEC(".maps");

#define FUNC_NAME_LEN 128

/* A driver function handle of a process (Go: probesFuncKey). */
struct func_key {
	__u32 pid;
	__u32 pad;
	__u64 handle;
};

struct func_name {
	char name[FUNC_NAME_LEN]; /* NUL-terminated, truncated */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct func_key);
	__type(value, struct func_name);
} func_names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* How many CUfunctions kernel_get_function_exit named: Go reads it to
 * know when its lookups teach nothing new any more. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} learned SEC(".maps");


/* Keep struct call and the kind enums in the BTF, for bpf2go -type: Go
 * sees the same values (probes_x86_bpfel.go, checked in kinds_test.go). */
const struct call *unused_call __attribute__((unused));
const enum kind *unused_kind __attribute__((unused));
const enum proc_kind *unused_proc_kind __attribute__((unused));
const enum proc_phase *unused_proc_phase __attribute__((unused));
const enum unheld_why *unused_unheld_why __attribute__((unused));

static __always_inline __u64 *followed_word(__u32 tgid)
{
	__u32 i = tgid >> 6;
	return bpf_map_lookup_elem(&followed, &i);
}

static __always_inline int is_followed(__u32 tgid)
{
	__u64 *w = followed_word(tgid);
	return w && ((*w >> (tgid & 63)) & 1);
}

static __always_inline void count_lost(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&lost, &zero);
	if (n)
		*n += 1;
}

/* A compiler barrier: on x86-64 (TSO) stores reach other CPUs in program
 * order, so keeping the compiler from reordering them is all the seq
 * protocol needs; the JIT emits BPF stores as plain x86 stores. */
#define barrier() asm volatile("" ::: "memory")

/*
 * reserve takes the next slot of this CPU's call ring (shared) and returns it with
 * the header filled in and the payload zeroed, or 0. *pos is the record's
 * position, for publish.
 *
 * Lock-free and safe against preemption and sharing: a uprobe program
 * runs with migration disabled, so the CPU stays the same, but it may be
 * preempted, and another program may then reserve in the same ring, on
 * this CPU or on another that shares it; one atomic fetch-and-add gives
 * each its own position. Marking the slot (seq 0)
 * before writing it lets the reader see that a copy it made while the
 * slot was rewritten is torn. The ring overwrites: a writer never waits,
 * the reader counts what it missed as lost (ebpf/internal/ring).
 *
 * The record is written in whole 8-byte words, each once (volatile, so
 * that clang does not trim the zeros a program overwrites into dozens of
 * byte stores, which filled the store buffer while the slot's cache line
 * was fetched: BenchmarkProbeOverhead).
 */
#ifndef offsetof
#define offsetof(t, m) __builtin_offsetof(t, m)
#endif
_Static_assert(offsetof(struct call, tid) == offsetof(struct call, pid) + 4 &&
		       offsetof(struct call, ret) == offsetof(struct call, kind) + 4 &&
		       offsetof(struct call, kind) % 8 == 0 && sizeof(struct call) == 64 &&
		       offsetof(struct call, size) == 56,
	       "reserve writes struct call in 8-byte words, one cache line");
#define STORE64(e, off, v) (*(volatile __u64 *)((char *)(e) + (off)) = (v))
static __always_inline struct call *reserve(__u64 pid_tgid, __u8 kind, __u8 phase, __u64 cookie, __u64 *pos)
{
	__u32 ring = bpf_get_smp_processor_id() & ring_mask;
	__u32 base = ring * (__u32)(slot_mask + 2);
	struct call *h = bpf_map_lookup_elem(&calls, &base);
	if (!h)
		return 0;
	__u64 p = __sync_fetch_and_add(&h->seq, 1);
	if ((p & wake_mask) == wake_mask)
		bpf_ringbuf_output(&wakes, &ring, sizeof(ring), BPF_RB_FORCE_WAKEUP);
	__u32 idx = base + 1 + (__u32)(p & slot_mask);
	struct call *e = bpf_map_lookup_elem(&calls, &idx);
	if (!e)
		return 0;
	STORE64(e, offsetof(struct call, seq), 0);
	barrier();
	STORE64(e, offsetof(struct call, time), bpf_ktime_get_ns());
	/* pid, tid; kind, phase, vendor, op (0), ret (0) */
	STORE64(e, offsetof(struct call, pid), (pid_tgid >> 32) | (pid_tgid << 32));
	STORE64(e, offsetof(struct call, kind), kind | (__u32)phase << 8 | (__u32)(cookie & 0xff) << 16);
	STORE64(e, offsetof(struct call, stream), 0);
	STORE64(e, offsetof(struct call, handle), 0);
	STORE64(e, offsetof(struct call, handle2), 0);
	STORE64(e, offsetof(struct call, size), 0);
	*pos = p;
	return e;
}

/* publish completes a record: its seq, stored last, tells the reader. No
 * wakeup: Go drains the rings on its poll (ebpf/internal/ring, Poll), at rest
 * woken by reserve each quarter ring, and before each process record. */
static __always_inline void publish(struct call *e, __u64 pos)
{
	barrier();
	*(volatile __u64 *)&e->seq = pos + 1;
}

/* FOLLOWED_PID filters by followed thread group. */
#define FOLLOWED_PID()                                                  \
	__u64 pid_tgid = bpf_get_current_pid_tgid();                    \
	if (!is_followed(pid_tgid >> 32))                               \
		return 0;

/* FOLLOWED is FOLLOWED_PID and the attach cookie, for a program that
 * records. */
#define FOLLOWED()                                                      \
	FOLLOWED_PID();                                                 \
	__u64 cookie = bpf_get_attach_cookie(ctx);

/* FOLLOWED_CUDA_DRIVER is FOLLOWED for a program attached to the CUDA
 * driver alone (table_test.go, TestCUDADriverOnly): its cookie is known,
 * so it is not read; bpf_get_attach_cookie is a helper call, and these
 * programs run at every launch. */
#define FOLLOWED_CUDA_DRIVER()                                          \
	__u64 pid_tgid = bpf_get_current_pid_tgid();                    \
	if (!is_followed(pid_tgid >> 32))                               \
		return 0;                                               \
	const __u64 cookie = COOKIE_DRIVER | VENDOR_CUDA;

/* RECORD reserves the record of a call FOLLOWED let through. */
#define RECORD(kind, phase)                                             \
	__u64 pos;                                                      \
	struct call *e = reserve(pid_tgid, kind, phase, cookie, &pos);  \
	if (!e)                                                         \
		return 0;

/* BEGIN filters and reserves a record. */
#define BEGIN(kind, phase)                                              \
	FOLLOWED();                                                     \
	RECORD(kind, phase);

static __always_inline __u64 stack_arg(struct pt_regs *ctx, int n)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(ctx->sp + 8 * n));
	return v;
}

/* stack_args reads the stack arguments n.. into v (zero if unreadable) in
 * one copy: each bpf_probe_read_user is a fault-guarded user access, the
 * second costliest step of a launch record after the ring buffer. */
#define STACK_ARGS(ctx, n, v)                                                    \
	do {                                                                     \
		if (bpf_probe_read_user(&(v), sizeof(v), (void *)((ctx)->sp + 8 * (n)))) \
			__builtin_memset(&(v), 0, sizeof(v));                    \
	} while (0)

static __always_inline __u64 stash_key(__u64 pid_tgid, __u32 kind)
{
	return ((__u64)kind << 32) | (__u32)pid_tgid;
}

/*
 * A uretprobe works by replacing the return address of the probed call on
 * the thread's stack with the kernel's return trampoline ([uprobes], at
 * the top of the address space). A thread blocked in a probed call, the
 * very thread a hang dump is about, then shows the trampoline where its
 * caller should be, and no unwinder can go on. Every entry program whose
 * call has a return probe stashes its arguments for the return program;
 * save_return adds to that stash the return address it found at the
 * entry (*sp: the kernel replaces it after the entry programs ran) and
 * the stack slot it lies in, and the return program's delete of the stash
 * drops both. Go's unwinder asks for it (Tracer.ReturnAddress) when it
 * meets the trampoline. One map update and one delete a call, where a map
 * of return addresses of its own cost two more.
 */
static __always_inline void save_return(struct pt_regs *ctx, struct stash *s)
{
	if (bpf_probe_read_user(&s->ret_addr, sizeof(s->ret_addr), (void *)ctx->sp) == 0)
		s->ret_slot = ctx->sp;
}

/* take_stash moves the stash of key into *a (a return program's
 * arguments); 0 when there is none. */
static __always_inline int take_stash(__u64 key, struct stash *a)
{
	struct stash *s = bpf_map_lookup_elem(&stashes, &key);
	if (!s)
		return 0;
	*a = *s;
	bpf_map_delete_elem(&stashes, &key);
	return 1;
}

/* Two 32-bit values in one word, lo in the low half (the header comment's
 * table: a collective's data type and reduction op, a communicator's
 * nranks and rank, a split's color and key). */
#define PAIR32(lo, hi) ((__u64)(__u32)(lo) | (__u64)(__u32)(hi) << 32)

/* ---- kernel launches ------------------------------------------------ */

/* A launch's grid and block, packed (the header comment's table). */
#define GRID(x, y, z) ((__u64)(__u32)(x) | (__u64)((y) & 0xffff) << 32 | (__u64)((z) & 0xffff) << 48)
#define BLOCK(x, y, z) ((__s32)(((x) & 0x7ff) | ((y) & 0x7ff) << 11 | ((z) & 0x3ff) << 22))

SEC("uprobe")
int launch_kernel(struct pt_regs *ctx)
{
	BEGIN(K_LAUNCH, PHASE_ENTER);
	__u64 grid = ARG2(ctx), block = ARG4(ctx);
	e->handle = ARG1(ctx);
	e->handle2 = GRID((__u32)grid, grid >> 32, ARG3(ctx));
	e->ret = BLOCK((__u32)block, block >> 32, ARG5(ctx));
	__u64 st[2];
	STACK_ARGS(ctx, 1, st);
	e->size = st[0];
	e->stream = st[1];
	publish(e, pos);
	return 0;
}

/*
 * A launch config: cudaLaunchConfig_t (runtime) and CUlaunchConfig
 * (driver) begin alike, grid and block u32[3] each, then the dynamic
 * shared memory (a size_t in the runtime's, a u32 and padding in the
 * driver's: its low half is read) and the stream at byte 32; the function
 * is the second argument of both cudaLaunchKernelExC and cuLaunchKernelEx.
 */
struct launch_config {
	__u32 grid[3];
	__u32 block[3];
	__u32 shmem;
	__u32 pad;
	__u64 stream;
};

static __always_inline void launch_ex(struct pt_regs *ctx, struct call *e)
{
	struct launch_config cfg;
	if (bpf_probe_read_user(&cfg, sizeof(cfg), (void *)ARG1(ctx)))
		__builtin_memset(&cfg, 0, sizeof(cfg));
	e->handle = ARG2(ctx);
	e->handle2 = GRID(cfg.grid[0], cfg.grid[1], cfg.grid[2]);
	e->ret = BLOCK(cfg.block[0], cfg.block[1], cfg.block[2]);
	e->size = cfg.shmem;
	e->stream = cfg.stream;
}

/* cudaLaunchKernelExC of a runtime whose driver is not probed (MACA's). */
SEC("uprobe")
int launch_kernel_exc(struct pt_regs *ctx)
{
	BEGIN(K_LAUNCH, PHASE_ENTER);
	launch_ex(ctx, e);
	publish(e, pos);
	return 0;
}

/* cuLaunchKernelEx: Triton's, XLA's, NCCL's launches, and the runtime's
 * cudaLaunchKernelExC. */
SEC("uprobe")
int cu_launch_kernel_ex(struct pt_regs *ctx)
{
	FOLLOWED_CUDA_DRIVER();
	RECORD(K_LAUNCH, PHASE_ENTER);
	launch_ex(ctx, e);
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int cu_launch_kernel(struct pt_regs *ctx)
{
	FOLLOWED_CUDA_DRIVER();
	RECORD(K_LAUNCH, PHASE_ENTER);
	e->handle = ARG1(ctx);
	e->handle2 = GRID(ARG2(ctx), ARG3(ctx), ARG4(ctx));
	__u64 st[3];
	STACK_ARGS(ctx, 1, st);
	e->ret = BLOCK(ARG5(ctx), ARG6(ctx), st[0]);
	e->size = (__u32)st[1];
	e->stream = st[2];
	publish(e, pos);
	return 0;
}

/* cudaLaunchHostFunc, cuLaunchHostFunc: fn runs on the host once the work
 * before it on the stream is done, as a kernel would: a launch of fn. */
SEC("uprobe")
int launch_host_func(struct pt_regs *ctx)
{
	BEGIN(K_LAUNCH, PHASE_ENTER);
	e->stream = ARG1(ctx);
	e->handle = ARG2(ctx);
	publish(e, pos);
	return 0;
}

/* cuModuleGetFunction and cuLibraryGetKernel: remember which name the
 * returned handle stands for. */
SEC("uprobe")
int get_function_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	struct stash s = {};
	save_return(ctx, &s);
	s.a0 = ARG1(ctx); /* CUfunction * or CUkernel * */
	s.a1 = ARG3(ctx); /* const char *name */
	__u64 key = stash_key(pid_tgid, STASH_GET_FUNCTION);
	bpf_map_update_elem(&stashes, &key, &s, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int get_function_exit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	__u64 key = stash_key(pid_tgid, STASH_GET_FUNCTION);
	struct stash a;
	if (!take_stash(key, &a))
		return 0;
	if (ctx->ax != 0) /* CUDA_SUCCESS */
		return 0;
	struct func_key fk = {.pid = pid_tgid >> 32};
	bpf_probe_read_user(&fk.handle, sizeof(fk.handle), (void *)a.a0);
	if (!fk.handle)
		return 0;
	struct func_name fn = {};
	if (bpf_probe_read_user_str(fn.name, sizeof(fn.name), (void *)a.a1) <= 1)
		return 0;
	bpf_map_update_elem(&func_names, &fk, &fn, BPF_ANY);
	return 0;
}

/* cuKernelGetFunction: the CUfunction of a CUkernel in the current
 * context (how CUDA 12+ runtimes and libraries turn a library's kernel
 * into a launchable function) gets the kernel's name. cuBLASLt makes the
 * same lookup before every launch of its kernels, so Go attaches these
 * two programs only while names are to be learned (lookups_linux.go);
 * each new pair counts in learned. */
SEC("uprobe")
int kernel_get_function_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	struct stash s = {};
	save_return(ctx, &s);
	s.a0 = ARG1(ctx); /* CUfunction * */
	s.a1 = ARG2(ctx); /* CUkernel */
	__u64 key = stash_key(pid_tgid, STASH_KERNEL_FUNCTION);
	bpf_map_update_elem(&stashes, &key, &s, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int kernel_get_function_exit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	__u64 key = stash_key(pid_tgid, STASH_KERNEL_FUNCTION);
	struct stash a;
	if (!take_stash(key, &a))
		return 0;
	if (ctx->ax != 0) /* CUDA_SUCCESS */
		return 0;
	struct func_key kk = {.pid = pid_tgid >> 32, .handle = a.a1};
	struct func_name *fn = bpf_map_lookup_elem(&func_names, &kk);
	if (!fn)
		return 0;
	struct func_key fk = {.pid = kk.pid};
	bpf_probe_read_user(&fk.handle, sizeof(fk.handle), (void *)a.a0);
	if (!fk.handle || fk.handle == kk.handle || bpf_map_lookup_elem(&func_names, &fk))
		return 0; /* a pair known: the same lookup, made again */
	if (bpf_map_update_elem(&func_names, &fk, fn, BPF_NOEXIST) == 0) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&learned, &zero);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return 0;
}

SEC("uprobe")
int graph_launch(struct pt_regs *ctx)
{
	BEGIN(K_GRAPH_LAUNCH, PHASE_ENTER);
	e->handle = ARG1(ctx);
	e->stream = ARG2(ctx);
	publish(e, pos);
	return 0;
}

/* ---- copies --------------------------------------------------------- */

/* The copy kind of a driver copy: its name's (cookie), cudaMemcpyKind's values. */
#define COPY_KIND(cookie) (((cookie) >> 16) & 0xff)
/* The id of a K_CALL (a call made now and then) in its place. */
#define CALL_ID(cookie) (((cookie) >> 16) & 0xff)

SEC("uprobe")
int memcpy_async(struct pt_regs *ctx)
{
	BEGIN(K_MEMCPY_ASYNC, PHASE_ENTER);
	e->size = ARG3(ctx);
	e->handle2 = (__u32)ARG4(ctx);
	e->stream = ARG5(ctx);
	publish(e, pos);
	return 0;
}

/* cuMemcpyAsync, cuMemcpyHtoDAsync_v2...: (dst, src, n, stream). */
SEC("uprobe")
int cu_memcpy_async(struct pt_regs *ctx)
{
	BEGIN(K_MEMCPY_ASYNC, PHASE_ENTER);
	e->size = ARG3(ctx);
	e->handle2 = COPY_KIND(cookie);
	e->stream = ARG4(ctx);
	publish(e, pos);
	return 0;
}

/* Memcpy (runtime: the kind is an argument) and cuMemcpy, cuMemcpyHtoD_v2...
 * (driver: the cookie has it). */
SEC("uprobe")
int memcpy_enter(struct pt_regs *ctx)
{
	FOLLOWED();
	struct stash s = {};
	save_return(ctx, &s);
	s.a0 = ARG3(ctx);
	s.a1 = cookie & COOKIE_DRIVER ? COPY_KIND(cookie) : ARG4(ctx);
	__u64 key = stash_key(pid_tgid, K_MEMCPY);
	bpf_map_update_elem(&stashes, &key, &s, BPF_ANY);
	RECORD(K_MEMCPY, PHASE_ENTER);
	e->size = s.a0;
	e->handle2 = (__u32)s.a1;
	publish(e, pos);
	return 0;
}

/* ---- completion points ---------------------------------------------- */

SEC("uprobe")
int event_record(struct pt_regs *ctx)
{
	BEGIN(K_EVENT_RECORD, PHASE_ENTER);
	e->handle = ARG1(ctx);
	e->stream = ARG2(ctx);
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int stream_wait_event(struct pt_regs *ctx)
{
	BEGIN(K_STREAM_WAIT_EVENT, PHASE_ENTER);
	e->stream = ARG1(ctx);
	e->handle = ARG2(ctx);
	publish(e, pos);
	return 0;
}

/* Entry of a call reported only at its return: stash the arguments. */
static __always_inline int stash_args(struct pt_regs *ctx, __u8 kind)
{
	FOLLOWED_PID();
	struct stash s = {};
	save_return(ctx, &s);
	s.a0 = ARG1(ctx);
	s.a1 = ARG2(ctx);
	s.a2 = ARG3(ctx);
	__u64 key = stash_key(pid_tgid, kind);
	bpf_map_update_elem(&stashes, &key, &s, BPF_ANY);
	return 0;
}

SEC("uprobe")
int event_query_enter(struct pt_regs *ctx) { return stash_args(ctx, K_EVENT_QUERY); }

SEC("uprobe")
int stream_query_enter(struct pt_regs *ctx) { return stash_args(ctx, K_STREAM_QUERY); }

SEC("uprobe")
int elapsed_enter(struct pt_regs *ctx) { return stash_args(ctx, K_EVENT_ELAPSED); }

/* Entry of a blocking call: an enter event, and the arguments for its exit. */
static __always_inline int blocking_enter(struct pt_regs *ctx, __u8 kind)
{
	FOLLOWED();
	struct stash s = {};
	save_return(ctx, &s);
	s.a0 = ARG1(ctx); /* none for cuCtxSynchronize: not read */
	__u64 key = stash_key(pid_tgid, kind);
	bpf_map_update_elem(&stashes, &key, &s, BPF_ANY);
	RECORD(kind, PHASE_ENTER);
	if (kind == K_STREAM_SYNC)
		e->stream = s.a0;
	else if (kind == K_EVENT_SYNC)
		e->handle = s.a0;
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int event_sync_enter(struct pt_regs *ctx) { return blocking_enter(ctx, K_EVENT_SYNC); }

SEC("uprobe")
int stream_sync_enter(struct pt_regs *ctx) { return blocking_enter(ctx, K_STREAM_SYNC); }

SEC("uprobe")
int device_sync_enter(struct pt_regs *ctx) { return blocking_enter(ctx, K_DEVICE_SYNC); }

/*
 * The return of every call whose arguments were stashed: the cookie's
 * bits 8-15 name the kind.
 */
SEC("uretprobe")
int call_exit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 kind = cookie >> 8;
	__u64 key = stash_key(pid_tgid, kind == K_CALL ? STASH_CALL + CALL_ID(cookie) : kind);
	struct stash a;
	if (!take_stash(key, &a))
		return 0;

	__u64 pos;
	struct call *e = reserve(pid_tgid, kind, PHASE_EXIT, cookie, &pos);
	if (!e)
		return 0;
	e->ret = ctx->ax;
	switch (kind) {
	case K_MEMCPY:
		e->size = a.a0;
		e->handle2 = (__u32)a.a1;
		break;
	case K_EVENT_QUERY:
	case K_EVENT_SYNC:
		e->handle = a.a0;
		break;
	case K_STREAM_QUERY:
	case K_STREAM_SYNC:
		e->stream = a.a0;
		break;
	case K_EVENT_ELAPSED:
		e->handle = a.a1;
		e->handle2 = a.a2;
		__u32 ms = 0;
		bpf_probe_read_user(&ms, sizeof(ms), (void *)a.a0);
		e->size = ms;
		break;
	case K_CALL:
		e->op = CALL_ID(cookie);
		e->stream = a.a0;
		break;
	}
	publish(e, pos);
	return 0;
}

/* ---- calls made now and then ---------------------------------------- */

/*
 * A call a thread may block in that is no wait of its own, made now and
 * then, not at every step (table.go: allocations, frees, memsets, host
 * registration, destroys and unloads, module loads, NCCL's finalize): an
 * entry record (op: the call's id; stream: its first argument, which Go
 * keeps where it is a stream) and, through call_exit, the return's.
 */
SEC("uprobe")
int call_enter(struct pt_regs *ctx)
{
	FOLLOWED();
	struct stash s = {};
	save_return(ctx, &s);
	s.a0 = ARG1(ctx);
	__u64 key = stash_key(pid_tgid, STASH_CALL + CALL_ID(cookie));
	bpf_map_update_elem(&stashes, &key, &s, BPF_ANY);
	RECORD(K_CALL, PHASE_ENTER);
	e->op = CALL_ID(cookie);
	e->stream = s.a0;
	publish(e, pos);
	return 0;
}

/* ---- NCCL communicators --------------------------------------------- */

#define ID_WORDS 16 /* sizeof(ncclUniqueId) / 8 */

SEC("uprobe")
int comm_init_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	__u64 id[ID_WORDS] = {};
	bpf_probe_read_user(id, sizeof(id), (void *)(ctx->sp + 8));
	__u64 h1 = 0xcbf29ce484222325ULL, h2 = 0x84222325cbf29ce4ULL;
#pragma unroll
	for (int i = 0; i < ID_WORDS; i++) {
		h1 = (h1 ^ id[i]) * 0x100000001b3ULL;
		h2 = (h2 ^ id[i]) * 0x9e3779b97f4a7c15ULL;
		h2 ^= h2 >> 29;
	}
	struct stash s = {};
	save_return(ctx, &s);
	s.a0 = ARG1(ctx); /* ncclComm_t * */
	s.id[0] = h1;
	s.id[1] = h2;
	s.nranks = ARG2(ctx);
	s.rank = ARG3(ctx);
	__u64 key = stash_key(pid_tgid, K_COMM_INIT);
	bpf_map_update_elem(&stashes, &key, &s, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int comm_init_exit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	__u64 key = stash_key(pid_tgid, K_COMM_INIT);
	struct stash a;
	if (!take_stash(key, &a))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pos;
	struct call *e = reserve(pid_tgid, K_COMM_INIT, PHASE_EXIT, cookie, &pos);
	if (!e)
		return 0;
	e->ret = ctx->ax;
	bpf_probe_read_user(&e->handle2, sizeof(e->handle2), (void *)a.a0);
	e->stream = a.id[0];
	e->handle = a.id[1];
	e->size = PAIR32(a.nranks, a.rank);
	publish(e, pos);
	return 0;
}

/* A split is reported as a KindCommInit whose comm_id Go derives from the
 * parent's id (handle) and the color. */
SEC("uprobe")
int comm_split_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	struct stash s = {};
	save_return(ctx, &s);
	s.a0 = ARG1(ctx); /* parent comm */
	s.a1 = ARG4(ctx); /* ncclComm_t *newcomm */
	s.nranks = ARG2(ctx); /* color */
	s.rank = ARG3(ctx);   /* key */
	__u64 key = stash_key(pid_tgid, STASH_SPLIT);
	bpf_map_update_elem(&stashes, &key, &s, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int comm_split_exit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_followed(pid_tgid >> 32))
		return 0;
	__u64 key = stash_key(pid_tgid, STASH_SPLIT);
	struct stash a;
	if (!take_stash(key, &a))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pos;
	struct call *e = reserve(pid_tgid, K_COMM_INIT, PHASE_EXIT, cookie, &pos);
	if (!e)
		return 0;
	e->ret = ctx->ax;
	e->handle = a.a0;
	bpf_probe_read_user(&e->handle2, sizeof(e->handle2), (void *)a.a1);
	e->size = PAIR32(a.nranks, a.rank); /* color, key */
	e->op = 1; /* marks a split */
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int comm_destroy(struct pt_regs *ctx)
{
	BEGIN(K_COMM_DESTROY, PHASE_ENTER);
	e->handle2 = ARG1(ctx);
	publish(e, pos);
	return 0;
}

/* ---- NCCL collectives ----------------------------------------------- */

/* AllReduce and ReduceScatter (the cookie holds the op). */
SEC("uprobe")
int coll_reduce_op(struct pt_regs *ctx)
{
	BEGIN(K_COLLECTIVE, PHASE_ENTER);
	e->op = cookie >> 8;
	e->size = ARG3(ctx);
	e->handle = PAIR32(ARG4(ctx), ARG5(ctx));
	e->ret = -1; /* no peer */
	e->handle2 = ARG6(ctx);
	e->stream = stack_arg(ctx, 1);
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int coll_all_gather(struct pt_regs *ctx)
{
	BEGIN(K_COLLECTIVE, PHASE_ENTER);
	e->op = cookie >> 8;
	e->size = ARG3(ctx);
	e->handle = PAIR32(ARG4(ctx), 0);
	e->ret = -1; /* no peer */
	e->handle2 = ARG5(ctx);
	e->stream = ARG6(ctx);
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int coll_broadcast(struct pt_regs *ctx)
{
	BEGIN(K_COLLECTIVE, PHASE_ENTER);
	e->op = cookie >> 8;
	e->size = ARG3(ctx);
	e->handle = PAIR32(ARG4(ctx), 0);
	e->ret = ARG5(ctx); /* root */
	e->handle2 = ARG6(ctx);
	e->stream = stack_arg(ctx, 1);
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int coll_reduce(struct pt_regs *ctx)
{
	BEGIN(K_COLLECTIVE, PHASE_ENTER);
	e->op = cookie >> 8;
	e->size = ARG3(ctx);
	e->handle = PAIR32(ARG4(ctx), ARG5(ctx));
	e->ret = ARG6(ctx); /* root */
	__u64 st[2];
	STACK_ARGS(ctx, 1, st);
	e->handle2 = st[0];
	e->stream = st[1];
	publish(e, pos);
	return 0;
}

/* Send and Recv. */
SEC("uprobe")
int coll_p2p(struct pt_regs *ctx)
{
	BEGIN(K_COLLECTIVE, PHASE_ENTER);
	e->op = cookie >> 8;
	e->size = ARG2(ctx);
	e->handle = PAIR32(ARG3(ctx), 0);
	e->ret = ARG4(ctx); /* peer */
	e->handle2 = ARG5(ctx);
	e->stream = ARG6(ctx);
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int group_start(struct pt_regs *ctx)
{
	BEGIN(K_GROUP_START, PHASE_ENTER);
	publish(e, pos);
	return 0;
}

SEC("uprobe")
int group_end(struct pt_regs *ctx)
{
	BEGIN(K_GROUP_END, PHASE_ENTER);
	publish(e, pos);
	return 0;
}

/* The physical floor for the benchmark: an attached program doing nothing. */
SEC("uprobe")
int empty(struct pt_regs *ctx)
{
	return 0;
}

/*
 * Floors of the steps every call record takes, each alone, for the
 * benchmark (bench_linux_test.go) to show what each costs on the machine
 * it runs on: the clock, the followed check, one read of stack arguments,
 * and a record reserved and published (the clock in it) with nobody
 * reading the ring. Never attached by the Tracer.
 */
SEC("uprobe")
int floor_clock(struct pt_regs *ctx)
{
	return bpf_ktime_get_ns() == 0;
}

SEC("uprobe")
int floor_followed(struct pt_regs *ctx)
{
	return is_followed(bpf_get_current_pid_tgid() >> 32);
}

SEC("uprobe")
int floor_stack(struct pt_regs *ctx)
{
	__u64 st[2];
	STACK_ARGS(ctx, 1, st);
	return st[0] == st[1];
}

SEC("uprobe")
int floor_record(struct pt_regs *ctx)
{
	__u64 pos;
	struct call *e = reserve(bpf_get_current_pid_tgid(), K_LAUNCH, PHASE_ENTER, 0, &pos);
	if (!e)
		return 0;
	publish(e, pos);
	return 0;
}

/* ---- following a process tree --------------------------------------- */

/* Whether the current process (tgid), about to run code just mapped,
 * may be held (see hold_alive). */
static __always_inline int may_hold(__u32 tgid)
{
	__u32 zero = 0;
	__u64 *alive = bpf_map_lookup_elem(&hold_alive, &zero);
	if (!alive || !*alive || bpf_ktime_get_ns() - *alive > HOLD_ALIVE_NS)
		return 0;
	return !bpf_map_lookup_elem(&unheld, &tgid);
}

/* Process records go on the ring buffer procs and wake Go at once: scans
 * wait on them. With hold, the current process, pid, is stopped when it
 * may be (may_hold) and the record says so. */
static __always_inline void process_event(__u8 kind, __u32 pid, __u32 parent, int hold)
{
	struct call *e = bpf_ringbuf_reserve(&procs, sizeof(*e), 0);
	if (!e) {
		count_lost();
		return;
	}
	__u64 now = bpf_ktime_get_ns();
	__builtin_memset(e, 0, sizeof(*e));
	e->time = now;
	e->pid = pid;
	e->tid = pid;
	e->kind = kind;
	e->handle = parent;
	if (hold && may_hold(pid) && !bpf_map_update_elem(&held, &pid, &now, BPF_ANY)) {
		if (!bpf_send_signal(SIGSTOP))
			e->phase = PROC_HELD;
		else
			bpf_map_delete_elem(&held, &pid);
	}
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	__u32 pid = child->pid, tgid = child->tgid;
	if (pid != tgid || !is_followed(ptgid)) /* a new thread, or not ours */
		return 0;
	__u64 *w = followed_word(tgid);
	if (w)
		__sync_fetch_and_or(w, 1ULL << (tgid & 63));
	process_event(EV_FORK, tgid, ptgid, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_followed(tgid))
		return 0;
	/* A new image has new libraries to probe: held, its loader must not
	 * map them before the loader is probed. */
	__u8 *why = bpf_map_lookup_elem(&unheld, &tgid);
	if (why && *why == UNHELD_COMPLETE)
		bpf_map_delete_elem(&unheld, &tgid);
	process_event(EV_EXEC, tgid, 0, 1);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if ((__u32)pid_tgid != tgid || !is_followed(tgid)) /* a thread, or not ours */
		return 0;
	__u64 *w = followed_word(tgid);
	if (w)
		__sync_fetch_and_and(w, ~(1ULL << (tgid & 63)));
	process_event(EV_EXIT, tgid, 0, 0);
	return 0;
}

/* r_debug's r_state (<link.h>; musl's struct debug alike): 0 once the
 * loaded objects are consistent, RT_ADD or RT_DELETE while they change. */
#define R_STATE_OFFSET 24
#define RT_CONSISTENT 0

/* The dynamic loader calls _dl_debug_state, the r_brk of its debugger
 * interface (where gdb learns of shared libraries), before and after it
 * changes the list of loaded objects: each dlopen (and dlclose), and the
 * libraries of a new image before its constructors run. At the call that
 * ends a change (r_state RT_CONSISTENT: the new objects mapped, their
 * constructors not yet run) the process is held (see hold_alive) while Go
 * reads the maps again and probes what appeared, so it cannot call the new
 * code unprobed; the call that begins one (RT_ADD, nothing mapped yet, or
 * RT_DELETE) is let go with no record, which halves the holds. The cookie
 * is r_debug's distance from here (Go: loaderCookie; a uprobe program
 * sees the probed address in ip); with none, or r_state unreadable, every
 * call holds. A uprobe on ld.so costs nothing between dlopens and, unlike
 * a hook on mmap(2), needs neither tracefs nor kprobes nor fentry, which
 * containers and slim kernels lack. */
SEC("uprobe")
int dl_state(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_followed(tgid))
		return 0;
	__u64 r_debug = bpf_get_attach_cookie(ctx);
	if (r_debug) {
		int state = RT_CONSISTENT;
		bpf_probe_read_user(&state, sizeof(state), (void *)(ctx->ip + r_debug + R_STATE_OFFSET));
		if (state != RT_CONSISTENT)
			return 0;
	}
	process_event(EV_MMAP, tgid, 0, 1);
	return 0;
}
