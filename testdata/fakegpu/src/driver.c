/* driver.c: the fake CUDA driver (libcuda.so.1) and the simulated device
 * behind it. The runtime (runtime.c) loads this library with
 * dlopen("libcuda.so.1") at its first call and calls its cu* functions, as
 * NVIDIA's libcudart does; Triton-like code calls them directly
 * (cuModuleGetFunction, cuLaunchKernelEx). Built with -DFAKE_MACA it is
 * linked into the MACA runtime instead, its cu* names hidden.
 *
 * The device: every stream has its own executor thread (the engine of that
 * stream) that drains a lock-protected ring of operations in FIFO order:
 * kernels (the kernel function runs on the executor), event records, waits
 * on events of other streams, copies, host functions (the collectives of
 * the fake NCCL) and graph replays. Streams run concurrently.
 *
 * A host thread that waits for the device (cuStreamSynchronize,
 * cuCtxSynchronize_v2, cuEventSynchronize, a synchronous copy) spins on a
 * CPU by default, state R for the whole wait, as CUDA's default schedule
 * (CU_CTX_SCHED_AUTO, which spins while the process has fewer contexts
 * than cores) does. XPU_FAKEGPU_SCHED=spin|yield|blocking, or the
 * schedule flags of cuCtxSetFlags / cudaSetDeviceFlags (which win over the
 * variable), choose: spin, spin with sched_yield, or sleep in a futex
 * (blocking sync).
 *
 * A CUfunction or CUkernel is opaque, as on NVIDIA's driver: a slot of a
 * table that no symbol names (cuModuleGetFunction and cuLibraryGetKernel
 * find the kernel function with dlsym), also for the runtime's launches:
 * only the lookup that returned a handle names its kernel. Stream capture records a stream's work into a graph instead of
 * running it; cuGraphLaunch replays the graph as one operation (its kernels
 * make no launch call).
 *
 * Where CUDA blocks a host thread outside the waits: a stream holds at
 * most XPU_FAKEGPU_QUEUE_DEPTH operations not yet started (default 1024,
 * as a GPU's roughly 1,000 pending launches behind an unfinished kernel),
 * and a call that queues one more waits, as the schedule says (spinning
 * by default), until a slot frees; with CUDA_LAUNCH_BLOCKING=1 every
 * launch (kernel, graph, and the fake NCCL's collectives, which are
 * kernels on a GPU) waits for its own operation to finish; allocations,
 * frees, synchronous memsets and copies, and context teardown wait for
 * the whole device; cuModuleLoadData "compiles" the fake PTX it is given
 * for as long as the PTX says, busy on the CPU.
 *
 * A launch on a GPU writes a command into memory the GPU reads and wakes
 * no host thread; here an executor asleep on an empty stream is woken by
 * each launch (a futex call, and on another CPU an interrupt), a host cost
 * a real launch does not have. XPU_FAKEGPU_DOORBELL=lazy takes it away
 * where the host's cost per launch is measured (trainstep): an executor is
 * woken only when its stream holds LAZY_BATCH operations, when the host
 * waits for the device or polls it (synchronizes, queries, synchronous
 * calls, a full stream), and by itself every LAZY_TICK_NS; until then the
 * work waits queued, as behind a busy GPU. */
#define _GNU_SOURCE
#include "vendor.h"
#include "driver.h"
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the device ---- */

enum { OP_KERNEL, OP_RECORD, OP_WAIT, OP_HOST, OP_MEMCPY, OP_DELAY, OP_GRAPH };

struct op {
	int type;
	const void *fn;
	void *ptr, *ptr2;
	uint64_t n;
	uint64_t p[FG_MAX_PARAMS];
};

#define RING 4096

struct fg_graph {
	int n, cap;
	struct op *ops;
};

struct fg_stream {
	pthread_mutex_t mu;
	pthread_cond_t work, space;
	/* next op to start (the executor's alone to move, without the lock: a
	 * caller reads it under the lock, or without it waiting for a slot),
	 * next free slot (under the lock) */
	_Atomic uint64_t head;
	uint64_t tail;
	int idle;
	_Atomic int full; /* callers asleep waiting for a slot */
	_Atomic uint64_t done; /* ops finished */
	int id;
	pthread_t th;
	struct fg_graph *capture; /* while capturing: where this stream's work goes */
	struct fg_stream *next;
	struct op ring[RING];
};

struct fg_event {
	_Atomic uint64_t rec_gen, done_gen;
	struct timespec t;
	unsigned flags;
};

/* Host threads asleep in a blocking wait (fg_block_wait), each until its
 * counter reaches its target: woken once, when it does, as a GPU's
 * completion interrupt wakes a blocking synchronize once; woken at every
 * op instead, a synchronize behind 400 launches slept and woke a dozen
 * times a step, and the twin (trainstep) charged its calling thread with
 * switches a real step does not make. */
