/* calls.c: calls every probed API once with distinct known values and
 * prints what it passed and what it got back, one line per call:
 *   call=NAME key=value ...
 * so the test can compare each decoded event with it.
 *
 * usage: calls VENDOR RUNTIME.so NCCL.so DRIVER.so|- KERNELS.so|- RANK NRANKS [IDHEX]
 * VENDOR is cuda or maca. Rank 0 makes the unique id (printed as id=HEX);
 * other ranks take it as IDHEX. It prints "ready" after loading the
 * libraries, waits for a line on stdin, makes the calls, prints "done",
 * and waits for stdin to close.
 * NCCL.so "-" leaves out the NCCL calls (NVIDIA's real runtime alone);
 * calls the runtime lacks are left out too. Handles start at known values,
 * so calls made with them are decoded alike when creation fails (no driver).
 *
 * usage: calls late RUNTIME.so PREFIX [KERNELS.so]
 * prints "ready", waits for a line, then dlopens the runtime and launches
 * (grid.x counting up) every 10 ms until stdin has another line or closes.
 * The line "kernels" dlopens KERNELS.so instead, prints "kernels", and
 * launches its noop_kernel from then on. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef struct { dim3 grid, block; size_t shmem; void *stream; void *attrs; unsigned nattrs; } launch_config_t;
typedef struct { char internal[128]; } ncclUniqueId;

/* The kernel's host stub, with a C++ name to check demangling:
 * xpu::test::vector_add(unsigned long const*). */
void xpu_kernel(const uint64_t *p) __asm__("_ZN3xpu4test10vector_addEPKm");
__attribute__((noinline, used)) void xpu_kernel(const uint64_t *p) { (void)p; }

/* A host function launched on a stream (cudaLaunchHostFunc). */
__attribute__((noinline, used)) void xpu_host_done(void *p) { (void)p; }

/* The driver's CUlaunchConfig (cuda.h). */
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shmem;
	void *stream;
	void *attrs;
	unsigned nattrs;
} cu_launch_config_t;

static const char *rtp, *ncp, *drp; /* name prefixes */
static void *rt, *nc, *dr;

static void *optsym(void *h, const char *prefix, const char *name)
{
	char full[128];
	snprintf(full, sizeof full, "%s%s", prefix, name);
	return dlsym(h, full);
}

static void *sym(void *h, const char *prefix, const char *name)
{
	void *f = optsym(h, prefix, name);
	if (!f) {
		char full[128];
		snprintf(full, sizeof full, "%s%s", prefix, name);
		fprintf(stderr, "calls: no %s\n", full);
		exit(3);
	}
	return f;
}
#define RT(name, type) ((type)sym(rt, rtp, name))
#define NC(name, type) ((type)sym(nc, ncp, name))

/* register_kernels does what nvcc's generated code does at a module's
 * start: registers its kernels with the runtime, which then looks each up
 * in the driver by its device name at its first launch. */
static void register_kernels(int maca)
{
	typedef void **(*fatbin_t)(void *);
	typedef void (*function_t)(void **, const char *, char *, const char *, int, void *, void *, void *, void *,
				   int *);
	const char *p = maca ? "__mc" : "__cuda";
	fatbin_t fatbin = (fatbin_t)optsym(rt, p, "RegisterFatBinary");
	function_t function = (function_t)optsym(rt, p, "RegisterFunction");
	static char name[] = "_ZN3xpu4test10vector_addEPKm";
	if (fatbin && function) /* a stand-in runtime (stub.c) has no registry */
		function(fatbin(NULL), (const char *)xpu_kernel, name, name, -1, NULL, NULL, NULL, NULL, NULL);
}

static void *load(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "calls: %s\n", dlerror());
		exit(2);
	}
	return h;
}

static void wait_line(void)
{
	char buf[64];
	if (!fgets(buf, sizeof buf, stdin))
		exit(0);
}

typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);

