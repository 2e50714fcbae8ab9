/* rttest: semantics of the fake runtime, one check per argument:
 * order, event, elapsed, wait, concurrent, memcpy, exc, graph, spin, yield,
 * blocking, envsched, hostfn, queue (XPU_FAKEGPU_QUEUE_DEPTH=8),
 * launchblocking (CUDA_LAUNCH_BLOCKING=1), freesync, and driver, driverex,
 * jit (CUDA only).
 * Prints "ok NAME" and exits 0, or prints the failure and exits 1. */
#define _GNU_SOURCE
#include "vendor.h"
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

rterr_t RT(StreamCreate)(rtstream_t *);
rterr_t RT(StreamSynchronize)(rtstream_t);
rterr_t RT(StreamQuery)(rtstream_t);
rterr_t RT(StreamWaitEvent)(rtstream_t, rtevent_t, unsigned);
rterr_t RT(LaunchKernel)(const void *, dim3, dim3, void **, size_t, rtstream_t);
rterr_t RT(LaunchKernelExC)(const launch_config_t *, const void *, void **);
rterr_t RT(EventCreate)(rtevent_t *);
rterr_t RT(EventRecord)(rtevent_t, rtstream_t);
rterr_t RT(EventQuery)(rtevent_t);
rterr_t RT(EventSynchronize)(rtevent_t);
rterr_t RT(EventElapsedTime)(float *, rtevent_t, rtevent_t);
rterr_t RT(DeviceSynchronize)(void);
rterr_t RT(Memcpy)(void *, const void *, size_t, int);
rterr_t RT(Malloc)(void **, size_t);
rterr_t RT(SetDeviceFlags)(unsigned);
rterr_t RT(StreamBeginCapture)(rtstream_t, int);
rterr_t RT(StreamEndCapture)(rtstream_t, void **);
rterr_t RT(GraphInstantiate)(void **, void *, unsigned long long);
rterr_t RT(GraphLaunch)(void *, rtstream_t);
rterr_t RT(LaunchHostFunc)(rtstream_t, fg_host_fn, void *);
rterr_t RT(Free)(void *);
void gemm_bf16_kernel(const uint64_t *);
void noop_kernel(const uint64_t *);

#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

static struct fg_log g_log;
static const dim3 one = {1, 1, 1};

/* launch gemm_bf16_kernel for us microseconds, appending tag to g_log */
static void launch(rtstream_t s, uint64_t us, int tag)
{
	uint64_t p[4] = {us, 0, (uint64_t)(uintptr_t)&g_log, (uint64_t)tag};
	void *args[5] = {&p[0], &p[1], &p[2], &p[3], NULL};
	CHECK(RT(LaunchKernel)((const void *)gemm_bf16_kernel, one, one, args, 0, s) == 0);
}

static void order(void)
{
	rtstream_t s;
	CHECK(RT(StreamCreate)(&s) == 0);
	for (int i = 0; i < 10; i++)
		launch(s, (uint64_t)(20000 - 2000 * i), i);
	CHECK(RT(StreamSynchronize)(s) == 0);
	CHECK(g_log.n == 10);
	for (int i = 0; i < 10; i++)
		CHECK(g_log.v[i] == i);
	/* the legacy default stream keeps its order too */
	for (int i = 0; i < 5; i++)
		launch(NULL, (uint64_t)(5000 - 1000 * i), 10 + i);
	CHECK(RT(StreamSynchronize)(NULL) == 0);
	CHECK(g_log.n == 15 && g_log.v[14] == 14 && g_log.v[10] == 10);
}