struct waiter {
	_Atomic uint64_t *ctr;
	uint64_t target;
	pthread_cond_t cv;
	struct waiter *next;
};
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* g_waitlist */
static struct waiter *g_waitlist;
static _Atomic int g_waiters;
static pthread_mutex_t g_streams_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fg_stream *g_streams;
static int g_nstreams;
static struct fg_stream *g_default;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic unsigned g_sched = CU_CTX_SCHED_AUTO;

/* env_is says whether the variable name is value, read once into *cache
 * (-1: not read yet). */
static int env_is(_Atomic int *cache, const char *name, const char *value)
{
	int v = atomic_load(cache);
	if (v < 0) {
		const char *e = getenv(name);
		v = e && !strcmp(e, value);
		atomic_store(cache, v);
	}
	return v;
}

/* The lazy doorbell (see the top): XPU_FAKEGPU_DOORBELL=lazy. */
#define LAZY_BATCH 256
#define LAZY_TICK_NS 2000000
static int lazy_doorbell(void)
{
	static _Atomic int lazy = -1;
	return env_is(&lazy, "XPU_FAKEGPU_DOORBELL", "lazy");
}

/* kick_streams wakes every idle executor with work queued: the host is
 * about to wait for the device, or polls it. Needed with the lazy
 * doorbell only. */
static void kick_streams(void)
{
	if (!lazy_doorbell())
		return;
	pthread_mutex_lock(&g_streams_mu);
	for (struct fg_stream *s = g_streams; s; s = s->next) {
		pthread_mutex_lock(&s->mu);
		if (s->idle && s->head != s->tail)
			pthread_cond_signal(&s->work);
		pthread_mutex_unlock(&s->mu);
	}
	pthread_mutex_unlock(&g_streams_mu);
}

/* notify_done wakes the waiters on ctr that it reached; called after each
 * move of a counter a waiter may wait on. A waiter counts itself in
 * g_waiters before it reads its counter, and the mover reads g_waiters
 * after its move (both sequentially consistent): one of them sees the
 * other's. */
static void notify_done(_Atomic uint64_t *ctr)
{
	if (atomic_load(&g_waiters) == 0)
		return;
	uint64_t v = atomic_load(ctr);
	pthread_mutex_lock(&g_mu);
	for (struct waiter *w = g_waitlist; w; w = w->next)
		if (w->ctr == ctr && v >= w->target)
			pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&g_mu);
}

/* sleep in a futex until *ctr >= target: blocking sync, and every wait of
 * an executor (a stream waiting on another stream's event) */
static NOINLINE void fg_block_wait(_Atomic uint64_t *ctr, uint64_t target)
{
	struct waiter w = {.ctr = ctr, .target = target};
	pthread_cond_init(&w.cv, NULL);
	pthread_mutex_lock(&g_mu);
	w.next = g_waitlist;
	g_waitlist = &w;
	atomic_fetch_add(&g_waiters, 1);
	while (atomic_load(ctr) < target)
		pthread_cond_wait(&w.cv, &g_mu);
	atomic_fetch_sub(&g_waiters, 1);
	for (struct waiter **p = &g_waitlist; *p; p = &(*p)->next)
		if (*p == &w) {
			*p = w.next;
			break;
		}
	pthread_mutex_unlock(&g_mu);
	pthread_cond_destroy(&w.cv);
}

static NOINLINE void fg_spin_wait(_Atomic uint64_t *ctr, uint64_t target)
{
	while (atomic_load_explicit(ctr, memory_order_acquire) < target)
		__builtin_ia32_pause();
}

static NOINLINE void fg_yield_wait(_Atomic uint64_t *ctr, uint64_t target)
{
	while (atomic_load_explicit(ctr, memory_order_acquire) < target)
		sched_yield();
}

/* the schedule in force: flags set by the program, else XPU_FAKEGPU_SCHED, else spin */
static unsigned sched_mode(void)
{
	unsigned m = atomic_load(&g_sched) & CU_CTX_SCHED_MASK;
	if (m == CU_CTX_SCHED_AUTO) {
		const char *e = getenv("XPU_FAKEGPU_SCHED");
		m = !e || !strcmp(e, "spin")   ? CU_CTX_SCHED_SPIN
		    : !strcmp(e, "yield")      ? CU_CTX_SCHED_YIELD
		    : !strcmp(e, "blocking")   ? CU_CTX_SCHED_BLOCKING_SYNC
					       : CU_CTX_SCHED_SPIN;
	}
	return m;
}

/* a host thread waits until *ctr >= target, as the schedule says */
static NOINLINE void fg_host_wait(_Atomic uint64_t *ctr, uint64_t target)
{
	if (atomic_load(ctr) >= target)
		return;
	kick_streams();
	switch (sched_mode()) {
	case CU_CTX_SCHED_BLOCKING_SYNC:
		fg_block_wait(ctr, target);
		break;
	case CU_CTX_SCHED_YIELD:
		fg_yield_wait(ctr, target);
		break;
	default:
		fg_spin_wait(ctr, target);
		break;
	}
}

