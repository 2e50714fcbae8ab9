//go:build linux && cgo

// Package leandump makes `xpu-timer dump` run as xpu-timer-dump, the
// static binary that links the stack capture alone, when that binary lies
// beside xpu-timer (as the tarball, the .deb and the image put it):
// imported for its side effect by xpu-timer, which links cgo for NVML.
//
// A dump is a command of one shot, and xpu-timer's start-up was most of
// what set it behind xpu-timer-dump: the dynamic loader, cgo's set-up,
// the package initialisation and the pages of a binary three times the
// size (docs/measurements.md). So the choice is made before any of that,
// in a constructor the C library runs as the program loads: it reads the
// command line, and when its first argument is "dump" it executes
// xpu-timer-dump from the directory of /proc/self/exe with the same
// arguments and environment (dumpcmd.Standalone then runs them as
// `xpu-timer dump`: the same flags, help, messages and exit statuses).
// Where it cannot (no such file, /proc not mounted, a command line over
// 64 KiB), the program starts as usual and dumps in its own process.
package leandump

/*
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

// The command line and the argument pointers over it: static, so that
// nothing is allocated before the Go runtime starts.
static char xpu_leandump_cmdline[64 << 10];
static char *xpu_leandump_argv[1024];

__attribute__((constructor)) static void xpu_leandump(void) {
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	size_t n = 0;
	for (;;) {
		ssize_t k = read(fd, xpu_leandump_cmdline + n, sizeof xpu_leandump_cmdline - n);
		if (k <= 0)
			break;
		n += (size_t)k;
		if (n == sizeof xpu_leandump_cmdline) {
			close(fd);
			return; // too long to be whole
		}
	}
	close(fd);
	if (n == 0 || xpu_leandump_cmdline[n - 1] != 0)
		return;
	size_t argc = 0;
	for (size_t i = 0; i < n; i += strlen(xpu_leandump_cmdline + i) + 1) {
		if (argc + 1 >= sizeof xpu_leandump_argv / sizeof xpu_leandump_argv[0])
			return;
		xpu_leandump_argv[argc++] = xpu_leandump_cmdline + i;
	}
	xpu_leandump_argv[argc] = 0;
	if (argc < 2 || strcmp(xpu_leandump_argv[1], "dump") != 0)
		return;
	char path[PATH_MAX];
	ssize_t k = readlink("/proc/self/exe", path, sizeof path);
	if (k <= 0 || (size_t)k >= sizeof path)
		return;
	path[k] = 0;
	char *slash = strrchr(path, '/');
	static const char lean[] = "xpu-timer-dump";
	if (!slash || (size_t)(slash + 1 - path) + sizeof lean > sizeof path)
		return;
	memcpy(slash + 1, lean, sizeof lean);
	execve(path, xpu_leandump_argv, environ);
	// Not there or not runnable: the dump runs in this process.
}
*/
import "C"
