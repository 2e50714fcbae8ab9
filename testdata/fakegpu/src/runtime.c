/* runtime.c: the fake CUDA runtime (libcudart.so.12) and, built with
 * -DFAKE_MACA, the fake MACA runtime (libmcruntime.so.2).
 *
 * Every stream has its own executor thread (the simulated device engine of
 * that stream) that drains a lock-protected ring of operations in FIFO order:
 * kernels (the host stub function runs on the executor), event records,
 * waits on events of other streams, asynchronous copies and host callbacks
 * (the collectives of the fake NCCL). Streams run concurrently. Hosts wait
 * for completion on one process-wide condition variable.
 *
 * The CUDA build makes its calls the way NVIDIA's runtime does: through
 * the driver (libcuda.so.1 beside it), which it dlopens when it is loaded;
 * the driver does the work with the FG(...) entry points below. The MACA
 * build, and a CUDA build with no driver beside it, do it themselves. */
#define _GNU_SOURCE
#include "vendor.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifndef FAKE_MACA
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#endif

enum { OP_KERNEL, OP_RECORD, OP_WAIT, OP_HOST, OP_MEMCPY, OP_DELAY };

struct op {
	int type;
	const void *fn;
	void *ptr, *ptr2;
	uint64_t n;
	uint64_t p[FG_MAX_PARAMS];
};

#define RING 4096

struct fg_stream {
	pthread_mutex_t mu;
	pthread_cond_t work, space;
	uint64_t head, tail; /* next op to run, next free slot */
	int idle, full;
	_Atomic uint64_t done; /* ops finished */
	int id;
	pthread_t th;
	struct fg_stream *next;
	struct op ring[RING];
};

struct fg_event {
	_Atomic uint64_t rec_gen, done_gen;
	struct timespec t;
	unsigned flags;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* completion waits */
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static _Atomic int g_waiters;
static pthread_mutex_t g_streams_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fg_stream *g_streams;
static int g_nstreams;
static struct fg_stream *g_default;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static __thread int t_device;
static __thread rterr_t t_last_error;

static void notify_done(void)
{
	if (atomic_load(&g_waiters) > 0) {
		pthread_mutex_lock(&g_mu);
		pthread_cond_broadcast(&g_cv);
		pthread_mutex_unlock(&g_mu);
	}
}

/* host-side wait until *ctr >= target */
static NOINLINE void fg_wait_counter(_Atomic uint64_t *ctr, uint64_t target)
{
	if (atomic_load(ctr) >= target)
		return;
	pthread_mutex_lock(&g_mu);
	atomic_fetch_add(&g_waiters, 1);
	while (atomic_load(ctr) < target)
		pthread_cond_wait(&g_cv, &g_mu);
	atomic_fetch_sub(&g_waiters, 1);
	pthread_mutex_unlock(&g_mu);
}

static NOINLINE void fg_run_kernel(const struct op *o)
{
	((fg_kernel_fn)o->fn)(o->p);
}

static NOINLINE void fg_stream_wait_event(struct fg_event *e, uint64_t gen)
{
	fg_wait_counter(&e->done_gen, gen);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) != 0)
		;
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
		break;
	}
	case OP_WAIT:
		fg_stream_wait_event(o->ptr, o->n);
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
	}
}

