/* driver.c: the fake CUDA driver API (libcuda.so.1): the launches, copies,
 * events and synchronizations real frameworks make through the driver
 * (cuda.h's signatures), which the fake runtime makes through it too, as
 * NVIDIA's does. A CUfunction of the fake device is the address of the kernel
 * function itself (cuModuleGetFunction looks it up with dlsym), so its ELF
 * symbol names the kernel. A CUkernel (CUDA 12's library API) is opaque, as
 * on NVIDIA's driver: a slot of a table that no symbol names, which
 * cuLaunchKernel also accepts. Launches go to the runtime's stream executors. */
#define _GNU_SOURCE
#include "vendor.h"
#include <dlfcn.h>
#include <string.h>

typedef int CUresult;
typedef void *CUmodule;
typedef void *CUfunction;
typedef int CUdevice;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_FILE_NOT_FOUND 301

API CUresult cuInit(unsigned flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *v)
{
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 12040;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
	extern int cudaGetDeviceCount(int *);
	return cudaGetDeviceCount(n);
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

/* A module is a shared object holding kernels (libfakekernels.so). */
API CUresult cuModuleLoad(CUmodule *m, const char *path)
{
	if (!m || !path)
		return CUDA_ERROR_INVALID_VALUE;
	*m = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	return *m ? CUDA_SUCCESS : CUDA_ERROR_FILE_NOT_FOUND;
}

API CUresult cuModuleUnload(CUmodule m)
{
	(void)m; /* kernels may still be queued: keep the code mapped */
	return CUDA_SUCCESS;
}

API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	if (!f || !m || !name)
		return CUDA_ERROR_INVALID_VALUE;
	*f = dlsym(m, name);
	return *f ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

typedef void *CUlibrary;
typedef struct fg_cukernel {
	void *fn;
} *CUkernel;

#define MAX_CUKERNELS 256
static struct fg_cukernel cukernels[MAX_CUKERNELS];
static int ncukernels;

API CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *path, void *jit_opts, void **jit_vals,
				   unsigned njit, void *lib_opts, void **lib_vals, unsigned nlib)
{
	(void)jit_opts, (void)jit_vals, (void)njit, (void)lib_opts, (void)lib_vals, (void)nlib;
	return cuModuleLoad(lib, path);
}

API CUresult cuLibraryUnload(CUlibrary lib)
{
	return cuModuleUnload(lib);
}

API CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
	void *fn;
	if (!k || !lib || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(fn = dlsym(lib, name)))
		return CUDA_ERROR_NOT_FOUND;
	int n = __atomic_load_n(&ncukernels, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n; i++)
		if (cukernels[i].fn == fn) {
			*k = &cukernels[i];
			return CUDA_SUCCESS;
		}
	n = __atomic_fetch_add(&ncukernels, 1, __ATOMIC_ACQ_REL);
	if (n >= MAX_CUKERNELS)
		return CUDA_ERROR_INVALID_VALUE;
	cukernels[n].fn = fn;
	*k = &cukernels[n];
	return CUDA_SUCCESS;
}

/* A CUkernel's CUfunction (in the one context) is opaque too: its own
 * table slot, which no symbol names either. */
static struct fg_cukernel cufunctions[MAX_CUKERNELS];

API CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
	if (!f || k < cukernels || k >= cukernels + MAX_CUKERNELS)
		return CUDA_ERROR_INVALID_VALUE;
	cufunctions[k - cukernels].fn = k->fn;
	*f = &cufunctions[k - cukernels];
	return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		       unsigned bz, void **params, void *stream)
{
	if (!f || !gx || !gy || !gz || !bx || !by || !bz)
		return CUDA_ERROR_INVALID_VALUE;
	if ((struct fg_cukernel *)f >= cukernels && (struct fg_cukernel *)f < cukernels + MAX_CUKERNELS)
		f = ((struct fg_cukernel *)f)->fn; /* a CUkernel stands for its function */
	else if ((struct fg_cukernel *)f >= cufunctions && (struct fg_cukernel *)f < cufunctions + MAX_CUKERNELS)
		f = ((struct fg_cukernel *)f)->fn;
	return FG(enqueue_kernel)(f, params, stream) == ERR_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			    unsigned bz, unsigned shmem, void *stream, void **params, void **extra)
{
	(void)shmem;
	(void)extra;
	return launch(f, gx, gy, gz, bx, by, bz, params, stream);
}

API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
				 unsigned bz, unsigned shmem, void *stream, void **params, void **extra)
{
	(void)shmem;
	(void)extra;
	return launch(f, gx, gy, gz, bx, by, bz, params, stream);
}

/* CUlaunchConfig */
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shmem;
	void *stream;
	void *attrs;
	unsigned nattrs;
} CUlaunchConfig;

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params)
{
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, params, c->stream);
}

