/* runtime.c: the fake CUDA runtime (libcudart.so.12) and, built with
 * -DFAKE_MACA, the fake MACA runtime (libmcruntime.so.2).
 *
 * As NVIDIA's libcudart, the CUDA runtime holds no device of its own: at
 * its first call it loads the driver with dlopen("libcuda.so.1") and every
 * call goes on to the driver's: cudaLaunchKernel to cuLaunchKernel,
 * cudaLaunchKernelExC to cuLaunchKernelEx, cudaDeviceSynchronize to
 * cuCtxSynchronize_v2 (CUDA 13's name), cudaStreamSynchronize to
 * cuStreamSynchronize, and so on, the _ptsz/_ptds twins to theirs. So a
 * runtime launch is seen twice by probes on both layers, as on a real GPU.
 * The MACA runtime has the driver (driver.c) linked in, its names hidden.
 *
 * The device's semantics (streams, events, graphs, spinning or sleeping
 * waits) are the driver's: see driver.c. */
#define _GNU_SOURCE
#include "vendor.h"
#include "driver.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static struct {
#define FG_POINTER(name, args) CUresult(*name) args;
	FG_DRIVER_CALLS(FG_POINTER)
#undef FG_POINTER
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_err = ERR_SUCCESS;
static __thread int t_device;
static __thread rterr_t t_last_error;

static void load_driver(void)
{
#ifdef FAKE_MACA
#define FG_LINKED(name, args) drv.name = name;
	FG_DRIVER_CALLS(FG_LINKED)
#undef FG_LINKED
#else
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "libcudart: %s\n", dlerror());
		drv_err = 35; /* cudaErrorInsufficientDriver */
		return;
	}
