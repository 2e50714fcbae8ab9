/* firstcall: a C program that gets the CUDA driver at its start, as
 * nccl-tests, inference servers and C++ trainers do, then makes one call
 * into it DELAY_MS later and exits. Built two ways: with -DLINKED it is
 * linked to libcuda.so.1 (ld.so maps it before main); without, it
 * dlopens LIB first thing in main. Usage: firstcall DELAY_MS [LIB] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef LINKED
int cuStreamSynchronize(void *stream);
#else
#include <dlfcn.h>
#endif

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
#ifdef LINKED
	int (*sync)(void *) = cuStreamSynchronize;
#else
	if (argc < 3)
		return 2;
	void *h = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "firstcall: %s\n", dlerror());
		return 2;
	}
	int (*sync)(void *) = (int (*)(void *))dlsym(h, "cuStreamSynchronize");
	if (!sync)
		return 2;
#endif
	long ms = atol(argv[1]);
	struct timespec d = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&d, NULL);
	return sync(NULL) == 0 ? 0 : 1;
}
