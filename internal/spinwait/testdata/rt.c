/*
 * libcudart.so.13 for the stack sampler's tests: cudaDeviceSynchronize
 * calls the driver's cuCtxSynchronize_v2 (cuda.c), as CUDA's runtime
 * does. The runtime is a library the eBPF probes know: they see each
 * synchronize return.
 */
int cuCtxSynchronize_v2(void);

__attribute__((visibility("default"))) int cudaDeviceSynchronize(void)
{
	int r = cuCtxSynchronize_v2();
	__asm__ volatile("" ::: "memory");
	return r;
}
