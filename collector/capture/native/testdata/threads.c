// Test target for collector/capture/native: threads blocked in known call chains.
// Usage: threads [DEPTH [EXTRA]]: DEPTH levels of recursion, EXTRA more
// threads waiting on the condition variable (6 + EXTRA threads in all).
// Prints "ready PID" once every thread is in place, then answers each line
// read on stdin with "progress N", N counted up by the burning thread.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t ready;
static volatile int never;
static volatile long progress;

NOINLINE void wait_on_cond(void) {
	pthread_mutex_lock(&mu);
	while (!never)
		pthread_cond_wait(&cond, &mu);
	pthread_mutex_unlock(&mu);
}
NOINLINE void *cond_thread(void *arg) {
	(void)arg;
	pthread_barrier_wait(&ready);
	wait_on_cond();
	return NULL;
}

NOINLINE int recurse(int depth) {
	if (depth == 0) {
		pthread_barrier_wait(&ready);
		for (;;)
			pause();
	}
	int r = recurse(depth - 1);
	__asm__ volatile("" ::: "memory"); // keep the call a real call
	return r + 1;
}
NOINLINE void *deep_thread(void *arg) {
	recurse((int)(long)arg);
	return NULL;
}

NOINLINE void in_handler(void) {
	pthread_barrier_wait(&ready);
	for (;;)
		sleep(1000);
}
NOINLINE void handler(int sig) {
	(void)sig;
	in_handler();
}
NOINLINE void spin_until_signal(void) {
	for (;;)
		pause();
}
NOINLINE void *signal_thread(void *arg) {
	(void)arg;
	spin_until_signal();
	return NULL;
}

// tail_outer and tail_middle end in jumps (tail calls): they leave no frame
// on the stack, and a debugger recovers them from DWARF call sites.
NOINLINE int tail_inner(int x) {
	pthread_barrier_wait(&ready);
	while (!never)
		pause();
	return x;
}
NOINLINE int tail_middle(int x) { return tail_inner(x * 3); }
NOINLINE int tail_outer(int x) { return tail_middle(x + 1); }
NOINLINE void *tail_thread(void *arg) {
	int r = tail_outer((int)(long)arg);
	__asm__ volatile("" ::: "memory");
	return (void *)(long)r;
}

NOINLINE void *burn_thread(void *arg) {
	(void)arg;
	pthread_barrier_wait(&ready);
	for (;;)
		progress++;
	return NULL;
}

int main(int argc, char **argv) {
	int depth = argc > 1 ? atoi(argv[1]) : 50;
	int extra = argc > 2 ? atoi(argv[2]) : 0;
	pthread_barrier_init(&ready, NULL, 6 + extra);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigaction(SIGUSR1, &sa, NULL);
	pthread_t t;
	pthread_create(&t, NULL, cond_thread, NULL);
	pthread_create(&t, NULL, deep_thread, (void *)(long)depth);
	pthread_t sig;
	pthread_create(&sig, NULL, signal_thread, NULL);
	pthread_create(&t, NULL, burn_thread, NULL);
	pthread_create(&t, NULL, tail_thread, (void *)1L);
	for (int i = 0; i < extra; i++)
		pthread_create(&t, NULL, cond_thread, NULL);
	usleep(10000);
	pthread_kill(sig, SIGUSR1);
	pthread_barrier_wait(&ready);
	printf("ready %ld\n", (long)getpid());
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		printf("progress %ld\n", progress);
		fflush(stdout);
	}
	return 0;
}