static NOINLINE void fg_run_kernel(const struct op *o)
{
	((fg_kernel_fn)o->fn)(o->p);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* graph execs this device made; any other handle is an opaque 20 µs graph */
#define MAX_GRAPHS 256
static struct fg_graph *g_execs[MAX_GRAPHS];
static _Atomic int g_nexecs;

static struct fg_graph *known_exec(void *h)
{
	int n = atomic_load(&g_nexecs);
	for (int i = 0; i < n && i < MAX_GRAPHS; i++)
		if (g_execs[i] == h)
			return h;
	return NULL;
}

static void run_op(struct op *o);

static NOINLINE void fg_run_graph(struct fg_graph *g)
{
	if (!g) {
		sleep_ns(20000);
		return;
	}
	for (int i = 0; i < g->n; i++)
		run_op(&g->ops[i]);
}

static void run_op(struct op *o)
{
	switch (o->type) {
	case OP_KERNEL:
		fg_run_kernel(o);
		break;
	case OP_RECORD: {
		struct fg_event *e = o->ptr;
		clock_gettime(CLOCK_MONOTONIC, &e->t);
		atomic_store(&e->done_gen, o->n);
		notify_done(&e->done_gen);
		break;
	}
	case OP_WAIT:
		kick_streams();
		fg_block_wait(&((struct fg_event *)o->ptr)->done_gen, o->n);
		break;
	case OP_HOST:
		((fg_host_fn)o->fn)(o->ptr);
		break;
	case OP_MEMCPY:
		if (o->ptr && o->ptr2 && o->n)
			memmove(o->ptr, o->ptr2, o->n);
		sleep_ns(2000 + o->n / 20); /* about 20 GB/s */
		break;
	case OP_DELAY:
		sleep_ns(o->n);
		break;
	case OP_GRAPH:
		fg_run_graph(o->ptr);
		break;
	}
}

/* An executor takes the ops queued on its stream, EXEC_BATCH at most, in
 * one turn of the lock and runs them one by one, each counted started
 * (head) as it starts: a stream still holds at most its depth of ops not
 * started, and a caller queueing more meets the lock free but for that
 * turn. Taken one at a time under the lock, the caller's launches waited
 * in the lock's futex behind the executor's turns, a cost a GPU's host
 * does not pay. */
#define EXEC_BATCH 64
static NOINLINE void *fg_executor_main(void *arg)
{
	struct fg_stream *s = arg;
	static _Thread_local struct op ops[EXEC_BATCH];
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (s->head == s->tail) {
			s->idle = 1;
			if (lazy_doorbell()) { /* asleep at most LAZY_TICK_NS */
				struct timespec t;
				clock_gettime(CLOCK_REALTIME, &t);
				t.tv_nsec += LAZY_TICK_NS;
				if (t.tv_nsec >= 1000000000) {
					t.tv_sec++;
					t.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&s->work, &s->mu, &t);
			} else {
				pthread_cond_wait(&s->work, &s->mu);
			}
			s->idle = 0;
		}
		uint64_t head = s->head, n = s->tail - head;
		if (n > EXEC_BATCH)
			n = EXEC_BATCH;
		for (uint64_t i = 0; i < n; i++)
			ops[i] = s->ring[(head + i) % RING];
		pthread_mutex_unlock(&s->mu);
		for (uint64_t i = 0; i < n; i++) {
			/* started: its slot is free (a caller about to sleep for
			 * one counts itself in full, then reads head again, under
			 * the lock) */
			atomic_store(&s->head, head + i + 1);
			if (atomic_load(&s->full)) {
				pthread_mutex_lock(&s->mu);
				pthread_cond_broadcast(&s->space);
				pthread_mutex_unlock(&s->mu);
			}
			run_op(&ops[i]);
			atomic_fetch_add(&s->done, 1);
			notify_done(&s->done);
		}
	}
	return NULL;
}

static struct fg_stream *new_stream(void)
{
	struct fg_stream *s = calloc(1, sizeof(*s));
	char name[16];
	if (!s)
		return NULL;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->space, NULL);
	pthread_mutex_lock(&g_streams_mu);
	s->id = g_nstreams++;
	s->next = g_streams;
	g_streams = s;
	pthread_mutex_unlock(&g_streams_mu);
	if (pthread_create(&s->th, NULL, fg_executor_main, s) != 0)
		return NULL;
	snprintf(name, sizeof(name), "gpu-stream%d", s->id);
	pthread_setname_np(s->th, name);
	return s;
}

static void init_default(void) { g_default = new_stream(); }

/* getenv_int is an integer environment variable, or def when unset */
static long getenv_int(const char *name, long def)
{
	const char *e = getenv(name);
	return e && *e ? strtol(e, NULL, 10) : def;
}

