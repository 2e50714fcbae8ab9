/*
 * libcuda.so.1 for the stack sampler's tests: the CUDA driver's waits as
 * they behave behind a kernel that never ends. cuCtxSynchronize_v2 spins
 * on a CPU (CUDA's default schedule: the thread stays in state R);
 * cuStreamSynchronize sleeps (cudaDeviceScheduleBlockingSync). Both return
 * once the deadline set by fake_deadline_ns (CLOCK_MONOTONIC) passes; 0
 * waits forever. Nothing else of the driver is here.
 */
#include <stdint.h>
#include <time.h>

static int64_t deadline_ns;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int done(void)
{
	int64_t d = __atomic_load_n(&deadline_ns, __ATOMIC_ACQUIRE);
	return d != 0 && now_ns() >= d;
}

__attribute__((visibility("default"))) void fake_deadline_ns(int64_t d)
{
	__atomic_store_n(&deadline_ns, d, __ATOMIC_RELEASE);
}

__attribute__((visibility("default"))) int cuCtxSynchronize_v2(void)
{
	while (!done())
		__builtin_ia32_pause();
	return 0;
}

__attribute__((visibility("default"))) int cuStreamSynchronize(void *stream)
{
	struct timespec ts = {0, 50000000};
	(void)stream;
	while (!done())
		nanosleep(&ts, 0);
	return 0;
}
