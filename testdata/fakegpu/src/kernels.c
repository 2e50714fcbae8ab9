/* kernels.c: the "device code" of the fake GPU (libfakekernels.so). Each
 * kernel is a real ELF function that the stream executor calls with the
 * launch parameters (see vendor.h): it takes params[0] microseconds and never
 * returns when params[1] has FG_FLAG_HANG set. */
#define _GNU_SOURCE
#include "kernels.h"
#include <time.h>

static void nap(uint64_t us)
{
	struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000};
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* the SM "spinning" on a kernel that never finishes */
API NOINLINE void fake_kernel_spin_forever(void)
{
	for (;;)
		nap(100000);
}

API NOINLINE void fake_kernel_body(const uint64_t *p)
{
	if (p[1] & FG_FLAG_HANG)
		fake_kernel_spin_forever();
	if ((p[1] & FG_FLAG_SPIN_ON_FLAG) && p[4])
		while (__atomic_load_n((const uint64_t *)(uintptr_t)p[4], __ATOMIC_ACQUIRE))
			nap(1000);
	if (p[0])
		nap(p[0]);
	if (p[2]) {
		struct fg_log *log = (struct fg_log *)(uintptr_t)p[2];
		int i = __atomic_fetch_add(&log->n, 1, __ATOMIC_SEQ_CST);
		if (i < 1024)
			log->v[i] = (int)p[3];
	}
}

#define KERNEL(name) \
	API NOINLINE void name(const uint64_t *p) { fake_kernel_body(p); }

KERNEL(gemm_bf16_kernel)
KERNEL(layernorm_fwd_kernel)
KERNEL(layernorm_bwd_kernel)
KERNEL(flash_attn_fwd_kernel)
KERNEL(flash_attn_bwd_kernel)
KERNEL(gelu_fwd_kernel)
KERNEL(cross_entropy_fwd_kernel)
KERNEL(sgd_update_kernel)
KERNEL(triton_fused_adam_kernel)
/* names as Triton gives them (torch.compile's inductor: poi pointwise, red reduction) */
KERNEL(triton_poi_fused_add_0)
KERNEL(triton_red_fused_sum_1)

/* torch.cuda._sleep's kernel (at::cuda::(anonymous namespace)::spin_kernel
 * in PyTorch): the hung kernel of the faults where a thread then blocks
 * in a call that is no wait (a launch, a free); launched first at the
 * fault, so its name is looked up then */
KERNEL(spin_kernel)

/* The host stub nvcc writes for a kernel, here torch.cuda._sleep's: the
 * <<<1, 1, 0, stream>>> launch in at::cuda::sleep calls it, and it calls
 * the runtime's cudaLaunchKernel. Its name, "__device_stub_" and the
 * kernel's mangled name, is the one frame of a blocked launch's stack
 * that names the kernel (a real one on an H200 under
 * CUDA_LAUNCH_BLOCKING=1: this name, above cudaLaunchKernel). launch is
 * the runtime's cudaLaunchKernel (the testbed's Python loads the runtime
 * with ctypes and hands it over). */
typedef int (*fg_launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
API NOINLINE int __device_stub__ZN2at4cuda40_GLOBAL__N__758183f4_8_Sleep_cu_088d913f11spin_kernelEl(
	fg_launch_fn launch, void **args, void *stream)
{
	dim3 grid = {1, 1, 1}, block = {1, 1, 1};
	int rc = launch((const void *)spin_kernel, grid, block, args, 0, stream);
	__asm__ volatile("" ::: "memory"); /* no tail call: the stub keeps its frame */
	return rc;
}

/* the trivial kernel of launchloop: returns at once */
API NOINLINE void noop_kernel(const uint64_t *p) { (void)p; }