/* queue_depth is how many operations a stream holds before the next waits
 * for a slot: XPU_FAKEGPU_QUEUE_DEPTH, 1 to RING, read once */
#define QUEUE_DEPTH 1024
static long queue_depth(void)
{
	static _Atomic long depth;
	long d = atomic_load(&depth);
	if (!d) {
		d = getenv_int("XPU_FAKEGPU_QUEUE_DEPTH", QUEUE_DEPTH);
		d = d < 1 ? 1 : d > RING ? RING : d;
		atomic_store(&depth, d);
	}
	return d;
}

/* launch_blocking says whether CUDA_LAUNCH_BLOCKING=1: every launch waits
 * for its operation to finish; read once */
static int launch_blocking(void)
{
	static _Atomic int on = -1;
	return env_is(&on, "CUDA_LAUNCH_BLOCKING", "1");
}

static struct fg_stream *resolve(CUstream s)
{
	/* 0 = legacy default stream, 1 = CU_STREAM_LEGACY, 2 = CU_STREAM_PER_THREAD */
	if ((uintptr_t)s <= 2) {
		pthread_once(&g_once, init_default);
		return g_default;
	}
	return (struct fg_stream *)s;
}

static int graph_add(struct fg_graph *g, const struct op *o)
{
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 16;
		struct op *ops = realloc(g->ops, (size_t)cap * sizeof(*ops));
		if (!ops)
			return -1;
		g->cap = cap;
		g->ops = ops;
	}
	g->ops[g->n++] = *o;
	return 0;
}

/* enqueue returns the position after the op: stream->done reaches it when
 * the op ran; 0 when the op went into the graph the stream captures */
