// Test target for collector/symbols: prints the addresses of functions in
// itself, a versioned shared library and a stripped one, then waits on stdin.
#include <stdio.h>
#include <unistd.h>

extern int lib_versioned(int);
extern int lib_stripped(int);

__attribute__((noinline)) int local_function(int x) { return x * 3 + 1; }

int main(void) {
	printf("local_function %p\n", (void *)local_function);
	printf("lib_versioned %p\n", (void *)lib_versioned);
	printf("lib_stripped %p\n", (void *)lib_stripped);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0) {
	}
	return local_function(lib_versioned(lib_stripped(1)));
}
