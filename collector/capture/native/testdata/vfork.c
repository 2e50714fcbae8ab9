// Test target: the parent waits in vfork, in uninterruptible sleep (state
// D), until its child, which only pauses, ends.
#include <stdio.h>
#include <unistd.h>

int main(void) {
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	if (vfork() == 0) {
		for (;;)
			pause();
	}
	return 0;
}
