/* hop.c: launches N kernels on one stream from one thread that moves to
 * the next CPU after every CHUNK launches, then synchronizes and exits at
 * once; launch i has grid.x = i + 1, so the test can check that the
 * records came in order across CPUs and before the exit record.
 *
 * usage: hop RUNTIME.so KERNELS.so N CHUNK
 * It prints "ready" after loading the libraries, waits for a line on
 * stdin, launches, and prints "done" before it exits. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*stream_fn)(void *);
typedef int (*create_fn)(void **);

static void *must(void *p, const char *what)
{
	if (!p) {
		fprintf(stderr, "hop: %s: %s\n", what, dlerror());
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: hop RUNTIME.so KERNELS.so N CHUNK\n");
		return 2;
	}
	void *rt = must(dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL), argv[1]);
	void *kl = must(dlopen(argv[2], RTLD_NOW), argv[2]);
	launch_fn launch = (launch_fn)must(dlsym(rt, "cudaLaunchKernel"), "cudaLaunchKernel");
	create_fn create = (create_fn)must(dlsym(rt, "cudaStreamCreate"), "cudaStreamCreate");
	stream_fn sync = (stream_fn)must(dlsym(rt, "cudaStreamSynchronize"), "cudaStreamSynchronize");
	void *kernel = must(dlsym(kl, "noop_kernel"), "noop_kernel");
	long n = atol(argv[3]), chunk = atol(argv[4]);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	void *stream;
	if (create(&stream))
		return 1;
	printf("ready\n");
	fflush(stdout);
	char line[64];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	dim3 block = {1, 1, 1};
	for (long i = 0; i < n; i++) {
		if (i % chunk == 0) {
			cpu_set_t set;
			CPU_ZERO(&set);
			CPU_SET((i / chunk) % ncpu, &set);
			if (sched_setaffinity(0, sizeof(set), &set)) {
				perror("hop: sched_setaffinity");
				return 1;
			}
		}
		dim3 grid = {(unsigned)(i + 1), 1, 1};
		if (launch(kernel, grid, block, NULL, 0, stream))
			return 1;
	}
	sync(stream);
	printf("done\n");
	fflush(stdout);
	return 0;
}
