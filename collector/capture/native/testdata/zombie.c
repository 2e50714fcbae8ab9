// Test target: the main thread exits with pthread_exit, leaving a zombie
// thread group leader while another thread keeps running.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) static void *worker(void *arg) {
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

int main(void) {
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	pthread_exit(NULL);
}