static uint64_t enqueue(struct fg_stream *s, const struct op *o)
{
	uint64_t pos;
	pthread_mutex_lock(&s->mu);
	if (s->capture) {
		graph_add(s->capture, o);
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	uint64_t depth = (uint64_t)queue_depth();
	while (s->tail - atomic_load(&s->head) >= depth) {
		/* full: wait for the executor to start one, as the schedule says */
		if (sched_mode() == CU_CTX_SCHED_BLOCKING_SYNC) {
			atomic_fetch_add(&s->full, 1);
			if (s->tail - atomic_load(&s->head) >= depth)
				pthread_cond_wait(&s->space, &s->mu);
			atomic_fetch_sub(&s->full, 1);
			continue;
		}
		uint64_t want = s->tail - depth + 1;
		pthread_mutex_unlock(&s->mu);
		if (sched_mode() == CU_CTX_SCHED_YIELD)
			fg_yield_wait(&s->head, want);
		else
			fg_spin_wait(&s->head, want);
		pthread_mutex_lock(&s->mu);
	}
	s->ring[s->tail % RING] = *o;
	pos = ++s->tail;
	/* an idle executor is woken by each op, lazily by a batch of them */
	uint64_t batch = lazy_doorbell() ? (depth < LAZY_BATCH ? depth : LAZY_BATCH) : 1;
	if (s->idle && s->tail - s->head >= batch)
		pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	return pos;
}

static uint64_t stream_tail(struct fg_stream *s)
{
	uint64_t t;
	pthread_mutex_lock(&s->mu);
	t = s->tail;
	pthread_mutex_unlock(&s->mu);
	return t;
}

static NOINLINE void sync_stream(struct fg_stream *s) { fg_host_wait(&s->done, stream_tail(s)); }

static NOINLINE void sync_all(void)
{
	struct fg_stream *s;
	pthread_once(&g_once, init_default);
	pthread_mutex_lock(&g_streams_mu);
	s = g_streams;
	pthread_mutex_unlock(&g_streams_mu);
	/* the list only grows at its head: walking from a snapshot is safe */
	for (; s; s = s->next)
		fg_host_wait(&s->done, stream_tail(s));
}

/* ---- private entry points (the fake NCCL's collectives) ---- */

/* launched queues o on s and, with CUDA_LAUNCH_BLOCKING=1, waits for it to
 * finish, as a launch does then */
static void launched(struct fg_stream *s, const struct op *o)
{
	uint64_t pos = enqueue(s, o);
	if (pos && launch_blocking())
		fg_host_wait(&s->done, pos);
}

DRVAPI CUresult fakegpu_drv_enqueue_host(CUstream stream, CUhostFn fn, void *ctx, int collective)
{
	struct op o = {.type = OP_HOST, .fn = (const void *)fn, .ptr = ctx, .n = (uint64_t)collective};
	if (collective) /* a kernel on a GPU */
		launched(resolve(stream), &o);
	else
		enqueue(resolve(stream), &o);
	return CUDA_SUCCESS;
}

/* ---- initialization, devices, contexts ---- */

DRVAPI CUresult cuInit(unsigned flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuDriverGetVersion(int *v)
{
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 13000;
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuDeviceGetCount(int *n)
{
	const char *e = getenv("XPU_FAKEGPU_DEVICES");
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	*n = e ? atoi(e) : 8;
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	int n;
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	cuDeviceGetCount(&n);
	if (ordinal < 0 || ordinal >= n)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

/* The scheduling part of the flags (CU_CTX_SCHED_*) rules every host wait. */
DRVAPI CUresult cuCtxSetFlags(unsigned flags)
{
	atomic_store(&g_sched, flags & CU_CTX_SCHED_MASK);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuCtxGetFlags(unsigned *flags)
{
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = atomic_load(&g_sched);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned flags)
{
	(void)d;
	return cuCtxSetFlags(flags);
}

/* Tearing a context down waits for its work first. */
DRVAPI CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	(void)ctx;
	sync_all();
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	(void)d;
	sync_all();
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
	(void)d;
	sync_all();
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuCtxSynchronize(void)
{
	sync_all();
	return CUDA_SUCCESS;
}

/* CUDA 13's name, what cudaDeviceSynchronize calls; ctx NULL is the current one */
DRVAPI CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	(void)ctx;
	sync_all();
	return CUDA_SUCCESS;
}

/* ---- memory: device memory is host memory ---- */

/* Allocations and frees wait for the device, as cudaMalloc and cudaFree
 * synchronize every stream (PyTorch's empty_cache() frees its cached
 * blocks with them). */
static CUresult alloc(CUdeviceptr *p, size_t n)
{
	void *m;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	sync_all();
	if (!(m = calloc(1, n ? n : 1)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

static CUresult release(void *p)
{
	sync_all();
	free(p);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return alloc(p, n); }
DRVAPI CUresult cuMemFree_v2(CUdeviceptr p) { return release((void *)(uintptr_t)p); }
DRVAPI CUresult cuMemAllocHost_v2(void **p, size_t n) { return alloc((CUdeviceptr *)p, n); }
DRVAPI CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags)
{
	(void)flags;
	return alloc((CUdeviceptr *)p, n);
}
DRVAPI CUresult cuMemFreeHost(void *p) { return release(p); }

/* Page-locking host memory waits for the device too (an implicit
 * synchronization); the fake's host memory needs nothing else. */
DRVAPI CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	(void)n, (void)flags;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	sync_all();
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuMemHostUnregister(void *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	sync_all();
	return CUDA_SUCCESS;
}

/* a synchronous copy on the legacy default stream waits for all prior work */
static CUresult copy_sync(void *dst, const void *src, size_t n)
{
	sync_all();
	if (dst && src && n)
		memmove(dst, src, n);
	return CUDA_SUCCESS;
}

static CUresult copy_async(void *dst, const void *src, size_t n, CUstream s)
{
	struct op o = {.type = OP_MEMCPY, .ptr = dst, .ptr2 = (void *)src, .n = n};
	enqueue(resolve(s), &o);
	return CUDA_SUCCESS;
}

#define PTR(d) ((void *)(uintptr_t)(d))

DRVAPI CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(PTR(dst), PTR(src), n); }
DRVAPI CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(PTR(dst), PTR(src), n); }
DRVAPI CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return copy_sync(PTR(dst), src, n); }
DRVAPI CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) { return copy_sync(PTR(dst), src, n); }
DRVAPI CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return copy_sync(dst, PTR(src), n); }
DRVAPI CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return copy_sync(dst, PTR(src), n); }
DRVAPI CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(PTR(dst), PTR(src), n); }
DRVAPI CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(PTR(dst), PTR(src), n); }

DRVAPI CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async(PTR(dst), PTR(src), n, s);
}
DRVAPI CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async(PTR(dst), PTR(src), n, s);
}
DRVAPI CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return copy_async(PTR(dst), src, n, s);
}
DRVAPI CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return copy_async(PTR(dst), src, n, s);
}
DRVAPI CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async(dst, PTR(src), n, s);
}
DRVAPI CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async(dst, PTR(src), n, s);
}
DRVAPI CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async(PTR(dst), PTR(src), n, s);
}
DRVAPI CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy_async(PTR(dst), PTR(src), n, s);
}

/* synchronous memsets: after all prior work of the device, as on the
 * legacy default stream */
DRVAPI CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n)
{
	sync_all();
	if (p)
		memset(PTR(p), v, n);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned v, size_t n)
{
	sync_all();
	for (size_t i = 0; p && i < n; i++)
		((unsigned *)PTR(p))[i] = v;
	return CUDA_SUCCESS;
}

/* ---- modules and kernels ---- */

/* A module is a shared object holding kernels (libfakekernels.so). */
DRVAPI CUresult cuModuleLoad(CUmodule *m, const char *path)
{
	if (!m || !path)
		return CUDA_ERROR_INVALID_VALUE;
	*m = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	return *m ? CUDA_SUCCESS : CUDA_ERROR_FILE_NOT_FOUND;
}