static void event(void)
{
	rtstream_t s;
	rtevent_t e, never;
	CHECK(RT(StreamCreate)(&s) == 0);
	CHECK(RT(EventCreate)(&e) == 0 && RT(EventCreate)(&never) == 0);
	CHECK(RT(EventQuery)(never) == 0); /* never recorded: complete */
	launch(s, 300000, 1);
	CHECK(RT(EventRecord)(e, s) == 0);
	CHECK(RT(EventQuery)(e) == ERR_NOT_READY);
	CHECK(RT(StreamQuery)(s) == ERR_NOT_READY);
	CHECK(RT(EventSynchronize)(e) == 0);
	CHECK(g_log.n == 1);
	CHECK(RT(EventQuery)(e) == 0);
	CHECK(RT(StreamQuery)(s) == 0);
	/* re-recording makes it pending again */
	launch(s, 200000, 2);
	CHECK(RT(EventRecord)(e, s) == 0);
	CHECK(RT(EventQuery)(e) == ERR_NOT_READY);
	CHECK(RT(StreamSynchronize)(s) == 0);
	CHECK(RT(EventQuery)(e) == 0 && g_log.n == 2);
}

static void elapsed(void)
{
	rtstream_t s;
	rtevent_t a, b;
	float ms = -1;
	CHECK(RT(StreamCreate)(&s) == 0);
	CHECK(RT(EventCreate)(&a) == 0 && RT(EventCreate)(&b) == 0);
	CHECK(RT(EventRecord)(a, s) == 0);
	launch(s, 50000, 1);
	CHECK(RT(EventRecord)(b, s) == 0);
	CHECK(RT(EventElapsedTime)(&ms, a, b) == ERR_NOT_READY);
	CHECK(RT(EventSynchronize)(b) == 0);
	CHECK(RT(EventElapsedTime)(&ms, a, b) == 0);
	printf("elapsed_ms=%.3f\n", ms);
	CHECK(ms >= 50.0f && ms < 2000.0f);
}

static void wait(void)
{
	rtstream_t s1, s2;
	rtevent_t e;
	CHECK(RT(StreamCreate)(&s1) == 0 && RT(StreamCreate)(&s2) == 0);
	CHECK(RT(EventCreate)(&e) == 0);
	launch(s1, 200000, 1);
	CHECK(RT(EventRecord)(e, s1) == 0);
	CHECK(RT(StreamWaitEvent)(s2, e, 0) == 0);
	launch(s2, 0, 2);
	CHECK(RT(DeviceSynchronize)() == 0);
	CHECK(g_log.n == 2 && g_log.v[0] == 1 && g_log.v[1] == 2);
}

static void concurrent(void)
{
	rtstream_t s1, s2;
	CHECK(RT(StreamCreate)(&s1) == 0 && RT(StreamCreate)(&s2) == 0);
	launch(s1, 300000, 1);
	launch(s2, 0, 2);
	CHECK(RT(StreamSynchronize)(s2) == 0);
	CHECK(g_log.n == 1 && g_log.v[0] == 2); /* s2 did not wait for s1 */
	CHECK(RT(DeviceSynchronize)() == 0);
	CHECK(g_log.n == 2);
}

static void memcpy_sync(void)
{
	rtstream_t s;
	int *dev, host = 0, val = 42;
	CHECK(RT(StreamCreate)(&s) == 0);
	CHECK(RT(Malloc)((void **)&dev, sizeof(int)) == 0);
	CHECK(RT(Memcpy)(dev, &val, sizeof(int), 1) == 0);
	launch(s, 200000, 1);
	CHECK(RT(Memcpy)(&host, dev, sizeof(int), 2) == 0); /* waits for s too */
	CHECK(g_log.n == 1 && host == 42);
}

static void exc(void)
{
	rtstream_t s;
	CHECK(RT(StreamCreate)(&s) == 0);
	uint64_t p[4] = {1000, 0, (uint64_t)(uintptr_t)&g_log, 7};
	void *args[5] = {&p[0], &p[1], &p[2], &p[3], NULL};
	launch_config_t cfg = {.gridDim = {4, 1, 1}, .blockDim = {128, 1, 1}, .stream = s};
	CHECK(RT(LaunchKernelExC)(&cfg, (const void *)gemm_bf16_kernel, args) == 0);
	CHECK(RT(StreamSynchronize)(s) == 0);
	CHECK(g_log.n == 1 && g_log.v[0] == 7);
}

