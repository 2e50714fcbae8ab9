/* launchloop: launches N trivial kernels on one stream as fast as it can,
 * synchronizes once, and prints the rate. The baseline of the probe-overhead
 * benchmarks. Usage: launchloop N [--vendor cuda|maca] [--call CALL]
 * CALL is launch (the default), memcpy (MemcpyAsync of 64 bytes), record
 * (EventRecord), sync (StreamSynchronize of the idle stream) or
 * launch-sync (a launch, then StreamSynchronize of its stream): N of those
 * calls instead of launches; the rate is printed as ns_per_launch all the
 * same. CALL hang launches one kernel that never finishes, prints "hung"
 * and blocks in StreamSynchronize on it for good (N is ignored). */
#define _GNU_SOURCE
#include "vendor.h"
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*stream_create_fn)(void **);
typedef int (*stream_sync_fn)(void *);
typedef int (*memcpy_async_fn)(void *, const void *, size_t, int, void *);
typedef int (*event_create_fn)(void **);
typedef int (*event_record_fn)(void *, void *);

static void *open_lib(const char *dir, const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "launchloop: %s\n", dlerror());
		exit(2);
	}
	return h;
}

int main(int argc, char **argv)
{
	const char *vendor = "cuda", *call = "launch";
	long n = -1;
	char exe[PATH_MAX];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--vendor") && i + 1 < argc)
			vendor = argv[++i];
		else if (!strcmp(argv[i], "--call") && i + 1 < argc)
			call = argv[++i];
		else
			n = atol(argv[i]);
	}
	if (n < 0 || (strcmp(vendor, "cuda") && strcmp(vendor, "maca"))) {
		fprintf(stderr, "usage: launchloop N [--vendor cuda|maca]\n");
		return 2;
	}
	ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (l < 0)
		return 2;
	exe[l] = 0;
	const char *dir = dirname(exe);
	int maca = !strcmp(vendor, "maca");
	void *rt = open_lib(dir, maca ? "libmcruntime.so.2" : "libcudart.so.12");
	void *kl = open_lib(dir, "libfakekernels.so");
	launch_fn launch = (launch_fn)dlsym(rt, maca ? "mcLaunchKernel" : "cudaLaunchKernel");
	stream_create_fn create = (stream_create_fn)dlsym(rt, maca ? "mcStreamCreate" : "cudaStreamCreate");
	stream_sync_fn sync = (stream_sync_fn)dlsym(rt, maca ? "mcStreamSynchronize" : "cudaStreamSynchronize");
	memcpy_async_fn memcpy_async = (memcpy_async_fn)dlsym(rt, maca ? "mcMemcpyAsync" : "cudaMemcpyAsync");
	event_create_fn event_create = (event_create_fn)dlsym(rt, maca ? "mcEventCreate" : "cudaEventCreate");
	event_record_fn event_record = (event_record_fn)dlsym(rt, maca ? "mcEventRecord" : "cudaEventRecord");
	void *kernel = dlsym(kl, "noop_kernel");
	if (!launch || !create || !sync || !memcpy_async || !event_create || !event_record || !kernel) {
		fprintf(stderr, "launchloop: missing symbol\n");
		return 2;
	}
	void *stream;
	if (create(&stream))
		return 1;
	dim3 grid = {1, 1, 1}, block = {32, 1, 1};
	static char src[64], dst[64];
	void *event;
	if (event_create(&event))
		return 1;
	static const char *const calls[] = {"launch", "memcpy", "record", "sync", "launch-sync"};
	int what = -1;
	for (int i = 0; i < (int)(sizeof(calls) / sizeof(calls[0])); i++)
		if (!strcmp(call, calls[i]))
			what = i;
	if (what < 0 && strcmp(call, "hang")) {
		fprintf(stderr, "launchloop: unknown call %s\n", call);
		return 2;
	}
	if (!strcmp(call, "hang")) {
		uint64_t us = 0, flags = FG_FLAG_HANG;
		void *args[] = {&us, &flags, NULL};
		void *spin = dlsym(kl, "gemm_bf16_kernel");
		if (!spin || launch(spin, grid, block, args, 0, stream))
			return 1;
		printf("hung\n");
		fflush(stdout);
		int err = sync(stream); /* not a tail call: main is the caller */
		printf("synchronized\n");
		return err;
	}
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		int err;
		switch (what) {
		case 0: err = launch(kernel, grid, block, NULL, 0, stream); break;
		case 1: err = memcpy_async(dst, src, sizeof(dst), 4, stream); break;
		case 2: err = event_record(event, stream); break;
		case 3: err = sync(stream); break;
		default: err = launch(kernel, grid, block, NULL, 0, stream) || sync(stream); break;
		}
		if (err) {
			fprintf(stderr, "launchloop: %s failed\n", call);
			return 1;
		}
	}
	sync(stream);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf("launches=%ld seconds=%.6f ns_per_launch=%.1f launches_per_second=%.0f\n", n, s,
	       n ? s * 1e9 / (double)n : 0, s > 0 ? (double)n / s : 0);
	return 0;
}