/* The fake's PTX: "//fakeptx jit_ms=MS path=LIB", compiled (the CPU kept
 * busy, no device work) for MS milliseconds into the module LIB, as the
 * driver compiles real PTX for the GPU it runs on (Triton's first launch
 * of a kernel, a library built for an older GPU). */
static NOINLINE void fg_jit_compile(long ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (volatile int i = 0; i < 100000; i++)
			;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

DRVAPI CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	char path[4096];
	long ms;
	if (!m || !image)
		return CUDA_ERROR_INVALID_VALUE;
	if (sscanf(image, "//fakeptx jit_ms=%ld path=%4095s", &ms, path) != 2)
		return CUDA_ERROR_INVALID_IMAGE;
	fg_jit_compile(ms);
	return cuModuleLoad(m, path);
}

DRVAPI CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, void *opts, void **vals)
{
	(void)n, (void)opts, (void)vals;
	return cuModuleLoadData(m, image);
}

DRVAPI CUresult cuModuleUnload(CUmodule m)
{
	(void)m; /* kernels may still be queued: keep the code mapped */
	return CUDA_SUCCESS;
}

/* Kernel handles (CUfunction, CUkernel) are opaque, as on NVIDIA's
 * driver: a slot of a table that no symbol names, one per kernel function,
 * so only the call that returned a handle tells its kernel's name. */
struct fg_cukernel {
	void *fn;
};

#define MAX_CUKERNELS 256
static struct fg_cukernel cukernels[MAX_CUKERNELS];
static int ncukernels;
static pthread_mutex_t g_handles_mu = PTHREAD_MUTEX_INITIALIZER;

static struct fg_cukernel *find_handle(void *fn, int from, int to)
{
	for (int i = from; i < to; i++)
		if (cukernels[i].fn == fn)
			return &cukernels[i];
	return NULL;
}

/* the handle of a kernel function; NULL when the table is full */
static struct fg_cukernel *handle_of(void *fn)
{
	int n = __atomic_load_n(&ncukernels, __ATOMIC_ACQUIRE);
	struct fg_cukernel *h = find_handle(fn, 0, n);
	if (h)
		return h;
	pthread_mutex_lock(&g_handles_mu);
	int m = __atomic_load_n(&ncukernels, __ATOMIC_ACQUIRE);
	if (!(h = find_handle(fn, n, m)) && m < MAX_CUKERNELS) {
		h = &cukernels[m];
		h->fn = fn;
		__atomic_store_n(&ncukernels, m + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g_handles_mu);
	return h;
}

DRVAPI CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	void *fn;
	if (!f || !m || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(fn = dlsym(m, name)))
		return CUDA_ERROR_NOT_FOUND;
	return (*f = handle_of(fn)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

DRVAPI CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *path, void *jit_opts, void **jit_vals,
				      unsigned njit, void *lib_opts, void **lib_vals, unsigned nlib)
{
	(void)jit_opts, (void)jit_vals, (void)njit, (void)lib_opts, (void)lib_vals, (void)nlib;
	return cuModuleLoad(lib, path);
}

DRVAPI CUresult cuLibraryUnload(CUlibrary lib) { return cuModuleUnload(lib); }

/* A library loaded from data is the image itself; one loaded from a file
 * is a dlopen handle, whose first word (l_addr) is never the magic. */
DRVAPI CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, void *jit_opts, void **jit_vals, unsigned njit,
				  void *lib_opts, void **lib_vals, unsigned nlib)
{
	(void)jit_opts, (void)jit_vals, (void)njit, (void)lib_opts, (void)lib_vals, (void)nlib;
	if (!lib || !code)
		return CUDA_ERROR_INVALID_VALUE;
	if (((const struct fg_image *)code)->magic != FG_IMAGE_MAGIC)
		return CUDA_ERROR_INVALID_IMAGE;
	*lib = (CUlibrary)code;
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
	const struct fg_image *img = lib;
	void *fn = NULL;
	if (!k || !lib || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (img->magic != FG_IMAGE_MAGIC)
		fn = dlsym(lib, name);
	else
		for (int i = 0; i < img->n && !fn; i++)
			if (!strcmp(img->k[i].name, name))
				fn = (void *)img->k[i].fn;
	if (!fn)
		return CUDA_ERROR_NOT_FOUND;
	return (*k = handle_of(fn)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* A kernel's CUfunction in the current context: a handle of its own, as
 * on NVIDIA's driver (the same one at every call for the same kernel),
 * named only through the CUkernel it came from. cuBLASLt looks it up
 * before every launch of its kernels and launches it; the runtime looks
 * it up for cudaFuncGetAttributes and launches the CUkernel. */
static struct fg_cukernel cufunctions[MAX_CUKERNELS];

DRVAPI CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
	struct fg_cukernel *h = k;
	if (!f || !k || h < cukernels || h >= cukernels + MAX_CUKERNELS)
		return CUDA_ERROR_INVALID_VALUE;
	cufunctions[h - cukernels].fn = h->fn;
	*f = &cufunctions[h - cukernels];
	return CUDA_SUCCESS;
}

/* How many blocks of f fit on a multiprocessor (cuBLASLt asks before its
 * launches): the fake device says 4. */
DRVAPI CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction f, int block, size_t shmem,
								  unsigned flags)
{
	(void)block, (void)shmem, (void)flags;
	if (!n || !f)
		return CUDA_ERROR_INVALID_VALUE;
	*n = 4;
	return CUDA_SUCCESS;
}

/* ---- launches ---- */

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		       void **params, CUstream stream)
{
	struct op o = {.type = OP_KERNEL};
	if (!f || !gx || !gy || !gz || !bx || !by || !bz)
		return CUDA_ERROR_INVALID_VALUE;
	if (((struct fg_cukernel *)f >= cukernels && (struct fg_cukernel *)f < cukernels + MAX_CUKERNELS) ||
	    ((struct fg_cukernel *)f >= cufunctions && (struct fg_cukernel *)f < cufunctions + MAX_CUKERNELS))
		f = ((struct fg_cukernel *)f)->fn;
	/* else a kernel function's address, which the fake device accepts too */
	o.fn = f;
	for (int i = 0; params && i < FG_MAX_PARAMS && params[i]; i++)
		o.p[i] = *(const uint64_t *)params[i];
	launched(resolve(stream), &o);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra)
{
	(void)shmem, (void)extra;
	return launch(f, gx, gy, gz, bx, by, bz, params, stream);
}