static NOINLINE void *fg_executor_main(void *arg)
{
	struct fg_stream *s = arg;
	struct op o;
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (s->head == s->tail) {
			s->idle = 1;
			pthread_cond_wait(&s->work, &s->mu);
			s->idle = 0;
		}
		o = s->ring[s->head % RING];
		s->head++;
		if (s->full)
			pthread_cond_signal(&s->space);
		pthread_mutex_unlock(&s->mu);
		run_op(&o);
		atomic_fetch_add(&s->done, 1);
		notify_done();
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

static struct fg_stream *resolve(rtstream_t s)
{
	/* 0 = legacy default stream, 1 = cudaStreamLegacy, 2 = cudaStreamPerThread */
	if ((uintptr_t)s <= 2) {
		pthread_once(&g_once, init_default);
		return g_default;
	}
	return s;
}

/* enqueue returns the position after the op: stream->done reaches it when the op ran */
static uint64_t enqueue(struct fg_stream *s, const struct op *o)
{
	uint64_t pos;
	pthread_mutex_lock(&s->mu);
	while (s->tail - s->head >= RING) {
		s->full = 1;
		pthread_cond_wait(&s->space, &s->mu);
	}
	s->full = 0;
	s->ring[s->tail % RING] = *o;
	pos = ++s->tail;
	if (s->idle)
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

static void sync_all(void)
{
	struct fg_stream *s;
	pthread_once(&g_once, init_default);
	pthread_mutex_lock(&g_streams_mu);
	s = g_streams;
	pthread_mutex_unlock(&g_streams_mu);
	/* the list only grows at its head: walking from a snapshot is safe */
	for (; s; s = s->next)
		fg_wait_counter(&s->done, stream_tail(s));
}

static rterr_t fail(rterr_t e)
{
	t_last_error = e;
	return e;
}

#ifndef FAKE_MACA
/* The driver's calls this runtime makes (cuda.h's signatures). */
typedef int (*cu_launch_fn)(const void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			    rtstream_t, void **, void **);
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shmem;
	rtstream_t stream;
	void *attrs;
	unsigned nattrs;
} cu_launch_config_t; /* CUlaunchConfig */
static struct {
	cu_launch_fn launch, launch_ptsz;
	int (*launch_ex)(const cu_launch_config_t *, const void *, void **, void **);
	int (*launch_ex_ptsz)(const cu_launch_config_t *, const void *, void **, void **);
	int (*graph_launch)(void *, rtstream_t);
	int (*memcpy_async)(void *, const void *, size_t, rtstream_t);
	int (*memcpy_sync)(void *, const void *, size_t);
	int (*event_record)(rtevent_t, rtstream_t);
	int (*event_query)(rtevent_t);
	int (*event_sync)(rtevent_t);
	int (*stream_sync)(rtstream_t);
	int (*stream_query)(rtstream_t);
	int (*stream_wait_event)(rtstream_t, rtevent_t, unsigned);
	int (*ctx_sync)(void);
} drv;

__attribute__((constructor)) static void load_driver(void)
{
	Dl_info info;
	char path[PATH_MAX];
	if (!dladdr((void *)load_driver, &info) || !info.dli_fname)
		return;
	snprintf(path, sizeof(path), "%s", info.dli_fname);
	char lib[PATH_MAX + 16];
	snprintf(lib, sizeof(lib), "%s/libcuda.so.1", dirname(path));
	void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		return;
#define DRV(field, name) drv.field = dlsym(h, name)
	DRV(launch, "cuLaunchKernel");
	DRV(launch_ptsz, "cuLaunchKernel_ptsz");
	DRV(launch_ex, "cuLaunchKernelEx");
	DRV(launch_ex_ptsz, "cuLaunchKernelEx_ptsz");
	DRV(graph_launch, "cuGraphLaunch");
	DRV(memcpy_async, "cuMemcpyAsync");
	DRV(memcpy_sync, "cuMemcpy");
	DRV(event_record, "cuEventRecord");
	DRV(event_query, "cuEventQuery");
	DRV(event_sync, "cuEventSynchronize");
	DRV(stream_sync, "cuStreamSynchronize");
	DRV(stream_query, "cuStreamQuery");
	DRV(stream_wait_event, "cuStreamWaitEvent");
	DRV(ctx_sync, "cuCtxSynchronize");
#undef DRV
}

/* FORWARD makes the call through the driver when it is there. */
#define FORWARD(field, ...)                                       \
	do {                                                      \
		if (drv.field) {                                  \
			int err_ = drv.field(__VA_ARGS__);        \
			return err_ ? fail(err_) : ERR_SUCCESS;   \
		}                                                 \
	} while (0)
#else
#define FORWARD(field, ...) do { } while (0)
#endif

/* ---- internal entry points for the driver library and the NCCL ---- */

API int FG(enqueue_kernel)(const void *func, void **args, rtstream_t stream)
{
	struct op o = {.type = OP_KERNEL, .fn = func};
	if (!func)
		return fail(ERR_INVALID_VALUE);
	for (int i = 0; args && i < FG_MAX_PARAMS && args[i]; i++)
		o.p[i] = *(const uint64_t *)args[i];
	enqueue(resolve(stream), &o);
	return ERR_SUCCESS;
}

API int FG(enqueue_host)(rtstream_t stream, fg_host_fn fn, void *ctx, int collective)
{
	struct op o = {.type = OP_HOST, .fn = (const void *)fn, .ptr = ctx, .n = (uint64_t)collective};
	enqueue(resolve(stream), &o);
	return ERR_SUCCESS;
}

/* ---- device management ---- */

API rterr_t RT(GetDeviceCount)(int *count)
{
	const char *e = getenv("XPU_FAKEGPU_DEVICES");
	if (!count)
		return fail(ERR_INVALID_VALUE);
	*count = e ? atoi(e) : 8;
	return ERR_SUCCESS;
}

API rterr_t RT(SetDevice)(int dev)
{
	int n;
	RT(GetDeviceCount)(&n);
	if (dev < 0 || dev >= n)
		return fail(ERR_INVALID_DEVICE);
	t_device = dev;
	return ERR_SUCCESS;
}

API rterr_t RT(GetDevice)(int *dev)
{
	if (!dev)
		return fail(ERR_INVALID_VALUE);
	*dev = t_device;
	return ERR_SUCCESS;
}

API int FG(device_sync)(void)
{
	sync_all();
	return ERR_SUCCESS;
}

API rterr_t RT(DeviceSynchronize)(void)
{
	FORWARD(ctx_sync);
	return FG(device_sync)();
}

API rterr_t RT(GetLastError)(void)
{
	rterr_t e = t_last_error;
	t_last_error = ERR_SUCCESS;
	return e;
}

API rterr_t RT(PeekAtLastError)(void) { return t_last_error; }

API const char *RT(GetErrorString)(rterr_t e)
{
	switch (e) {
	case ERR_SUCCESS: return "no error";
	case ERR_INVALID_VALUE: return "invalid argument";
	case ERR_MEMORY_ALLOCATION: return "out of memory";
	case ERR_INVALID_DEVICE: return "invalid device ordinal";
	case ERR_INVALID_RESOURCE_HANDLE: return "invalid resource handle";
	case ERR_NOT_READY: return "device not ready";
	default: return "unrecognized error code";
	}
}

API const char *RT(GetErrorName)(rterr_t e)
{
	switch (e) {
#ifdef FAKE_MACA
	case ERR_SUCCESS: return "mcSuccess";
	case ERR_NOT_READY: return "mcErrorNotReady";
	case ERR_INVALID_VALUE: return "mcErrorInvalidValue";
#else
	case ERR_SUCCESS: return "cudaSuccess";
	case ERR_NOT_READY: return "cudaErrorNotReady";
	case ERR_INVALID_VALUE: return "cudaErrorInvalidValue";
#endif
	default: return "unknown";
	}
}

/* ---- memory: device memory is host memory ---- */

API rterr_t RT(Malloc)(void **p, size_t n)
{
	if (!p)
		return fail(ERR_INVALID_VALUE);
	*p = calloc(1, n ? n : 1);
	return *p ? ERR_SUCCESS : fail(ERR_MEMORY_ALLOCATION);
}

API rterr_t RT(Free)(void *p)
{
	sync_all();
	free(p);
	return ERR_SUCCESS;
}

API rterr_t RT(MallocHost)(void **p, size_t n) { return RT(Malloc)(p, n); }
API rterr_t RT(FreeHost)(void *p) { return RT(Free)(p); }

API int FG(memcpy_sync)(void *dst, const void *src, size_t n)
{
	/* legacy default stream semantics: waits for all prior work of the device */
	sync_all();
	if (dst && src && n)
		memmove(dst, src, n);
	return ERR_SUCCESS;
}

static rterr_t memcpy_sync(void *dst, const void *src, size_t n)
{
	FORWARD(memcpy_sync, dst, src, n);
	return FG(memcpy_sync)(dst, src, n);
}

API rterr_t RT(Memcpy)(void *dst, const void *src, size_t n, int kind)
{
	(void)kind;
	return memcpy_sync(dst, src, n);
}

API rterr_t RT(Memcpy_ptds)(void *dst, const void *src, size_t n, int kind)
{
	(void)kind;
	return memcpy_sync(dst, src, n);
}

API int FG(memcpy_async)(void *dst, const void *src, size_t n, rtstream_t s)
{
	struct op o = {.type = OP_MEMCPY, .ptr = dst, .ptr2 = (void *)src, .n = n};
	enqueue(resolve(s), &o);
	return ERR_SUCCESS;
}

static rterr_t memcpy_async(void *dst, const void *src, size_t n, rtstream_t s)
{
	FORWARD(memcpy_async, dst, src, n, s);
	return FG(memcpy_async)(dst, src, n, s);
}

API rterr_t RT(MemcpyAsync)(void *dst, const void *src, size_t n, int kind, rtstream_t s)
{
	(void)kind;
	return memcpy_async(dst, src, n, s);
}

API rterr_t RT(MemcpyAsync_ptsz)(void *dst, const void *src, size_t n, int kind, rtstream_t s)
{
	(void)kind;
	return memcpy_async(dst, src, n, s);
}

API rterr_t RT(Memset)(void *p, int v, size_t n)
{
	sync_all();
	if (p)
		memset(p, v, n);
	return ERR_SUCCESS;
}

/* ---- launches ---- */

static rterr_t launch(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, rtstream_t s)
{
	(void)shmem;
	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
		return fail(ERR_INVALID_VALUE);
	return FG(enqueue_kernel)(func, args, s);
}

/* A kernel's host stub stands for its CUfunction: the fake driver's
 * CUfunction is the kernel's address. */
API rterr_t RT(LaunchKernel)(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, rtstream_t s)
{
	FORWARD(launch, func, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, s, args, NULL);
	return launch(func, grid, block, args, shmem, s);
}

API rterr_t RT(LaunchKernel_ptsz)(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, rtstream_t s)
{
	FORWARD(launch_ptsz, func, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, s, args, NULL);
	return launch(func, grid, block, args, shmem, s);
}

static rterr_t launch_ex(const launch_config_t *cfg, const void *func, void **args, int ptsz)
{
	if (!cfg)
		return fail(ERR_INVALID_VALUE);
#ifndef FAKE_MACA
	cu_launch_config_t c = {cfg->gridDim.x, cfg->gridDim.y, cfg->gridDim.z, cfg->blockDim.x, cfg->blockDim.y,
				cfg->blockDim.z, (unsigned)cfg->dynamicSmemBytes, cfg->stream, cfg->attrs, cfg->numAttrs};
	if (ptsz)
		FORWARD(launch_ex_ptsz, &c, func, args, NULL);
	else
		FORWARD(launch_ex, &c, func, args, NULL);
#else
	(void)ptsz;
#endif
	return launch(func, cfg->gridDim, cfg->blockDim, args, cfg->dynamicSmemBytes, cfg->stream);
}

API rterr_t RT(LaunchKernelExC)(const launch_config_t *cfg, const void *func, void **args)
{
	return launch_ex(cfg, func, args, 0);
}

API rterr_t RT(LaunchKernelExC_ptsz)(const launch_config_t *cfg, const void *func, void **args)
{
	return launch_ex(cfg, func, args, 1);
}

/* A graph of the fake device is opaque: launching one runs for 20 µs. */
API int FG(graph_launch)(void *exec, rtstream_t s)
{
	struct op o = {.type = OP_DELAY, .n = 20000};
	if (!exec)
		return fail(ERR_INVALID_VALUE);
	enqueue(resolve(s), &o);
	return ERR_SUCCESS;
}

API rterr_t RT(GraphLaunch)(void *exec, rtstream_t s)
{
	FORWARD(graph_launch, exec, s);
	return FG(graph_launch)(exec, s);
}

API rterr_t RT(GraphLaunch_ptsz)(void *exec, rtstream_t s) { return RT(GraphLaunch)(exec, s); }

/* ---- streams ---- */

API rterr_t RT(StreamCreate)(rtstream_t *s)
{
	if (!s)
		return fail(ERR_INVALID_VALUE);
	pthread_once(&g_once, init_default);
	*s = new_stream();
	return *s ? ERR_SUCCESS : fail(ERR_MEMORY_ALLOCATION);
}

API rterr_t RT(StreamCreateWithFlags)(rtstream_t *s, unsigned flags)
{
	(void)flags;
	return RT(StreamCreate)(s);
}

API rterr_t RT(StreamCreateWithPriority)(rtstream_t *s, unsigned flags, int prio)
{
	(void)flags;
	(void)prio;
	return RT(StreamCreate)(s);
}

/* The executor stays (idle) after destroy: work already queued still completes. */
API rterr_t RT(StreamDestroy)(rtstream_t s)
{
	(void)s;
	return ERR_SUCCESS;
}

API int FG(stream_sync)(rtstream_t st)
{
	struct fg_stream *s = resolve(st);
	fg_wait_counter(&s->done, stream_tail(s));
	return ERR_SUCCESS;
}

static rterr_t stream_sync(rtstream_t st)
{
	FORWARD(stream_sync, st);
	return FG(stream_sync)(st);
}

API rterr_t RT(StreamSynchronize)(rtstream_t s) { return stream_sync(s); }
API rterr_t RT(StreamSynchronize_ptsz)(rtstream_t s) { return stream_sync(s); }

API int FG(stream_query)(rtstream_t st)
{
	struct fg_stream *s = resolve(st);
	return atomic_load(&s->done) >= stream_tail(s) ? ERR_SUCCESS : ERR_NOT_READY;
}

static rterr_t stream_query(rtstream_t st)
{
#ifndef FAKE_MACA
	if (drv.stream_query)
		return drv.stream_query(st); /* not ready is no error to keep */
#endif
	return FG(stream_query)(st);
}

API rterr_t RT(StreamQuery)(rtstream_t s) { return stream_query(s); }
API rterr_t RT(StreamQuery_ptsz)(rtstream_t s) { return stream_query(s); }

API int FG(stream_wait_event)(rtstream_t s, rtevent_t e)
{
	struct op o = {.type = OP_WAIT, .ptr = e};
	if (!e)
		return fail(ERR_INVALID_RESOURCE_HANDLE);
	o.n = atomic_load(&e->rec_gen);
	if (o.n == 0)
		return ERR_SUCCESS; /* never recorded: nothing to wait for */
	enqueue(resolve(s), &o);
	return ERR_SUCCESS;
}

static rterr_t stream_wait_event(rtstream_t s, rtevent_t e, unsigned flags)
{
	FORWARD(stream_wait_event, s, e, flags);
	return FG(stream_wait_event)(s, e);
}

API rterr_t RT(StreamWaitEvent)(rtstream_t s, rtevent_t e, unsigned flags) { return stream_wait_event(s, e, flags); }

API rterr_t RT(StreamWaitEvent_ptsz)(rtstream_t s, rtevent_t e, unsigned flags)
{
	return stream_wait_event(s, e, flags);
}

/* ---- events ---- */

API rterr_t RT(EventCreateWithFlags)(rtevent_t *e, unsigned flags)
{
	if (!e)
		return fail(ERR_INVALID_VALUE);
	*e = calloc(1, sizeof(**e));
	if (!*e)
		return fail(ERR_MEMORY_ALLOCATION);
	(*e)->flags = flags;
	return ERR_SUCCESS;
}

API rterr_t RT(EventCreate)(rtevent_t *e) { return RT(EventCreateWithFlags)(e, 0); }

API rterr_t RT(EventDestroy)(rtevent_t e)
{
	/* freed lazily by the real runtime once its record passed: keep it simple, wait */
	if (!e)
		return fail(ERR_INVALID_RESOURCE_HANDLE);
	fg_wait_counter(&e->done_gen, atomic_load(&e->rec_gen));
	free(e);
	return ERR_SUCCESS;
}

API int FG(event_record)(rtevent_t e, rtstream_t s)
{
	struct op o = {.type = OP_RECORD, .ptr = e};
	if (!e)
		return fail(ERR_INVALID_RESOURCE_HANDLE);
	o.n = atomic_fetch_add(&e->rec_gen, 1) + 1;
	enqueue(resolve(s), &o);
	return ERR_SUCCESS;
}

static rterr_t event_record(rtevent_t e, rtstream_t s)
{
	FORWARD(event_record, e, s);
	return FG(event_record)(e, s);
}

API rterr_t RT(EventRecord)(rtevent_t e, rtstream_t s) { return event_record(e, s); }
API rterr_t RT(EventRecord_ptsz)(rtevent_t e, rtstream_t s) { return event_record(e, s); }

API rterr_t RT(EventRecordWithFlags)(rtevent_t e, rtstream_t s, unsigned flags)
{
	(void)flags;
	return event_record(e, s);
}

API int FG(event_query)(rtevent_t e)
{
	if (!e)
		return fail(ERR_INVALID_RESOURCE_HANDLE);
	return atomic_load(&e->done_gen) >= atomic_load(&e->rec_gen) ? ERR_SUCCESS : ERR_NOT_READY;
}

API rterr_t RT(EventQuery)(rtevent_t e)
{
#ifndef FAKE_MACA
	if (drv.event_query)
		return drv.event_query(e); /* not ready is no error to keep */
#endif
	return FG(event_query)(e);
}

API int FG(event_sync)(rtevent_t e)
{
	if (!e)
		return fail(ERR_INVALID_RESOURCE_HANDLE);
	fg_wait_counter(&e->done_gen, atomic_load(&e->rec_gen));
	return ERR_SUCCESS;
}

API rterr_t RT(EventSynchronize)(rtevent_t e)
{
	FORWARD(event_sync, e);
	return FG(event_sync)(e);
}

API rterr_t RT(EventElapsedTime)(float *ms, rtevent_t a, rtevent_t b)
{
	uint64_t ra, rb;
	if (!ms || !a || !b)
		return fail(ERR_INVALID_VALUE);
	ra = atomic_load(&a->rec_gen);
	rb = atomic_load(&b->rec_gen);
	if (!ra || !rb || (a->flags & 2) || (b->flags & 2)) /* 2 = DisableTiming */
		return fail(ERR_INVALID_RESOURCE_HANDLE);
	if (atomic_load(&a->done_gen) < ra || atomic_load(&b->done_gen) < rb)
		return ERR_NOT_READY;
	*ms = (float)((double)(b->t.tv_sec - a->t.tv_sec) * 1e3 + (double)(b->t.tv_nsec - a->t.tv_nsec) / 1e6);
	return ERR_SUCCESS;
}