/* capture records, replay runs: the captured kernels run once per launch of the graph */
static void graph(void)
{
	rtstream_t s;
	void *g, *x;
	CHECK(RT(StreamCreate)(&s) == 0);
	CHECK(RT(StreamBeginCapture)(s, 0) == 0);
	launch(s, 1000, 1);
	launch(s, 1000, 2);
	CHECK(RT(StreamEndCapture)(s, &g) == 0);
	CHECK(RT(StreamSynchronize)(s) == 0);
	CHECK(g_log.n == 0); /* captured, not run */
	CHECK(RT(GraphInstantiate)(&x, g, 0) == 0);
	CHECK(RT(GraphLaunch)(x, s) == 0 && RT(GraphLaunch)(x, s) == 0);
	CHECK(RT(StreamSynchronize)(s) == 0);
	CHECK(g_log.n == 4 && g_log.v[0] == 1 && g_log.v[1] == 2 && g_log.v[2] == 1 && g_log.v[3] == 2);
	CHECK(RT(GraphLaunch)((void *)0x6a7000, s) == 0); /* a handle not made here: an opaque graph */
	CHECK(RT(StreamSynchronize)(s) == 0 && g_log.n == 4);
}

static void host_mark(void *p) { __atomic_store_n((int *)p, 1, __ATOMIC_SEQ_CST); }

static void hostfn(void)
{
	rtstream_t s;
	int mark = 0;
	CHECK(RT(StreamCreate)(&s) == 0);
	launch(s, 100000, 1);
	CHECK(RT(LaunchHostFunc)(s, host_mark, &mark) == 0);
	CHECK(RT(StreamSynchronize)(s) == 0);
	CHECK(mark == 1 && g_log.n == 1);
}

/* The state of a thread waiting in StreamSynchronize behind a kernel of
 * 1.5 s: R for the whole wait when it spins or yields, S when it sleeps. */
struct waiter {
	rtstream_t s;
	_Atomic int tid, done;
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;
	w->tid = (int)syscall(SYS_gettid);
	CHECK(RT(StreamSynchronize)(w->s) == 0);
	w->done = 1;
	return NULL;
}

static char thread_state(int tid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	FILE *f = fopen(path, "r");
	CHECK(f && fgets(buf, sizeof(buf), f));
	fclose(f);
	char *p = strrchr(buf, ')');
	CHECK(p && p[1] == ' ');
	return p[2];
}

static void check_wait_state(unsigned flags, char want)
{
	struct waiter w = {0};
	pthread_t th;
	struct timespec tick = {0, 20000000};
	if (flags)
		CHECK(RT(SetDeviceFlags)(flags) == 0);
	CHECK(RT(StreamCreate)(&w.s) == 0);
	launch(w.s, 1500000, 1);
	CHECK(pthread_create(&th, NULL, wait_main, &w) == 0);
	while (!w.tid)
		nanosleep(&tick, NULL);
	/* once in the wait (the first sample in the wanted state), it stays so */
	int seen = 0, samples = 0;
	while (!w.done && samples < 20) {
		char st = thread_state(w.tid);
		if (st == want)
			seen = 1;
		else if (seen && !w.done) {
			fprintf(stderr, "waiting thread in state %c, want %c\n", st, want);
			exit(1);
		}
		samples += seen;
		nanosleep(&tick, NULL);
	}
	CHECK(seen);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK(g_log.n == 1);
}

static void spin(void) { check_wait_state(0, 'R'); }          /* the default schedule */
static void yield(void) { check_wait_state(2, 'R'); }         /* cudaDeviceScheduleYield */
static void blocking(void) { check_wait_state(4, 'S'); }      /* cudaDeviceScheduleBlockingSync */
/* the schedule XPU_FAKEGPU_SCHED names, the program setting none */
static void envsched(void)
{
	const char *e = getenv("XPU_FAKEGPU_SCHED");
	check_wait_state(0, e && !strcmp(e, "blocking") ? 'S' : 'R');
}

/* Blocked calls that are no waits: a call made by a thread of its own
 * stays blocked, spinning (state R, the default schedule), while a kernel
 * spins on a flag, and returns once the flag is cleared. */
