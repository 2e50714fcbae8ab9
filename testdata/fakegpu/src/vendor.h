/* vendor.h: one source, two vendors. Build with -DFAKE_MACA for the MetaX
 * MACA names (mc*, mccl*), otherwise the NVIDIA names (cuda*, nccl*) are
 * exported. Numeric values of errors and enums are identical for both. */
#ifndef FAKEGPU_VENDOR_H
#define FAKEGPU_VENDOR_H
#include <stddef.h>
#include <stdint.h>

#ifdef FAKE_MACA
#define RT(n) mc##n
#define NC(n) mccl##n
#define PNC(n) pmccl##n
#define FG(n) fakemc_##n
#define SHM_PREFIX "/xpufake-mc-"
#else
#define RT(n) cuda##n
#define NC(n) nccl##n
#define PNC(n) pnccl##n
#define FG(n) fakecuda_##n
#define SHM_PREFIX "/xpufake-cu-"
#endif

#define API __attribute__((visibility("default")))
#define NOINLINE __attribute__((noinline))

/* runtime error codes (cudaError_t / mcError_t) */
#define ERR_SUCCESS 0
#define ERR_INVALID_VALUE 1
#define ERR_MEMORY_ALLOCATION 2
#define ERR_INVALID_DEVICE 101
#define ERR_INVALID_RESOURCE_HANDLE 400
#define ERR_NOT_READY 600

typedef int rterr_t;
typedef struct { unsigned int x, y, z; } dim3;
typedef struct fg_stream *rtstream_t;
typedef struct fg_event *rtevent_t;

/* cudaLaunchConfig_t prefix */
typedef struct {
	dim3 gridDim;
	dim3 blockDim;
	size_t dynamicSmemBytes;
	rtstream_t stream;
	void *attrs;
	unsigned int numAttrs;
} launch_config_t;

/* Kernel convention of the fake device: a kernel is a plain function
 * void k(const uint64_t *params); the launch copies up to FG_MAX_PARAMS
 * 64-bit parameters from the NULL-terminated args array (args[i] points to
 * the i-th parameter). params[0] = duration in microseconds, params[1] =
 * flags (bit 0: never finish; bit 1: spin while the 64-bit word at
 * params[4] is nonzero, as a Triton kernel spinning on a flag it loads),
 * params[2] = optional struct fg_log * to which params[3] is appended when
 * the kernel ends (used by tests). */
#define FG_MAX_PARAMS 6
#define FG_FLAG_HANG 1ull
#define FG_FLAG_SPIN_ON_FLAG 2ull
typedef void (*fg_kernel_fn)(const uint64_t *params);

struct fg_log {
	int n;
	int v[1024];
};

/* the runtime's entry point for the fake NCCL: queue a host function */
typedef void (*fg_host_fn)(void *ctx);
int FG(enqueue_host)(rtstream_t s, fg_host_fn fn, void *ctx, int collective);
#endif
