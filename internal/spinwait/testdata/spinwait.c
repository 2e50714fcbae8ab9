/*
 * spinwait: threads that wait on a fake GPU the way they do on a real one,
 * for the stack sampler's tests (the fake driver is cuda.c, dlopen'ed as
 * $SPINWAIT_LIB).
 *
 *   spinwait threads   the main thread spins in cuCtxSynchronize_v2
 *                      (from wait_device), thread "sleeper" sleeps in
 *                      cuStreamSynchronize (from wait_stream), "busy"
 *                      computes, "idle" sleeps in nanosleep; forever
 *   spinwait job N H   after a second, forks N ranks (RANK, WORLD_SIZE,
 *                      LOCAL_RANK, LOCAL_WORLD_SIZE set; each execs
 *                      "spinwait rank H"):
 *                      rank H spins in cuCtxSynchronize_v2 forever, the
 *                      others sleep in a barrier that never opens; the
 *                      job kills its ranks when it gets SIGTERM
 *   spinwait steps MS  a healthy loop: each step computes 20 ms and
 *                      synchronizes MS milliseconds, spinning, through the
 *                      runtime's cudaDeviceSynchronize (libcudart.so.13
 *                      beside $SPINWAIT_LIB)
 *
 * Each process prints "ready PID" once its threads run.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int (*ctx_sync)(void);
static int (*stream_sync)(void *);
static void (*set_deadline)(int64_t);
static int (*device_sync)(void);
static volatile uint64_t sink;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void load(void)
{
	const char *lib = getenv("SPINWAIT_LIB");
	void *h = dlopen(lib ? lib : "libcuda.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		exit(2);
	}
	ctx_sync = (int (*)(void))dlsym(h, "cuCtxSynchronize_v2");
	stream_sync = (int (*)(void *))dlsym(h, "cuStreamSynchronize");
	set_deadline = (void (*)(int64_t))dlsym(h, "fake_deadline_ns");
	if (!ctx_sync || !stream_sync || !set_deadline) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		exit(2);
	}
}

__attribute__((noinline)) static void wait_device(void)
{
	ctx_sync();
	__asm__ volatile("" ::: "memory");
}

/* load_runtime opens libcudart.so.13 from $SPINWAIT_LIB's directory. */
static void load_runtime(void)
{
	const char *lib = getenv("SPINWAIT_LIB");
	char path[4096];
	const char *slash = lib ? strrchr(lib, '/') : 0;
	snprintf(path, sizeof path, "%.*slibcudart.so.13", slash ? (int)(slash - lib + 1) : 0, lib ? lib : "");
	void *h = dlopen(path, RTLD_NOW);
	if (!h || !(device_sync = (int (*)(void))dlsym(h, "cudaDeviceSynchronize"))) {
		fprintf(stderr, "runtime: %s\n", dlerror());
		exit(2);
	}
}

__attribute__((noinline)) static void step_sync(void)
{
	device_sync();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void wait_stream(void)
{
	stream_sync((void *)0x10);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void compute(int64_t ns)
{
	int64_t end = now_ns() + ns;
	while (now_ns() < end)
		for (int i = 0; i < 1000; i++)
			sink += i * sink + 1;
}

__attribute__((noinline)) static void barrier(void)
{
	for (;;)
		pause();
}

/* the threads of "threads" mode and main meet here once each is named */
static pthread_barrier_t named;

static void *sleeper(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "sleeper");
	pthread_barrier_wait(&named);
	wait_stream();
	return 0;
}

static void *busy(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "busy");
	pthread_barrier_wait(&named);
	for (;;)
		compute(1000000000);
	return 0;
}

static void *idle(void *arg)
{
	struct timespec ts = {1, 0};
	(void)arg;
	pthread_setname_np(pthread_self(), "idle");
	pthread_barrier_wait(&named);
	for (;;)
		nanosleep(&ts, 0);
	return 0;
}

static pid_t ranks[64];
static int nranks;

/* The job ends its ranks when it is told to end (as torchrun does). */
static void end_job(int sig)
{
	for (int i = 0; i < nranks; i++)
		kill(ranks[i], SIGKILL);
	_exit(128 + sig);
}

static void ready(void)
{
	printf("ready %d\n", getpid());
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "threads") == 0) {
		pthread_t t;
		load();
		pthread_barrier_init(&named, 0, 4);
		pthread_create(&t, 0, sleeper, 0);
		pthread_create(&t, 0, busy, 0);
		pthread_create(&t, 0, idle, 0);
		pthread_barrier_wait(&named); /* "ready" once every thread has its name */
		ready();
		wait_device();
		return 0;
	}
	if (argc >= 4 && strcmp(argv[1], "job") == 0) {
		int n = atoi(argv[2]);
		if (n < 1 || n > 64) {
			fprintf(stderr, "job: 1 to 64 ranks\n");
			return 2;
		}
		signal(SIGTERM, end_job);
		/* A tracer that follows this process from outside may come a
		 * moment after it started: the ranks start once it is there. */
		sleep(1);
		for (int r = 0; r < n; r++) {
			pid_t pid = fork();
			if (pid > 0)
				ranks[nranks++] = pid;
			if (pid == 0) {
				char rank[16], world[16];
				snprintf(rank, sizeof rank, "%d", r);
				snprintf(world, sizeof world, "%d", n);
				setenv("RANK", rank, 1);
				setenv("LOCAL_RANK", rank, 1);
				setenv("WORLD_SIZE", world, 1);
				setenv("LOCAL_WORLD_SIZE", world, 1);
				execl("/proc/self/exe", argv[0], "rank", argv[3], (char *)0);
				_exit(127);
			}
		}
		while (wait(0) > 0)
			;
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "rank") == 0) {
		const char *r = getenv("RANK");
		load();
		ready();
		if (r && atoi(r) == atoi(argv[2]))
			wait_device();
		else
			barrier();
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "steps") == 0) {
		int64_t ms = atoll(argv[2]);
		load();
		load_runtime();
		ready();
		for (;;) {
			compute(20000000);
			set_deadline(now_ns() + ms * 1000000);
			step_sync();
		}
	}
	fprintf(stderr, "usage: spinwait threads | job N H | rank H | steps MS\n");
	return 2;
}