#define FG_RESOLVE(name, args)                                                                                   \
	if (!(*(void **)&drv.name = dlsym(h, #name))) {                                                           \
		fprintf(stderr, "libcudart: libcuda.so.1 lacks %s\n", #name);                                      \
		drv_err = 35;                                                                                      \
		return;                                                                                            \
	}
	FG_DRIVER_CALLS(FG_RESOLVE)
#undef FG_RESOLVE
#endif
	drv.cuInit(0);
}

static rterr_t fail(rterr_t e)
{
	if (e != ERR_SUCCESS && e != ERR_NOT_READY)
		t_last_error = e;
	return e;
}

/* D(call) calls the driver, loaded at the first call; its CUresult values
 * are the runtime's error codes for every value the fake returns. */
#define D(name, ...)                                                                                             \
	(pthread_once(&drv_once, load_driver), drv_err ? fail(drv_err) : fail(drv.name(__VA_ARGS__)))

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---- the fake NCCL's entry point ---- */

API int FG(enqueue_host)(rtstream_t stream, fg_host_fn fn, void *ctx, int collective)
{
	return D(fakegpu_drv_enqueue_host, stream, fn, ctx, collective);
}

/* ---- device management ---- */

API rterr_t RT(GetDeviceCount)(int *count)
{
	if (!count)
		return fail(ERR_INVALID_VALUE);
	return D(cuDeviceGetCount, count);
}

API rterr_t RT(SetDevice)(int dev)
{
	int n;
	rterr_t e = RT(GetDeviceCount)(&n);
	if (e)
		return e;
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

/* cudaDeviceScheduleSpin/Yield/BlockingSync (1, 2, 4): how host waits wait */
API rterr_t RT(SetDeviceFlags)(unsigned flags) { return D(cuCtxSetFlags, flags & CU_CTX_SCHED_MASK); }

API rterr_t RT(DeviceSynchronize)(void) { return D(cuCtxSynchronize_v2, NULL); }

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

/* ---- memory ---- */

API rterr_t RT(Malloc)(void **p, size_t n)
{
	if (!p)
		return fail(ERR_INVALID_VALUE);
	return D(cuMemAlloc_v2, (CUdeviceptr *)p, n);
}

API rterr_t RT(Free)(void *p) { return D(cuMemFree_v2, DP(p)); }

API rterr_t RT(MallocHost)(void **p, size_t n)
{
	if (!p)
		return fail(ERR_INVALID_VALUE);
	return D(cuMemAllocHost_v2, p, n);
}

API rterr_t RT(HostAlloc)(void **p, size_t n, unsigned flags)
{
	if (!p)
		return fail(ERR_INVALID_VALUE);
	return D(cuMemHostAlloc, p, n, flags);
}

API rterr_t RT(FreeHost)(void *p) { return D(cuMemFreeHost, p); }
API rterr_t RT(HostRegister)(void *p, size_t n, unsigned flags) { return D(cuMemHostRegister_v2, p, n, flags); }
API rterr_t RT(HostUnregister)(void *p) { return D(cuMemHostUnregister, p); }
API rterr_t RT(DeviceReset)(void) { return D(cuDevicePrimaryCtxReset_v2, t_device); }

API rterr_t RT(Memcpy)(void *dst, const void *src, size_t n, int kind)
{
	(void)kind;
	return D(cuMemcpy, DP(dst), DP(src), n);
}

API rterr_t RT(Memcpy_ptds)(void *dst, const void *src, size_t n, int kind)
{
	(void)kind;
	return D(cuMemcpy_ptds, DP(dst), DP(src), n);
}

API rterr_t RT(MemcpyAsync)(void *dst, const void *src, size_t n, int kind, rtstream_t s)
{
	(void)kind;
	return D(cuMemcpyAsync, DP(dst), DP(src), n, s);
}

API rterr_t RT(MemcpyAsync_ptsz)(void *dst, const void *src, size_t n, int kind, rtstream_t s)
{
	(void)kind;
	return D(cuMemcpyAsync_ptsz, DP(dst), DP(src), n, s);
}

API rterr_t RT(Memset)(void *p, int v, size_t n) { return D(cuMemsetD8_v2, DP(p), (unsigned char)v, n); }

/* ---- launches: the host stub is the kernel function; the driver is
 * called with its opaque CUkernel ----
 *
 * As NVIDIA's runtime with lazy loading (CUDA 12's default), a stub's
 * kernel is looked up in the driver at its first launch, by the name its
 * module declares it under (cuLibraryLoadFromFile, cuLibraryGetKernel,
 * both exported calls), and kept: later launches pass the handle alone.
 * So a probe on the driver learns a runtime kernel's name only from that
 * first lookup, as on a real GPU. */

#define MAX_STUBS 1024
static struct stub {
	const void *fn;
	CUkernel k;		  /* set at the first launch */
	struct fg_image *img;	  /* registered by nvcc's code, or NULL */
	const char *name;	  /* the name it is registered under */
} stubs[MAX_STUBS];
static int nstubs;
static pthread_mutex_t stubs_mu = PTHREAD_MUTEX_INITIALIZER;

static struct stub *stub_find(const void *fn, int n)
{
	for (int i = 0; i < n; i++)
		if (stubs[i].fn == fn)
			return &stubs[i];
	return NULL;
}

/* nvcc's registration, made by the generated code of every module with
 * kernels at its start: the fat binary (here a fresh image), then each
 * kernel's host stub and device name (__cuda*, and MACA's __mc*). */
#ifdef FAKE_MACA
#define REG(name) __mc##name
#else
#define REG(name) __cuda##name
#endif
API void **REG(RegisterFatBinary)(void *fatbin)
{
	struct fg_image *img = calloc(1, sizeof *img);
	(void)fatbin;
	if (img)
		img->magic = FG_IMAGE_MAGIC;
	return (void **)img;
}

API void REG(RegisterFatBinaryEnd)(void **h) { (void)h; }

API void REG(UnregisterFatBinary)(void **h) { (void)h; /* kernels may still be queued */ }

API void REG(RegisterFunction)(void **h, const char *hostfn, char *devfn, const char *name, int threads, void *tid,
				void *bid, void *bdim, void *gdim, int *wsize)
{
	struct fg_image *img = (struct fg_image *)h;
	(void)devfn, (void)threads, (void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
	if (!img || !hostfn || !name || img->n == FG_IMAGE_KERNELS)
		return;
	pthread_mutex_lock(&stubs_mu);
	int m = __atomic_load_n(&nstubs, __ATOMIC_ACQUIRE);
	if (m < MAX_STUBS && !stub_find(hostfn, m)) {
		img->k[img->n].name = name;
		img->k[img->n++].fn = hostfn;
		stubs[m] = (struct stub){.fn = hostfn, .img = img, .name = name};
		__atomic_store_n(&nstubs, m + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&stubs_mu);
}

/* lookup loads the library a stub's kernel is in (its registered image, or
 * the shared object that exports it) and looks the kernel up by name */
static rterr_t lookup(CUkernel *k, const void *fn, struct stub *st)
{
	CUlibrary lib;
	Dl_info info;
	rterr_t e;
	if (st && st->img) {
		if ((e = D(cuLibraryLoadData, &lib, st->img, NULL, NULL, 0, NULL, NULL, 0)))
			return e;
		return D(cuLibraryGetKernel, k, lib, st->name);
	}
	if (!dladdr(fn, &info) || !info.dli_sname || info.dli_saddr != fn)
		return fail(98); /* cudaErrorInvalidDeviceFunction: neither registered nor exported */
	if ((e = D(cuLibraryLoadFromFile, &lib, info.dli_fname, NULL, NULL, 0, NULL, NULL, 0)))
		return e;
	return D(cuLibraryGetKernel, k, lib, info.dli_sname);
}

/* kernel_of sets *k to the stub's kernel, looked up at its first launch */
static rterr_t kernel_of(CUkernel *k, const void *fn)
{
	struct stub *st = stub_find(fn, __atomic_load_n(&nstubs, __ATOMIC_ACQUIRE));
	rterr_t e = ERR_SUCCESS;
	if (st && (*k = __atomic_load_n(&st->k, __ATOMIC_ACQUIRE)))
		return ERR_SUCCESS;
	pthread_mutex_lock(&stubs_mu);
	int m = __atomic_load_n(&nstubs, __ATOMIC_ACQUIRE);
	if (!(st = stub_find(fn, m)) || !(*k = st->k)) {
		if (!st && m == MAX_STUBS)
			e = fail(2); /* cudaErrorMemoryAllocation */
		else if (!(e = lookup(k, fn, st))) {
			if (!st) {
				stubs[m] = (struct stub){.fn = fn};
				st = &stubs[m];
				__atomic_store_n(&nstubs, m + 1, __ATOMIC_RELEASE);
			}
			__atomic_store_n(&st->k, *k, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&stubs_mu);
	return e;
}

/* H(func) is func's driver handle, or returns the error */
#define H(f, func)                                                                                               \
	CUfunction f;                                                                                            \
	do {                                                                                                     \
		rterr_t e_ = kernel_of((CUkernel *)&f, func);                                                    \
		if (e_)                                                                                          \
			return e_;                                                                               \
	} while (0)

API rterr_t RT(LaunchKernel)(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, rtstream_t s)
{
	H(f, func);
	return D(cuLaunchKernel, f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, s, args, NULL);
}

API rterr_t RT(LaunchKernel_ptsz)(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, rtstream_t s)
{
	H(f, func);
	return D(cuLaunchKernel_ptsz, f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, s, args,
		 NULL);
}

static CUlaunchConfig driver_config(const launch_config_t *c)
{
	return (CUlaunchConfig){c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y,
				c->blockDim.z, (unsigned)c->dynamicSmemBytes, c->stream, NULL, 0};
}

API rterr_t RT(LaunchKernelExC)(const launch_config_t *cfg, const void *func, void **args)
{
	if (!cfg)
		return fail(ERR_INVALID_VALUE);
	CUlaunchConfig c = driver_config(cfg);
	H(f, func);
	return D(cuLaunchKernelEx, &c, f, args, NULL);
}

API rterr_t RT(LaunchKernelExC_ptsz)(const launch_config_t *cfg, const void *func, void **args)
{
	if (!cfg)
		return fail(ERR_INVALID_VALUE);
	CUlaunchConfig c = driver_config(cfg);
	H(f, func);
	return D(cuLaunchKernelEx_ptsz, &c, f, args, NULL);
}

API rterr_t RT(LaunchCooperativeKernel)(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
					rtstream_t s)
{
	H(f, func);
	return D(cuLaunchCooperativeKernel, f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
		 (unsigned)shmem, s, args);
}

API rterr_t RT(LaunchCooperativeKernel_ptsz)(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
					     rtstream_t s)
{
	H(f, func);
	return D(cuLaunchCooperativeKernel_ptsz, f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
		 (unsigned)shmem, s, args);
}

/* cudaFuncGetAttributes: the runtime looks the kernel's CUfunction up
 * (cuKernelGetFunction, then its attributes; here none) and launches
 * nothing. PyTorch calls it, and cudaFuncSetAttribute, every step. */
struct func_attributes {
	size_t shared, constant, local;
	int max_threads, regs, ptx, binary, cache_mode_ca, max_dynamic_shared, carveout;
};

API rterr_t RT(FuncGetAttributes)(struct func_attributes *attr, const void *func)
{
	if (!attr)
		return fail(ERR_INVALID_VALUE);
	H(k, func);
	CUfunction f;
	rterr_t e = D(cuKernelGetFunction, &f, (CUkernel)k);
	if (e)
		return e;
	*attr = (struct func_attributes){.max_threads = 1024, .ptx = 90, .binary = 90};
	return ERR_SUCCESS;
}

API rterr_t RT(LaunchHostFunc)(rtstream_t s, fg_host_fn fn, void *data) { return D(cuLaunchHostFunc, s, fn, data); }

API rterr_t RT(LaunchHostFunc_ptsz)(rtstream_t s, fg_host_fn fn, void *data)
{
	return D(cuLaunchHostFunc_ptsz, s, fn, data);
}

/* ---- graphs ---- */

API rterr_t RT(StreamBeginCapture)(rtstream_t s, int mode) { return D(cuStreamBeginCapture_v2, s, mode); }
API rterr_t RT(StreamEndCapture)(rtstream_t s, void **graph) { return D(cuStreamEndCapture, s, graph); }

API rterr_t RT(GraphInstantiate)(void **exec, void *graph, unsigned long long flags)
{
	return D(cuGraphInstantiateWithFlags, exec, graph, flags);
}

API rterr_t RT(GraphInstantiateWithFlags)(void **exec, void *graph, unsigned long long flags)
{
	return D(cuGraphInstantiateWithFlags, exec, graph, flags);
}

API rterr_t RT(GraphDestroy)(void *graph) { return D(cuGraphDestroy, graph); }
API rterr_t RT(GraphExecDestroy)(void *exec) { return D(cuGraphExecDestroy, exec); }
API rterr_t RT(GraphLaunch)(void *exec, rtstream_t s) { return D(cuGraphLaunch, exec, s); }
API rterr_t RT(GraphLaunch_ptsz)(void *exec, rtstream_t s) { return D(cuGraphLaunch_ptsz, exec, s); }

/* ---- streams ---- */

API rterr_t RT(StreamCreate)(rtstream_t *s)
{
	if (!s)
		return fail(ERR_INVALID_VALUE);
	return D(cuStreamCreate, (CUstream *)s, 0);
}

API rterr_t RT(StreamCreateWithFlags)(rtstream_t *s, unsigned flags)
{
	if (!s)
		return fail(ERR_INVALID_VALUE);
	return D(cuStreamCreate, (CUstream *)s, flags);
}

API rterr_t RT(StreamCreateWithPriority)(rtstream_t *s, unsigned flags, int prio)
{
	(void)prio;
	return RT(StreamCreateWithFlags)(s, flags);
}

API rterr_t RT(StreamDestroy)(rtstream_t s) { return D(cuStreamDestroy_v2, s); }
API rterr_t RT(StreamSynchronize)(rtstream_t s) { return D(cuStreamSynchronize, s); }
API rterr_t RT(StreamSynchronize_ptsz)(rtstream_t s) { return D(cuStreamSynchronize_ptsz, s); }
API rterr_t RT(StreamQuery)(rtstream_t s) { return D(cuStreamQuery, s); }
API rterr_t RT(StreamQuery_ptsz)(rtstream_t s) { return D(cuStreamQuery_ptsz, s); }
API rterr_t RT(StreamWaitEvent)(rtstream_t s, rtevent_t e, unsigned flags) { return D(cuStreamWaitEvent, s, e, flags); }

API rterr_t RT(StreamWaitEvent_ptsz)(rtstream_t s, rtevent_t e, unsigned flags)
{
	return D(cuStreamWaitEvent_ptsz, s, e, flags);
}

/* ---- events ---- */

API rterr_t RT(EventCreateWithFlags)(rtevent_t *e, unsigned flags)
{
	if (!e)
		return fail(ERR_INVALID_VALUE);
	return D(cuEventCreate, (CUevent *)e, flags);
}

API rterr_t RT(EventCreate)(rtevent_t *e) { return RT(EventCreateWithFlags)(e, 0); }
API rterr_t RT(EventDestroy)(rtevent_t e) { return D(cuEventDestroy_v2, e); }
API rterr_t RT(EventRecord)(rtevent_t e, rtstream_t s) { return D(cuEventRecord, e, s); }
API rterr_t RT(EventRecord_ptsz)(rtevent_t e, rtstream_t s) { return D(cuEventRecord_ptsz, e, s); }

API rterr_t RT(EventRecordWithFlags)(rtevent_t e, rtstream_t s, unsigned flags)
{
	return D(cuEventRecordWithFlags, e, s, flags);
}

API rterr_t RT(EventRecordWithFlags_ptsz)(rtevent_t e, rtstream_t s, unsigned flags)
{
	return D(cuEventRecordWithFlags_ptsz, e, s, flags);
}

API rterr_t RT(EventQuery)(rtevent_t e) { return D(cuEventQuery, e); }
API rterr_t RT(EventSynchronize)(rtevent_t e) { return D(cuEventSynchronize, e); }
API rterr_t RT(EventElapsedTime)(float *ms, rtevent_t a, rtevent_t b) { return D(cuEventElapsedTime_v2, ms, a, b); }