struct blocked {
	void (*call)(void);
	_Atomic int tid, done;
};

static void *blocked_main(void *arg)
{
	struct blocked *b = arg;
	b->tid = (int)syscall(SYS_gettid);
	b->call();
	b->done = 1;
	return NULL;
}

static uint64_t g_flag;

/* launch a kernel that spins while g_flag is set */
static void launch_on_flag(rtstream_t s)
{
	uint64_t p[5] = {0, FG_FLAG_SPIN_ON_FLAG, 0, 0, (uint64_t)(uintptr_t)&g_flag};
	void *args[6] = {&p[0], &p[1], &p[2], &p[3], &p[4], NULL};
	CHECK(RT(LaunchKernel)((const void *)gemm_bf16_kernel, one, one, args, 0, s) == 0);
}

static void check_blocked(void (*call)(void))
{
	struct blocked b = {.call = call};
	pthread_t th;
	struct timespec tick = {0, 20000000};
	CHECK(pthread_create(&th, NULL, blocked_main, &b) == 0);
	while (!b.tid)
		nanosleep(&tick, NULL);
	/* not a timing assertion: the window in which a return would show */
	for (int i = 0; i < 15; i++) {
		nanosleep(&tick, NULL);
		CHECK(!b.done);
		CHECK(thread_state(b.tid) == 'R');
	}
	__atomic_store_n(&g_flag, 0, __ATOMIC_SEQ_CST);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK(b.done);
}

static void launch_noop(void)
{
	uint64_t p[1] = {0};
	void *args[2] = {&p[0], NULL};
	CHECK(RT(LaunchKernel)((const void *)noop_kernel, one, one, args, 0, NULL) == 0);
}

/* XPU_FAKEGPU_QUEUE_DEPTH=8: behind a kernel that does not end, the legacy
 * stream takes 8 launches, and the 9th waits for a slot */
static void queue(void)
{
	const char *e = getenv("XPU_FAKEGPU_QUEUE_DEPTH");
	CHECK(e && !strcmp(e, "8"));
	g_flag = 1;
	launch_on_flag(NULL);
	struct timespec tick = {0, 20000000};
	nanosleep(&tick, NULL); /* the executor takes it: it runs */
	for (int i = 0; i < 8; i++)
		launch_noop();
	check_blocked(launch_noop);
	CHECK(RT(DeviceSynchronize)() == 0);
}

/* CUDA_LAUNCH_BLOCKING=1: a launch returns once its kernel ended */
static void launch_flagged(void) { launch_on_flag(NULL); }
static void launchblocking(void)
{
	const char *e = getenv("CUDA_LAUNCH_BLOCKING");
	CHECK(e && !strcmp(e, "1"));
	g_flag = 1;
	check_blocked(launch_flagged);
	launch(NULL, 1000, 1); /* returns after the kernel: logged already */
	CHECK(g_log.n == 1);
}

/* cudaFree waits for the device */
static void *g_buf;
static void free_buf(void) { CHECK(RT(Free)(g_buf) == 0); }
static void freesync(void)
{
	rtstream_t s;
	CHECK(RT(Malloc)(&g_buf, 64) == 0);
	CHECK(RT(StreamCreate)(&s) == 0);
	g_flag = 1;
	launch_on_flag(s);
	check_blocked(free_buf);
}

#ifndef FAKE_MACA
int cuModuleLoad(void **, const char *);
int cuModuleGetFunction(void **, void *, const char *);
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
		   void **);
/* the testbed's kernels as a module, as a framework loads its own */
static void *load_kernels(void)
{
	char exe[PATH_MAX], path[PATH_MAX + 64];
	void *mod;
	ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	CHECK(l > 0);
	exe[l] = 0;
	snprintf(path, sizeof(path), "%s/../libfakekernels.so", dirname(exe));
	CHECK(cuModuleLoad(&mod, path) == 0);
	return mod;
}