DRVAPI CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
				    unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra)
{
	(void)shmem, (void)extra;
	return launch(f, gx, gy, gz, bx, by, bz, params, stream);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params)
{
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, params,
		      c->hStream);
}

/* Triton 3.x's launcher and NCCL >= 2.22.3 launch with this */
DRVAPI CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	(void)extra;
	return launch_ex(config, f, params);
}

DRVAPI CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	(void)extra;
	return launch_ex(config, f, params);
}

DRVAPI CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
					  unsigned by, unsigned bz, unsigned shmem, CUstream stream, void **params)
{
	(void)shmem;
	return launch(f, gx, gy, gz, bx, by, bz, params, stream);
}

DRVAPI CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
					       unsigned by, unsigned bz, unsigned shmem, CUstream stream,
					       void **params)
{
	(void)shmem;
	return launch(f, gx, gy, gz, bx, by, bz, params, stream);
}

static CUresult host_func(CUstream s, CUhostFn fn, void *data)
{
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	return fakegpu_drv_enqueue_host(s, fn, data, 0);
}

DRVAPI CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) { return host_func(s, fn, data); }
DRVAPI CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data) { return host_func(s, fn, data); }

/* ---- graphs: stream capture and replay ---- */

DRVAPI CUresult cuStreamBeginCapture_v2(CUstream st, int mode)
{
	struct fg_stream *s = resolve(st);
	struct fg_graph *g;
	(void)mode;
	if ((uintptr_t)st <= 2) /* the legacy stream cannot be captured */
		return CUDA_ERROR_INVALID_VALUE;
	if (!(g = calloc(1, sizeof(*g))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&s->mu);
	if (s->capture) {
		pthread_mutex_unlock(&s->mu);
		free(g);
		return CUDA_ERROR_INVALID_VALUE;
	}
	s->capture = g;
	pthread_mutex_unlock(&s->mu);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuStreamEndCapture(CUstream st, CUgraph *graph)
{
	struct fg_stream *s = resolve(st);
	if (!graph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&s->mu);
	*graph = s->capture;
	s->capture = NULL;
	pthread_mutex_unlock(&s->mu);
	return *graph ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

DRVAPI CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
	struct fg_graph *g = graph, *x;
	(void)flags;
	if (!exec || !g)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(x = calloc(1, sizeof(*x))) || !(x->ops = calloc((size_t)g->n + 1, sizeof(*x->ops)))) {
		free(x);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(x->ops, g->ops, (size_t)g->n * sizeof(*x->ops));
	x->n = x->cap = g->n;
	int i = atomic_fetch_add(&g_nexecs, 1);
	if (i >= MAX_GRAPHS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g_execs[i] = x;
	*exec = x;
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuGraphExecDestroy(CUgraphExec exec)
{
	(void)exec; /* replays may still be queued: keep it */
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuGraphDestroy(CUgraph graph)
{
	struct fg_graph *g = graph;
	if (g) {
		free(g->ops);
		free(g);
	}
	return CUDA_SUCCESS;
}

/* One operation on the stream: the graph's kernels make no launch call. */
static CUresult graph_launch(CUgraphExec exec, CUstream s)
{
	struct op o = {.type = OP_GRAPH};
	if (!exec)
		return CUDA_ERROR_INVALID_VALUE;
	o.ptr = known_exec(exec);
	launched(resolve(s), &o);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return graph_launch(exec, s); }
DRVAPI CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return graph_launch(exec, s); }

/* ---- streams ---- */

DRVAPI CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
	(void)flags;
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&g_once, init_default);
	*s = new_stream();
	return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

DRVAPI CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio)
{
	(void)prio;
	return cuStreamCreate(s, flags);
}

/* The executor stays (idle) after destroy: work already queued still completes. */
DRVAPI CUresult cuStreamDestroy_v2(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuStreamSynchronize(CUstream s)
{
	sync_stream(resolve(s));
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuStreamSynchronize_ptsz(CUstream s)
{
	sync_stream(resolve(s));
	return CUDA_SUCCESS;
}

static CUresult stream_query(CUstream st)
{
	struct fg_stream *s = resolve(st);
	if (atomic_load(&s->done) >= stream_tail(s))
		return CUDA_SUCCESS;
	kick_streams();
	return CUDA_ERROR_NOT_READY;
}

DRVAPI CUresult cuStreamQuery(CUstream s) { return stream_query(s); }
DRVAPI CUresult cuStreamQuery_ptsz(CUstream s) { return stream_query(s); }

static CUresult stream_wait_event(CUstream s, CUevent ev)
{
	struct fg_event *e = ev;
	struct op o = {.type = OP_WAIT, .ptr = e};
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	o.n = atomic_load(&e->rec_gen);
	if (o.n == 0)
		return CUDA_SUCCESS; /* never recorded: nothing to wait for */
	enqueue(resolve(s), &o);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
	(void)flags;
	return stream_wait_event(s, e);
}

DRVAPI CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags)
{
	(void)flags;
	return stream_wait_event(s, e);
}

/* ---- events ---- */

DRVAPI CUresult cuEventCreate(CUevent *ev, unsigned flags)
{
	struct fg_event *e;
	if (!ev)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(e = calloc(1, sizeof(*e))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->flags = flags;
	*ev = e;
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuEventDestroy_v2(CUevent ev)
{
	struct fg_event *e = ev;
	/* Never waits, as the real one: an event whose record is still queued
	 * is left to the stream (its few bytes are not freed). */
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (atomic_load(&e->done_gen) >= atomic_load(&e->rec_gen))
		free(e);
	return CUDA_SUCCESS;
}

static CUresult event_record(CUevent ev, CUstream s)
{
	struct fg_event *e = ev;
	struct op o = {.type = OP_RECORD, .ptr = e};
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	o.n = atomic_fetch_add(&e->rec_gen, 1) + 1;
	if (!enqueue(resolve(s), &o))
		atomic_fetch_sub(&e->rec_gen, 1); /* captured: recorded when the graph runs */
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuEventRecord(CUevent e, CUstream s) { return event_record(e, s); }
DRVAPI CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record(e, s); }

DRVAPI CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags)
{
	(void)flags;
	return event_record(e, s);
}

DRVAPI CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned flags)
{
	(void)flags;
	return event_record(e, s);
}

DRVAPI CUresult cuEventQuery(CUevent ev)
{
	struct fg_event *e = ev;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (atomic_load(&e->done_gen) >= atomic_load(&e->rec_gen))
		return CUDA_SUCCESS;
	kick_streams();
	return CUDA_ERROR_NOT_READY;
}

DRVAPI CUresult cuEventSynchronize(CUevent ev)
{
	struct fg_event *e = ev;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	fg_host_wait(&e->done_gen, atomic_load(&e->rec_gen));
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
	struct fg_event *a = start, *b = end;
	uint64_t ra, rb;
	if (!ms || !a || !b)
		return CUDA_ERROR_INVALID_VALUE;
	ra = atomic_load(&a->rec_gen);
	rb = atomic_load(&b->rec_gen);
	if (!ra || !rb || (a->flags & CU_EVENT_DISABLE_TIMING) || (b->flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_HANDLE;
	if (atomic_load(&a->done_gen) < ra || atomic_load(&b->done_gen) < rb)
		return CUDA_ERROR_NOT_READY;
	*ms = (float)((double)(b->t.tv_sec - a->t.tv_sec) * 1e3 + (double)(b->t.tv_nsec - a->t.tv_nsec) / 1e6);
	return CUDA_SUCCESS;
}

DRVAPI CUresult cuGetErrorString(CUresult e, const char **s)
{
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	switch (e) {
	case CUDA_SUCCESS: *s = "no error"; break;
	case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
	case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
	case CUDA_ERROR_INVALID_DEVICE: *s = "invalid device ordinal"; break;
	case CUDA_ERROR_FILE_NOT_FOUND: *s = "file not found"; break;
	case CUDA_ERROR_INVALID_HANDLE: *s = "invalid resource handle"; break;
	case CUDA_ERROR_NOT_FOUND: *s = "named symbol not found"; break;
	case CUDA_ERROR_NOT_READY: *s = "device not ready"; break;
	default: *s = "unknown error"; break;
	}
	return CUDA_SUCCESS;
}
