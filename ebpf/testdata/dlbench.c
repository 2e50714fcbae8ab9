/* dlbench.c: the process tree of the attach-latency benchmark.
 *
 * usage: dlbench RANKS WINDOW_MS
 * prints "ready", then for each line "DIR" read from stdin forks RANKS
 * ranks and waits for them, then prints "done". Rank k dlopens
 * DIR/k/libcudart.so.12, then DIR/k/libnccl.so.2 (files of their own, so
 * each load is a first load for a tracer). After each dlopen it calls the
 * library at once (cudaLaunchKernel with grid.x = 1, 2, ... or
 * ncclGroupStart), then every 0.5 ms until WINDOW_MS have passed since the
 * dlopen returned, and prints one line, times in CLOCK_MONOTONIC ns (the
 * clock of bpf_ktime_get_ns):
 *   rank=K pid=PID lib=cudart|nccl before=T ret=T first=T calls=N
 * before: just before dlopen; ret: just after it returned; first: just
 * after the first call returned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*group_t)(void);

static long long mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline, used)) static void kernel(void) {}

static void *load(const char *dir, int rank, const char *name)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%d/%s", dir, rank, name);
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "dlbench: %s\n", dlerror());
		exit(2);
	}
	return h;
}

static void *sym(void *h, const char *name)
{
	void *f = dlsym(h, name);
	if (!f) {
		fprintf(stderr, "dlbench: no %s\n", name);
		exit(3);
	}
	return f;
}

/* call makes call number i (from 1) into the library. */
static void call(int nccl, void *f, unsigned i)
{
	if (nccl) {
		((group_t)f)();
		return;
	}
	dim3 g = {i, 1, 1}, b = {1, 1, 1};
	((launch_t)f)((const void *)kernel, g, b, NULL, 0, NULL);
}

static void measure(const char *dir, int rank, int nccl, long long window)
{
	long long before = mono();
	void *h = load(dir, rank, nccl ? "libnccl.so.2" : "libcudart.so.12");
	long long ret = mono();
	void *f = sym(h, nccl ? "ncclGroupStart" : "cudaLaunchKernel");
	if (!nccl) { /* as nvcc's generated code: the kernel registered with the runtime */
		static char name[] = "dlbench_kernel";
		void **img = ((void **(*)(void *))sym(h, "__cudaRegisterFatBinary"))(NULL);
		((void (*)(void **, const char *, char *, const char *, int, void *, void *, void *, void *, int *))sym(
			h, "__cudaRegisterFunction"))(img, (const char *)kernel, name, name, -1, NULL, NULL, NULL, NULL, NULL);
	}
	call(nccl, f, 1);
	long long first = mono();
	unsigned n = 1;
	struct timespec gap = {0, 500000};
	while (mono() - ret < window) {
		nanosleep(&gap, NULL);
		call(nccl, f, ++n);
	}
	char line[256];
	int len = snprintf(line, sizeof line, "rank=%d pid=%d lib=%s before=%lld ret=%lld first=%lld calls=%u\n", rank,
			   (int)getpid(), nccl ? "nccl" : "cudart", before, ret, first, n);
	if (write(1, line, len) != len) /* one write: lines of the ranks stay whole */
		exit(4);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: dlbench RANKS WINDOW_MS\n");
		return 2;
	}
	int ranks = atoi(argv[1]);
	long long window = atoll(argv[2]) * 1000000LL;
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	char dir[4096];
	while (fgets(dir, sizeof dir, stdin)) {
		dir[strcspn(dir, "\n")] = 0;
		for (int k = 0; k < ranks; k++) {
			pid_t pid = fork();
			if (pid < 0)
				return 5;
			if (pid == 0) {
				measure(dir, k, 0, window);
				measure(dir, k, 1, window);
				_exit(0);
			}
		}
		int bad = 0, st;
		while (wait(&st) > 0)
			bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
		printf(bad ? "failed\n" : "done\n");
	}
	return 0;
}