static void driver(void)
{
	void *mod = load_kernels(), *f, *g;
	rtstream_t s;
	CHECK(cuModuleGetFunction(&f, mod, "flash_attn_fwd_kernel") == 0);
	CHECK(cuModuleGetFunction(&g, mod, "_ZN4fake9attention14softmax_kernelIfEEvPKm") == 0);
	CHECK(cuModuleGetFunction(&g, mod, "no_such_kernel") != 0);
	CHECK(cuModuleGetFunction(&g, mod, "_ZN4fake9attention14softmax_kernelIfEEvPKm") == 0);
	CHECK(RT(StreamCreate)(&s) == 0);
	uint64_t p[4] = {20000, 0, (uint64_t)(uintptr_t)&g_log, 1};
	void *args[5] = {&p[0], &p[1], &p[2], &p[3], NULL};
	CHECK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, args, NULL) == 0);
	p[3] = 2;
	CHECK(cuLaunchKernel(g, 1, 1, 1, 64, 1, 1, 0, s, args, NULL) == 0);
	CHECK(RT(StreamSynchronize)(s) == 0);
	CHECK(g_log.n == 2 && g_log.v[0] == 1 && g_log.v[1] == 2);
}

/* CUlaunchConfig of cuda.h */
struct cu_launch_config {
	unsigned gx, gy, gz, bx, by, bz, shmem;
	void *stream, *attrs;
	unsigned nattrs;
};
int cuLaunchKernelEx(const struct cu_launch_config *, void *, void **, void **);
int cuLaunchCooperativeKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			      void **);
int cuCtxSynchronize_v2(void *);

/* Triton's path: a function by name from a module, launched with cuLaunchKernelEx */
static void driverex(void)
{
	void *mod = load_kernels(), *f;
	rtstream_t s;
	CHECK(cuModuleGetFunction(&f, mod, "triton_poi_fused_add_0") == 0);
	CHECK(RT(StreamCreate)(&s) == 0);
	uint64_t p[4] = {20000, 0, (uint64_t)(uintptr_t)&g_log, 1};
	void *args[5] = {&p[0], &p[1], &p[2], &p[3], NULL};
	struct cu_launch_config c = {4, 1, 1, 128, 1, 1, 0, s, NULL, 0};
	CHECK(cuLaunchKernelEx(&c, f, args, NULL) == 0);
	p[3] = 2;
	CHECK(cuLaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args) == 0);
	c.gx = 0;
	CHECK(cuLaunchKernelEx(&c, f, args, NULL) != 0);
	CHECK(cuCtxSynchronize_v2(NULL) == 0);
	CHECK(g_log.n == 2 && g_log.v[0] == 1 && g_log.v[1] == 2);
}

int cuModuleLoadData(void **, const void *);
/* a module "compiled" from the fake's PTX: the CPU busy that long */
static void jit(void)
{
	char exe[PATH_MAX], ptx[PATH_MAX + 64];
	void *mod, *f;
	struct timespec t0, t1;
	ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	CHECK(l > 0);
	exe[l] = 0;
	snprintf(ptx, sizeof(ptx), "//fakeptx jit_ms=300 path=%s/../libfakekernels.so", dirname(exe));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(cuModuleLoadData(&mod, ptx) == 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 300);
	CHECK(cuModuleGetFunction(&f, mod, "noop_kernel") == 0);
	CHECK(cuModuleLoadData(&mod, "not ptx") != 0);
}
#endif

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{"order", order}, {"event", event}, {"elapsed", elapsed}, {"wait", wait},
		{"concurrent", concurrent}, {"memcpy", memcpy_sync}, {"exc", exc}, {"graph", graph},
		{"hostfn", hostfn}, {"spin", spin}, {"yield", yield}, {"blocking", blocking}, {"envsched", envsched},
		{"queue", queue}, {"launchblocking", launchblocking}, {"freesync", freesync},
#ifndef FAKE_MACA
		{"driver", driver}, {"driverex", driverex}, {"jit", jit},
#endif
	};
	if (argc != 2) {
		fprintf(stderr, "usage: rttest CASE\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name)) {
			cases[i].fn();
			printf("ok %s\n", argv[1]);
			return 0;
		}
	fprintf(stderr, "rttest: unknown case %s\n", argv[1]);
	return 2;
}