API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	(void)extra;
	return launch_ex(c, f, params);
}

API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	(void)extra;
	return launch_ex(c, f, params);
}

API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				       unsigned by, unsigned bz, unsigned shmem, void *stream, void **params)
{
	(void)shmem;
	return launch(f, gx, gy, gz, bx, by, bz, params, stream);
}

API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
					    unsigned by, unsigned bz, unsigned shmem, void *stream, void **params)
{
	(void)shmem;
	return launch(f, gx, gy, gz, bx, by, bz, params, stream);
}

static CUresult err(int e) { return e == ERR_SUCCESS ? CUDA_SUCCESS : e; }

API CUresult cuLaunchHostFunc(void *stream, fg_host_fn fn, void *data)
{
	return fn ? err(FG(enqueue_host)(stream, fn, data, 0)) : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuLaunchHostFunc_ptsz(void *stream, fg_host_fn fn, void *data)
{
	return cuLaunchHostFunc(stream, fn, data);
}

API CUresult cuGraphLaunch(void *exec, void *stream) { return err(FG(graph_launch)(exec, stream)); }
API CUresult cuGraphLaunch_ptsz(void *exec, void *stream) { return err(FG(graph_launch)(exec, stream)); }

/* Copies: device memory is host memory, so every direction is one copy. */
#define COPY_ASYNC(name)                                                                   \
	API CUresult name(void *dst, const void *src, size_t n, void *stream)              \
	{                                                                                  \
		return err(FG(memcpy_async)(dst, src, n, stream));                         \
	}                                                                                  \
	API CUresult name##_ptsz(void *dst, const void *src, size_t n, void *stream)       \
	{                                                                                  \
		return err(FG(memcpy_async)(dst, src, n, stream));                         \
	}
COPY_ASYNC(cuMemcpyAsync)
COPY_ASYNC(cuMemcpyHtoDAsync_v2)
COPY_ASYNC(cuMemcpyDtoHAsync_v2)
COPY_ASYNC(cuMemcpyDtoDAsync_v2)

#define COPY(name)                                                                         \
	API CUresult name(void *dst, const void *src, size_t n)                            \
	{                                                                                  \
		return err(FG(memcpy_sync)(dst, src, n));                                  \
	}                                                                                  \
	API CUresult name##_ptds(void *dst, const void *src, size_t n)                     \
	{                                                                                  \
		return err(FG(memcpy_sync)(dst, src, n));                                  \
	}
COPY(cuMemcpy)
COPY(cuMemcpyHtoD_v2)
COPY(cuMemcpyDtoH_v2)
COPY(cuMemcpyDtoD_v2)

API CUresult cuEventRecord(void *e, void *stream) { return err(FG(event_record)(e, stream)); }
API CUresult cuEventRecord_ptsz(void *e, void *stream) { return err(FG(event_record)(e, stream)); }

API CUresult cuEventRecordWithFlags(void *e, void *stream, unsigned flags)
{
	(void)flags;
	return err(FG(event_record)(e, stream));
}

API CUresult cuEventRecordWithFlags_ptsz(void *e, void *stream, unsigned flags)
{
	(void)flags;
	return err(FG(event_record)(e, stream));
}

API CUresult cuEventQuery(void *e) { return err(FG(event_query)(e)); }
API CUresult cuEventSynchronize(void *e) { return err(FG(event_sync)(e)); }
API CUresult cuStreamSynchronize(void *stream) { return err(FG(stream_sync)(stream)); }
API CUresult cuStreamSynchronize_ptsz(void *stream) { return err(FG(stream_sync)(stream)); }
API CUresult cuStreamQuery(void *stream) { return err(FG(stream_query)(stream)); }
API CUresult cuStreamQuery_ptsz(void *stream) { return err(FG(stream_query)(stream)); }

API CUresult cuStreamWaitEvent(void *stream, void *e, unsigned flags)
{
	(void)flags;
	return err(FG(stream_wait_event)(stream, e));
}

API CUresult cuStreamWaitEvent_ptsz(void *stream, void *e, unsigned flags)
{
	(void)flags;
	return err(FG(stream_wait_event)(stream, e));
}

API CUresult cuCtxSynchronize(void) { return err(FG(device_sync)()); }

/* CUDA 13 gives it the context to synchronize: the fake has one. */
API CUresult cuCtxSynchronize_v2(void *ctx)
{
	(void)ctx;
	return err(FG(device_sync)());
}

API CUresult cuGetErrorString(CUresult e, const char **s)
{
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	switch (e) {
	case CUDA_SUCCESS: *s = "no error"; break;
	case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
	case CUDA_ERROR_NOT_FOUND: *s = "named symbol not found"; break;
	case CUDA_ERROR_FILE_NOT_FOUND: *s = "file not found"; break;
	default: *s = "unknown error"; break;
	}
	return CUDA_SUCCESS;
}