static int late(const char *path, const char *prefix, const char *kernels)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	wait_line();
	rt = load(path);
	rtp = prefix;
	register_kernels(!strcmp(prefix, "mc"));
	launch_t launch = RT("LaunchKernel", launch_t);
	int (*create)(void **) = RT("StreamCreate", int (*)(void **));
	void *s;
	create(&s); /* the runtime loads the driver at its first call */
	printf("loaded\n");
	wait_line(); /* launch once the driver is probed: its first lookup names the kernel */
	struct pollfd p = {.fd = 0, .events = POLLIN};
	const void *fn = (const void *)xpu_kernel;
	for (unsigned i = 1;; i++) {
		dim3 g = {i, 1, 1}, b = {1, 1, 1};
		launch(fn, g, b, NULL, 0, s);
		if (poll(&p, 1, 10) == 0)
			continue;
		char buf[64];
		if (!kernels || !fgets(buf, sizeof buf, stdin) || strcmp(buf, "kernels\n"))
			return 0;
		fn = sym(load(kernels), "", "noop_kernel");
		printf("kernels\n");
	}
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "late"))
		return late(argv[2], argv[3], argc >= 5 ? argv[4] : NULL);
	if (argc < 8) {
		fprintf(stderr, "usage: calls cuda|maca RUNTIME NCCL DRIVER|- KERNELS|- RANK NRANKS [IDHEX]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	int maca = !strcmp(argv[1], "maca");
	rtp = maca ? "mc" : "cuda";
	ncp = maca ? "mccl" : "nccl";
	drp = maca ? "mcu" : "cu";
	rt = load(argv[2]);
	register_kernels(maca);
	nc = strcmp(argv[3], "-") ? load(argv[3]) : NULL;
	dr = strcmp(argv[4], "-") ? load(argv[4]) : NULL;
	const char *kernels = argv[5];
	int rank = atoi(argv[6]), nranks = atoi(argv[7]);

	ncclUniqueId id;
	memset(&id, 0, sizeof id);
	if (!nc) {
	} else if (rank == 0) {
		NC("GetUniqueId", int (*)(ncclUniqueId *))(&id);
	} else {
		for (int i = 0; i < 128 && argv[8][2 * i]; i++)
			sscanf(argv[8] + 2 * i, "%2hhx", (unsigned char *)&id.internal[i]);
	}
	printf("id=");
	for (int i = 0; i < 128; i++)
		printf("%02x", (unsigned char)id.internal[i]);
	printf("\nready\n");
	wait_line();

	void *s = (void *)0x7100, *e1 = (void *)0x7200, *e2 = (void *)0x7300, *e3 = (void *)0x7400;
	RT("StreamCreate", int (*)(void **))(&s);
	RT("EventCreate", int (*)(void **))(&e1);
	RT("EventCreate", int (*)(void **))(&e2);
	RT("EventCreate", int (*)(void **))(&e3);
	printf("call=StreamCreate stream=%lu\n", (unsigned long)s);

	dim3 g = {7, 5, 3}, b = {64, 2, 1};
	int r = RT("LaunchKernel", launch_t)((const void *)xpu_kernel, g, b, NULL, 4096, s);
	printf("call=LaunchKernel func=%lu kernel=xpu::test::vector_add grid=7,5,3 block=64,2,1 shmem=4096 stream=%lu ret=%d\n",
	       (unsigned long)(void *)xpu_kernel, (unsigned long)s, r);
	launch_config_t cfg = {{11, 1, 2}, {128, 1, 1}, 512, s, NULL, 0};
	void *exc = optsym(rt, rtp, "LaunchKernelExC");
	if (exc) {
		r = ((int (*)(const launch_config_t *, const void *, void **))exc)(&cfg, (const void *)xpu_kernel, NULL);
		printf("call=LaunchKernelExC func=%lu kernel=xpu::test::vector_add grid=11,1,2 block=128,1,1 shmem=512 stream=%lu ret=%d\n",
		       (unsigned long)(void *)xpu_kernel, (unsigned long)s, r);
	}
	if (dr) {
		/* A CUfunction from a module (the fake's is the kernel's address),
		 * then an opaque CUkernel from a library, named only by the lookup. */
		typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
					   void *, void **, void **);
		void *m = NULL, *f = NULL;
		const char *mod = strcmp(kernels, "-") ? kernels : argv[2];
		((int (*)(void **, const char *))sym(dr, drp, "ModuleLoad"))(&m, mod);
		((int (*)(void **, void *, const char *))sym(dr, drp, "ModuleGetFunction"))(&f, m, "noop_kernel");
		r = ((cu_launch_t)sym(dr, drp, "LaunchKernel"))(f, 2, 3, 4, 32, 8, 2, 1024, s, NULL, NULL);
		printf("call=cuLaunchKernel func=%lu kernel=noop_kernel grid=2,3,4 block=32,8,2 shmem=1024 stream=%lu ret=%d\n",
		       (unsigned long)f, (unsigned long)s, r);
		void *get = optsym(dr, drp, "LibraryGetKernel");
		if (get) {
			void *lib = NULL, *k = NULL;
			((int (*)(void **, const char *, void *, void **, unsigned, void *, void **, unsigned))sym(
				dr, drp, "LibraryLoadFromFile"))(&lib, mod, NULL, NULL, 0, NULL, NULL, 0);
			((int (*)(void **, void *, const char *))get)(&k, lib, "_ZN4fake9attention14softmax_kernelIfEEvPKm");
			r = ((cu_launch_t)sym(dr, drp, "LaunchKernel"))(k, 5, 1, 1, 64, 1, 1, 0, s, NULL, NULL);
			printf("call=cuLaunchKernel func=%lu kernel=fake::attention::softmax_kernel<float> grid=5,1,1 block=64,1,1 shmem=0 stream=%lu ret=%d\n",
			       (unsigned long)k, (unsigned long)s, r);
			/* Its CUfunction, as CUDA 12+ runtimes get one: as opaque, and
			 * named by the kernel it came from. Triton's launch path. */
			void *kf = NULL;
			((int (*)(void **, void *))sym(dr, drp, "KernelGetFunction"))(&kf, k);
			cu_launch_config_t c = {3, 2, 1, 96, 1, 1, 256, s, NULL, 0};
			r = ((int (*)(const cu_launch_config_t *, void *, void **, void **))sym(dr, drp, "LaunchKernelEx"))(&c, kf, NULL, NULL);
			printf("call=cuLaunchKernelEx func=%lu kernel=fake::attention::softmax_kernel<float> grid=3,2,1 block=96,1,1 shmem=256 stream=%lu ret=%d\n",
			       (unsigned long)kf, (unsigned long)s, r);
		}
		r = ((int (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **))sym(
			dr, drp, "LaunchCooperativeKernel"))(f, 4, 1, 1, 16, 1, 1, 128, s, NULL);
		printf("call=cuLaunchCooperativeKernel func=%lu kernel=noop_kernel grid=4,1,1 block=16,1,1 shmem=128 stream=%lu ret=%d\n",
		       (unsigned long)f, (unsigned long)s, r);
		r = ((int (*)(void *, void (*)(void *), void *))sym(dr, drp, "LaunchHostFunc"))(s, xpu_host_done, NULL);
		printf("call=cuLaunchHostFunc func=%lu kernel=xpu_host_done grid=0,0,0 block=0,0,0 stream=%lu ret=%d\n",
		       (unsigned long)(void *)xpu_host_done, (unsigned long)s, r);
		r = ((int (*)(void *, void *))sym(dr, drp, "GraphLaunch"))((void *)0x6b7000, s);
		printf("call=cuGraphLaunch handle=%lu stream=%lu ret=%d\n", 0x6b7000ul, (unsigned long)s, r);
		static char dsrc[8192], ddst[8192];
		r = ((int (*)(void *, const void *, size_t, void *))sym(dr, drp, "MemcpyHtoDAsync_v2"))(ddst, dsrc, 3100, s);
		printf("call=cuMemcpyHtoDAsync_v2 bytes=3100 kind=1 stream=%lu ret=%d\n", (unsigned long)s, r);
		r = ((int (*)(void *, const void *, size_t))sym(dr, drp, "MemcpyDtoH_v2"))(ddst, dsrc, 5100);
		printf("call=cuMemcpyDtoH_v2 bytes=5100 kind=2 ret=%d\n", r);
		r = ((int (*)(void *, void *, unsigned))sym(dr, drp, "EventRecordWithFlags"))(e1, s, 0);
		printf("call=cuEventRecordWithFlags handle=%lu stream=%lu ret=%d\n", (unsigned long)e1, (unsigned long)s, r);
		r = ((int (*)(void *))sym(dr, drp, "EventQuery"))(e1);
		printf("call=cuEventQuery handle=%lu ret=%d\n", (unsigned long)e1, r);
		r = ((int (*)(void *, void *, unsigned))sym(dr, drp, "StreamWaitEvent"))(s, e1, 0);
		printf("call=cuStreamWaitEvent stream=%lu handle=%lu ret=%d\n", (unsigned long)s, (unsigned long)e1, r);
		r = ((int (*)(void *))sym(dr, drp, "EventSynchronize"))(e1);
		printf("call=cuEventSynchronize handle=%lu ret=%d\n", (unsigned long)e1, r);
		r = ((int (*)(void *))sym(dr, drp, "StreamSynchronize"))(s);
		printf("call=cuStreamSynchronize stream=%lu ret=%d\n", (unsigned long)s, r);
		r = ((int (*)(void *))sym(dr, drp, "StreamQuery"))(s);
		printf("call=cuStreamQuery stream=%lu ret=%d\n", (unsigned long)s, r);
		r = ((int (*)(void *))sym(dr, drp, "CtxSynchronize_v2"))(NULL);
		printf("call=cuCtxSynchronize_v2 ret=%d\n", r);
	}
	r = RT("GraphLaunch", int (*)(void *, void *))((void *)0x6a7000, s);
	printf("call=GraphLaunch handle=%lu stream=%lu ret=%d\n", 0x6a7000ul, (unsigned long)s, r);
	static char src[8192], dst[8192];
	r = RT("MemcpyAsync", int (*)(void *, const void *, size_t, int, void *))(dst, src, 3000, 4, s);
	printf("call=MemcpyAsync bytes=3000 kind=4 stream=%lu ret=%d\n", (unsigned long)s, r);
	r = RT("Memcpy", int (*)(void *, const void *, size_t, int))(dst, src, 5000, 4);
	printf("call=Memcpy bytes=5000 kind=4 ret=%d\n", r);
	r = RT("EventRecord", int (*)(void *, void *))(e1, s);
	printf("call=EventRecord handle=%lu stream=%lu ret=%d\n", (unsigned long)e1, (unsigned long)s, r);
	r = RT("EventQuery", int (*)(void *))(e1);
	printf("call=EventQuery handle=%lu ret=%d\n", (unsigned long)e1, r);
	r = RT("StreamWaitEvent", int (*)(void *, void *, unsigned))(s, e1, 0);
	printf("call=StreamWaitEvent stream=%lu handle=%lu ret=%d\n", (unsigned long)s, (unsigned long)e1, r);
	r = RT("EventSynchronize", int (*)(void *))(e1);
	printf("call=EventSynchronize handle=%lu ret=%d\n", (unsigned long)e1, r);
	r = RT("StreamSynchronize", int (*)(void *))(s);
	printf("call=StreamSynchronize stream=%lu ret=%d\n", (unsigned long)s, r);
	r = RT("StreamQuery", int (*)(void *))(s);
	printf("call=StreamQuery stream=%lu ret=%d\n", (unsigned long)s, r);
	r = RT("DeviceSynchronize", int (*)(void))();
	printf("call=DeviceSynchronize ret=%d\n", r);
	/* calls made now and then: CUDA's runtime makes them through the
	 * driver, probed there (fn: the function the record names) */
	void *buf = NULL, *s2 = NULL, *malloc_ = optsym(rt, rtp, "Malloc"), *free_ = optsym(rt, rtp, "Free"),
	     *destroy = optsym(rt, rtp, "StreamDestroy");
	if (malloc_ && free_ && destroy) {
		r = ((int (*)(void **, size_t))malloc_)(&buf, 64);
		printf("call=Malloc fn=%s ret=%d\n", maca ? "mcMalloc" : "cuMemAlloc_v2", r);
		r = ((int (*)(void *))free_)(buf);
		printf("call=Free fn=%s ret=%d\n", maca ? "mcFree" : "cuMemFree_v2", r);
		RT("StreamCreate", int (*)(void **))(&s2);
		r = ((int (*)(void *))destroy)(s2);
		printf("call=StreamDestroy fn=%s stream=%lu ret=%d\n", maca ? "mcStreamDestroy" : "cuStreamDestroy_v2",
		       (unsigned long)s2, r);
	}
	r = RT("EventRecord", int (*)(void *, void *))(e2, s);
	printf("call=EventRecord handle=%lu stream=%lu ret=%d\n", (unsigned long)e2, (unsigned long)s, r);
	r = RT("EventRecord", int (*)(void *, void *))(e3, s);
	printf("call=EventRecord handle=%lu stream=%lu ret=%d\n", (unsigned long)e3, (unsigned long)s, r);
	r = RT("EventSynchronize", int (*)(void *))(e3);
	printf("call=EventSynchronize handle=%lu ret=%d\n", (unsigned long)e3, r);
	float ms = -1;
	void *elapsed = optsym(rt, rtp, "EventElapsedTime");
	if (elapsed) {
		r = ((int (*)(float *, void *, void *))elapsed)(&ms, e2, e3);
		printf("call=EventElapsedTime handle=%lu handle2=%lu ms=%.9g ret=%d\n", (unsigned long)e2, (unsigned long)e3, ms, r);
	}

	if (!nc) {
		printf("done\n");
		wait_line();
		return 0;
	}
	void *comm = NULL, *comm2 = NULL, *sub = NULL;
	r = NC("CommInitRank", int (*)(void **, int, ncclUniqueId, int))(&comm, nranks, id, rank);
	printf("call=CommInitRank comm=%lu nranks=%d rank=%d ret=%d\n", (unsigned long)comm, nranks, rank, r);
	static float sb[4096], rb[4096 * 4];
	int peer = (rank + 1) % nranks, root = nranks - 1;
	r = NC("AllReduce", int (*)(const void *, void *, size_t, int, int, void *, void *))(sb, rb, 1001, 7, 2, comm, s);
	printf("call=AllReduce count=1001 dtype=7 redop=2 comm=%lu stream=%lu ret=%d\n", (unsigned long)comm, (unsigned long)s, r);
	r = NC("AllGather", int (*)(const void *, void *, size_t, int, void *, void *))(sb, rb, 1002, 9, comm, s);
	printf("call=AllGather count=1002 dtype=9 comm=%lu stream=%lu ret=%d\n", (unsigned long)comm, (unsigned long)s, r);
	r = NC("ReduceScatter", int (*)(const void *, void *, size_t, int, int, void *, void *))(sb, rb, 1003, 6, 1, comm, s);
	printf("call=ReduceScatter count=1003 dtype=6 redop=1 comm=%lu stream=%lu ret=%d\n", (unsigned long)comm, (unsigned long)s, r);
	r = NC("Broadcast", int (*)(const void *, void *, size_t, int, int, void *, void *))(sb, rb, 1004, 2, root, comm, s);
	printf("call=Broadcast count=1004 dtype=2 peer=%d comm=%lu stream=%lu ret=%d\n", root, (unsigned long)comm, (unsigned long)s, r);
	r = NC("Reduce", int (*)(const void *, void *, size_t, int, int, int, void *, void *))(sb, rb, 1005, 8, 3, root, comm, s);
	printf("call=Reduce count=1005 dtype=8 redop=3 peer=%d comm=%lu stream=%lu ret=%d\n", root, (unsigned long)comm, (unsigned long)s, r);
	r = NC("GroupStart", int (*)(void))();
	printf("call=GroupStart ret=%d\n", r);
	r = NC("Send", int (*)(const void *, size_t, int, int, void *, void *))(sb, 1006, 4, peer, comm, s);
	printf("call=Send count=1006 dtype=4 peer=%d comm=%lu stream=%lu ret=%d\n", peer, (unsigned long)comm, (unsigned long)s, r);
	int from = (rank + nranks - 1) % nranks;
	r = NC("Recv", int (*)(void *, size_t, int, int, void *, void *))(rb, 1006, 4, from, comm, s);
	printf("call=Recv count=1006 dtype=4 peer=%d comm=%lu stream=%lu ret=%d\n", from, (unsigned long)comm, (unsigned long)s, r);
	r = NC("GroupEnd", int (*)(void))();
	printf("call=GroupEnd ret=%d\n", r);
	r = RT("StreamSynchronize", int (*)(void *))(s);
	printf("call=StreamSynchronize stream=%lu ret=%d\n", (unsigned long)s, r);
	void *split = optsym(nc, ncp, "CommSplit");
	if (split) {
		r = ((int (*)(void *, int, int, void **, void *))split)(comm, 3, 11 + rank, &sub, NULL);
		printf("call=CommSplit comm=%lu handle=%lu ret=%d\n", (unsigned long)sub, (unsigned long)comm, r);
	}
	r = NC("CommInitRankConfig", int (*)(void **, int, ncclUniqueId, int, void *))(&comm2, nranks, id, rank, NULL);
	printf("call=CommInitRankConfig comm=%lu nranks=%d rank=%d ret=%d\n", (unsigned long)comm2, nranks, rank, r);
	if (!split) /* destroy the first communicator instead */
		sub = comm;
	r = NC("CommDestroy", int (*)(void *))(sub);
	printf("call=CommDestroy comm=%lu ret=%d\n", (unsigned long)sub, r);
	r = NC("CommAbort", int (*)(void *))(comm2);
	printf("call=CommAbort comm=%lu ret=%d\n", (unsigned long)comm2, r);
	printf("done\n");
	wait_line();
	return 0;
}
