/* driver.h: the types and values of the fake CUDA driver API (driver.c),
 * as cuda.h declares them. DRVAPI exports a cu* function from libcuda.so.1
 * (the launches through an entry stub as NVIDIA's 535 driver's:
 * src/nvstubs.awk); linked into the MACA runtime (-DFAKE_MACA) the names
 * stay hidden. */
#ifndef FAKEGPU_DRIVER_H
#define FAKEGPU_DRIVER_H
#include <stddef.h>
#include <stdint.h>

#ifdef FAKE_MACA
#define DRVAPI __attribute__((visibility("hidden")))
#else
#define DRVAPI __attribute__((visibility("default")))
#endif

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUlibrary;
typedef void *CUkernel;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void (*CUhostFn)(void *userData);

/* The fake device's code image, what cuLibraryLoadData takes: its kernels
 * by name. On a real GPU nvcc's fat binary plays this part; the runtime
 * builds one per __cudaRegisterFatBinary from the __cudaRegisterFunction
 * calls that nvcc's generated code makes at start. */
#define FG_IMAGE_MAGIC 0x474d49454b4146ull /* "FAKEIMG" */
#define FG_IMAGE_KERNELS 64
struct fg_image {
	unsigned long long magic;
	int n;
	struct {
		const char *name;
		const void *fn;
	} k[FG_IMAGE_KERNELS];
};

/* CUlaunchConfig of cuda.h (CUDA 12+) */
typedef struct {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	void *attrs; /* CUlaunchAttribute * */
	unsigned int numAttrs;
} CUlaunchConfig;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_FILE_NOT_FOUND 301
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600

/* CUctx_flags: the schedule of host waits (same values as cudaDeviceSchedule*) */
#define CU_CTX_SCHED_AUTO 0x00
#define CU_CTX_SCHED_SPIN 0x01
#define CU_CTX_SCHED_YIELD 0x02
#define CU_CTX_SCHED_BLOCKING_SYNC 0x04
#define CU_CTX_SCHED_MASK 0x07

#define CU_EVENT_DISABLE_TIMING 0x2

/* the runtime's table of driver entry points, name and arguments; each
 * returns a CUresult. The private exports (real drivers have theirs):
 * fakegpu_drv_enqueue_host queues a host function for the fake NCCL's
 * collectives. */
#define FG_DRIVER_CALLS(X)                                                                                         \
	X(cuInit, (unsigned))                                                                                      \
	X(cuDeviceGetCount, (int *))                                                                               \
	X(cuCtxSetFlags, (unsigned))                                                                               \
	X(cuCtxSynchronize_v2, (CUcontext))                                                                        \
	X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                                  \
	X(cuMemFree_v2, (CUdeviceptr))                                                                             \
	X(cuMemAllocHost_v2, (void **, size_t))                                                                    \
	X(cuMemHostAlloc, (void **, size_t, unsigned))                                                             \
	X(cuMemFreeHost, (void *))                                                                                 \
	X(cuMemHostRegister_v2, (void *, size_t, unsigned))                                                        \
	X(cuMemHostUnregister, (void *))                                                                           \
	X(cuDevicePrimaryCtxReset_v2, (CUdevice))                                                                  \
	X(cuMemcpy, (CUdeviceptr, CUdeviceptr, size_t))                                                            \
	X(cuMemcpy_ptds, (CUdeviceptr, CUdeviceptr, size_t))                                                       \
	X(cuMemcpyAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                             \
	X(cuMemcpyAsync_ptsz, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                        \
	X(cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t))                                                     \
	X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,        \
			   CUstream, void **, void **))                                                            \
	X(cuLaunchKernel_ptsz, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,   \
				CUstream, void **, void **))                                                       \
	X(cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **))                                \
	X(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *, CUfunction, void **, void **))                           \
	X(cuLaunchCooperativeKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
				      unsigned, CUstream, void **))                                                \
	X(cuLaunchCooperativeKernel_ptsz, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
					   unsigned, CUstream, void **))                                           \
	X(cuLaunchHostFunc, (CUstream, CUhostFn, void *))                                                          \
	X(cuLaunchHostFunc_ptsz, (CUstream, CUhostFn, void *))                                                     \
	X(cuStreamBeginCapture_v2, (CUstream, int))                                                                \
	X(cuStreamEndCapture, (CUstream, CUgraph *))                                                               \
	X(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))                               \
	X(cuGraphLaunch, (CUgraphExec, CUstream))                                                                  \
	X(cuGraphDestroy, (CUgraph))                                                                               \
	X(cuGraphExecDestroy, (CUgraphExec))                                                                       \
	X(cuGraphLaunch_ptsz, (CUgraphExec, CUstream))                                                             \
	X(cuStreamCreate, (CUstream *, unsigned))                                                                  \
	X(cuStreamDestroy_v2, (CUstream))                                                                          \
	X(cuStreamSynchronize, (CUstream))                                                                         \
	X(cuStreamSynchronize_ptsz, (CUstream))                                                                    \
	X(cuStreamQuery, (CUstream))                                                                               \
	X(cuStreamQuery_ptsz, (CUstream))                                                                          \
	X(cuStreamWaitEvent, (CUstream, CUevent, unsigned))                                                        \
	X(cuStreamWaitEvent_ptsz, (CUstream, CUevent, unsigned))                                                   \
	X(cuEventCreate, (CUevent *, unsigned))                                                                    \
	X(cuEventDestroy_v2, (CUevent))                                                                            \
	X(cuEventRecord, (CUevent, CUstream))                                                                      \
	X(cuEventRecord_ptsz, (CUevent, CUstream))                                                                 \
	X(cuEventRecordWithFlags, (CUevent, CUstream, unsigned))                                                   \
	X(cuEventRecordWithFlags_ptsz, (CUevent, CUstream, unsigned))                                              \
	X(cuEventQuery, (CUevent))                                                                                 \
	X(cuEventSynchronize, (CUevent))                                                                           \
	X(cuEventElapsedTime_v2, (float *, CUevent, CUevent))                                                     \
	X(cuLibraryLoadData, (CUlibrary *, const void *, void *, void **, unsigned, void *, void **, unsigned))    \
	X(cuLibraryLoadFromFile, (CUlibrary *, const char *, void *, void **, unsigned, void *, void **, unsigned)) \
	X(cuLibraryGetKernel, (CUkernel *, CUlibrary, const char *))                                               \
	X(cuKernelGetFunction, (CUfunction *, CUkernel))                                                           \
	X(fakegpu_drv_enqueue_host, (CUstream, CUhostFn, void *, int))

#define FG_DECLARE(name, args) DRVAPI CUresult name args;
FG_DRIVER_CALLS(FG_DECLARE)
#undef FG_DECLARE
#endif
