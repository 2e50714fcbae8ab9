/* trainstep: a training step with a real step's call mix on the fake
 * runtime and driver, the testbed twin of make gpu-check's train-step row
 * (a 6-layer transformer trained eagerly: about 380 launches a step).
 *
 * Per step, on one stream, interleaved as a step makes them:
 *   --runtime N  launches through the runtime (cudaLaunchKernel of one of
 *                24 registered kernels, as PyTorch's own), which makes each
 *                through the driver's cuLaunchKernel (default 300)
 *   --driver N   launches of a library through the driver API
 *                (cuLaunchKernelEx of a CUkernel from cuLibraryGetKernel,
 *                as cuBLAS's) (default 80)
 *   --lt N       launches as cuBLASLt makes them: cuKernelGetFunction of
 *                the CUkernel, cuOccupancyMaxActiveBlocksPerMultiprocessor-
 *                WithFlags of the CUfunction, cuLaunchKernel of that
 *                CUfunction, at every launch (default 25)
 *   --attrs N    cudaFuncGetAttributes of a runtime kernel, whose runtime
 *                looks its CUfunction up (cuKernelGetFunction) and launches
 *                nothing, as PyTorch's every step (default 12)
 *   --copies N   cudaMemcpyAsync, host to device and back (default 17)
 *   --records N  cudaEventRecord (default 2), the first followed by a
 *                cudaStreamWaitEvent of a second stream (--waits, default 1)
 *   --queries N  cudaEventQuery of a recorded event, as PyTorch's caching
 *                allocator and NCCL watchdog poll (default 2)
 *   and one cudaStreamSynchronize at its end (loss.item()).
 * Once the file $LATE_FILE exists, the --lt launches take a kernel never
 * launched before (looked up then with cuLibraryGetKernel), as a new
 * cuBLASLt kernel for new shapes; a number in it is the --pause-us from
 * then on.
 * --mode gpubound adds a kernel of --gpu-ms (default 100) of device time
 * to each step; --mode graph captures the step once (cudaStreamBeginCapture
 * ... cudaGraphInstantiate), with a kernel of --gpu-ms (default 5: a real
 * step's GPU time, which a replay leaves), and replays it (cudaGraphLaunch)
 * each step, then synchronizes.
 *
 * It prints "mix launches=L calls=C ..." (per step: launches, and every
 * probed call), runs --warm steps (default 20), prints "warm", then runs
 * blocks of --block steps (default 20) until the file $STOP_FILE exists
 * (or --blocks N blocks ran), each printed as
 *   block start=NS end=NS ns=NS_PER_STEP steps=N cpu=NS_PER_STEP
 * (CLOCK_REALTIME, as paired.py reads them; cpu: the CPU time of the
 * thread that makes the calls, what the traps and programs cost it
 * whatever else runs on the machine); --pause-us sleeps that long
 * after each step (tests that keep what they see). It sets
 * XPU_FAKEGPU_DOORBELL=lazy (driver.c) unless the variable is set: its
 * launches then wake no thread of the fake device, as a GPU's wake none
 * of the host's. Usage:
 *   trainstep [--mode eager|gpubound|graph] [--OPTION N]... */
#define _GNU_SOURCE
#include "vendor.h"
#include "driver.h"
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

/* The runtime's kernels: host stubs registered as nvcc's code registers
 * them; the fake device runs the stub itself. */
#define NKERNELS 24
#define STUB(i) \
	static NOINLINE void k##i(const uint64_t *p) { (void)p; }
STUB(0) STUB(1) STUB(2) STUB(3) STUB(4) STUB(5) STUB(6) STUB(7) STUB(8) STUB(9) STUB(10) STUB(11)
STUB(12) STUB(13) STUB(14) STUB(15) STUB(16) STUB(17) STUB(18) STUB(19) STUB(20) STUB(21) STUB(22) STUB(23)
static void (*const stubs[NKERNELS])(const uint64_t *) = {k0,  k1,  k2,  k3,  k4,  k5,  k6,  k7,
							   k8,  k9,  k10, k11, k12, k13, k14, k15,
							   k16, k17, k18, k19, k20, k21, k22, k23};
static char names[NKERNELS][96];

/* The library's kernels (libfakekernels.so), as cuBLAS's GEMMs. */
static const char *const blas_names[] = {"gemm_bf16_kernel", "layernorm_fwd_kernel", "layernorm_bwd_kernel",
					 "flash_attn_fwd_kernel", "flash_attn_bwd_kernel", "gelu_fwd_kernel",
					 "cross_entropy_fwd_kernel", "triton_fused_adam_kernel"};
#define NBLAS (int)(sizeof(blas_names) / sizeof(blas_names[0]))

static struct {
	int (*launch)(const void *, dim3, dim3, void **, size_t, rtstream_t);
	int (*stream_create)(rtstream_t *);
	int (*stream_sync)(rtstream_t);
	int (*memcpy_async)(void *, const void *, size_t, int, rtstream_t);
	int (*event_create)(rtevent_t *);
	int (*event_record)(rtevent_t, rtstream_t);
	int (*event_query)(rtevent_t);
	int (*stream_wait)(rtstream_t, rtevent_t, unsigned);
	int (*begin_capture)(rtstream_t, int);
	int (*end_capture)(rtstream_t, void **);
	int (*instantiate)(void **, void *, unsigned long long);
	int (*graph_launch)(void *, rtstream_t);
	CUresult (*lib_load)(CUlibrary *, const char *, void *, void **, unsigned, void *, void **, unsigned);
	CUresult (*get_kernel)(CUkernel *, CUlibrary, const char *);
	CUresult (*kernel_function)(CUfunction *, CUkernel);
	CUresult (*occupancy)(int *, CUfunction, int, size_t, unsigned);
	CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
	CUresult (*cu_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
			      void **, void **);
	int (*func_attributes)(void *, const void *);
} api;

static struct {
	int runtime, driver, lt, attrs, copies, records, waits, queries, warm, block, blocks, pause_us;
	double gpu_ms;
	const char *mode;
} mix = {300, 80, 25, 12, 17, 2, 1, 2, 20, 20, 0, 0, -1, "eager"};

static rtstream_t stream, side;
static rtevent_t events[16];
static CUkernel blas[NBLAS], late;
static const char *late_file;
static CUlibrary lib;
static char host_buf[4096], dev_buf[4096];

static void *need(void *h, const char *name)
{
	void *f = dlsym(h, name);
	if (!f) {
		fprintf(stderr, "trainstep: no %s\n", name);
		exit(2);
	}
	return f;
}

static void *open_lib(const char *dir, const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "trainstep: %s\n", dlerror());
		exit(2);
	}
	return h;
}

static void check(int err, const char *what)
{
	if (err) {
		fprintf(stderr, "trainstep: %s failed: %d\n", what, err);
		exit(1);
	}
}

/* nvcc's registration of the runtime's kernels, with names as PyTorch's */
static void register_kernels(void *rt)
{
	void **(*fatbin)(void *) = (void **(*)(void *))need(rt, "__cudaRegisterFatBinary");
	void (*function)(void **, const char *, char *, const char *, int, void *, void *, void *, void *, int *) =
		(void (*)(void **, const char *, char *, const char *, int, void *, void *, void *, void *, int *))need(
			rt, "__cudaRegisterFunction");
	void **img = fatbin(NULL);
	for (int i = 0; i < NKERNELS; i++) {
		snprintf(names[i], sizeof(names[i]), "_ZN2at6native29vectorized_elementwise_kernelILi%dEEEviT_", i);
		function(img, (const char *)stubs[i], names[i], names[i], -1, NULL, NULL, NULL, NULL, NULL);
	}
}

/* spread says whether the i-th of n slots takes one of k things: k of
 * them, evenly spread */
static int spread(int i, int n, int k) { return n > 0 && (long)(i + 1) * k / n != (long)i * k / n; }

static uint64_t gpu_us;

/* one step's calls, on stream (captured into a graph in graph mode) */
static void step_calls(int capture)
{
	int launches = mix.runtime + mix.driver + mix.lt, rt = 0, drv = 0, lt = 0, rec = 0, q = 0, at = 0;
	dim3 grid = {8, 1, 1}, block = {128, 1, 1};
	for (int j = 0; j < launches; j++) {
		if (spread(j, launches, mix.lt) && lt < mix.lt) {
			CUfunction f;
			int n;
			CUkernel k = blas[lt % NBLAS];
			if (!late && late_file && lt == 0 && access(late_file, F_OK) == 0) {
				FILE *f = fopen(late_file, "r");
				if (f) { /* a number there: the pause after each step from now on */
					if (fscanf(f, "%d", &mix.pause_us) != 1)
						(void)0;
					fclose(f);
				}
				check(api.get_kernel(&late, lib, "triton_red_fused_sum_1"), "cuLibraryGetKernel");
			}
			if (late)
				k = late;
			check(api.kernel_function(&f, k), "cuKernelGetFunction");
			check(api.occupancy(&n, f, 256, 0, 0), "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
			check(api.cu_launch(f, 16, 1, 1, 256, 1, 1, 0, stream, NULL, NULL), "cuLaunchKernel");
			lt++;
		} else if (spread(j, launches, mix.driver) && drv < mix.driver) {
			CUlaunchConfig c = {16, 1, 1, 256, 1, 1, 0, stream, NULL, 0};
			check(api.launch_ex(&c, (CUfunction)blas[drv % NBLAS], NULL, NULL), "cuLaunchKernelEx");
			drv++;
		} else {
			check(api.launch((const void *)stubs[rt % NKERNELS], grid, block, NULL, 0, stream),
			      "cudaLaunchKernel");
			rt++;
		}
		if (capture)
			continue; /* events, copies and attributes stay outside the graph */
		if (spread(j, launches, mix.attrs) && at < mix.attrs) {
			char attr[64];
			check(api.func_attributes(attr, (const void *)stubs[at++ % NKERNELS]), "cudaFuncGetAttributes");
		}
		if (spread(j, launches, mix.copies))
			check(api.memcpy_async(dev_buf, host_buf, 64, j & 1 ? 2 : 1, stream), "cudaMemcpyAsync");
		if (spread(j, launches, mix.records) && rec < 16) {
			check(api.event_record(events[rec], stream), "cudaEventRecord");
			if (rec < mix.waits)
				check(api.stream_wait(side, events[rec], 0), "cudaStreamWaitEvent");
			rec++;
		}
		if (spread(j, launches, mix.queries) && rec > 0) {
			int r = api.event_query(events[q++ % rec]);
			if (r && r != ERR_NOT_READY)
				check(r, "cudaEventQuery");
		}
	}
	if (gpu_us) {
		uint64_t us = gpu_us, flags = 0;
		void *args[] = {&us, &flags, NULL};
		CUlaunchConfig c = {1, 1, 1, 32, 1, 1, 0, stream, NULL, 0};
		check(api.launch_ex(&c, (CUfunction)blas[0], args, NULL), "cuLaunchKernelEx");
	}
}

static void *graph_exec;

static void step(void)
{
	if (graph_exec) {
		check(api.graph_launch(graph_exec, stream), "cudaGraphLaunch");
		check(api.memcpy_async(host_buf, dev_buf, 64, 2, stream), "cudaMemcpyAsync");
	} else {
		step_calls(0);
	}
	check(api.stream_sync(stream), "cudaStreamSynchronize");
	if (mix.pause_us)
		usleep((useconds_t)mix.pause_us);
}

static int64_t clock_ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int opt(int argc, char **argv, int *i, const char *name, int *v)
{
	if (strcmp(argv[*i], name) || *i + 1 >= argc)
		return 0;
	*v = atoi(argv[++*i]);
	return 1;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mode") && i + 1 < argc)
			mix.mode = argv[++i];
		else if (!strcmp(argv[i], "--gpu-ms") && i + 1 < argc)
			mix.gpu_ms = atof(argv[++i]);
		else if (!(opt(argc, argv, &i, "--runtime", &mix.runtime) || opt(argc, argv, &i, "--driver", &mix.driver) ||
			   opt(argc, argv, &i, "--lt", &mix.lt) || opt(argc, argv, &i, "--attrs", &mix.attrs) ||
			   opt(argc, argv, &i, "--copies", &mix.copies) ||
			   opt(argc, argv, &i, "--records", &mix.records) || opt(argc, argv, &i, "--waits", &mix.waits) ||
			   opt(argc, argv, &i, "--queries", &mix.queries) || opt(argc, argv, &i, "--warm", &mix.warm) ||
			   opt(argc, argv, &i, "--block", &mix.block) || opt(argc, argv, &i, "--blocks", &mix.blocks) ||
			   opt(argc, argv, &i, "--pause-us", &mix.pause_us))) {
			fprintf(stderr, "usage: trainstep [--mode eager|gpubound|graph] [--runtime N] [--driver N] "
					"[--lt N] [--attrs N] [--copies N] [--records N] [--waits N] [--queries N] [--gpu-ms MS] "
					"[--warm N] [--block N] [--blocks N] [--pause-us US]\n");
			return 2;
		}
	}
	int graph = !strcmp(mix.mode, "graph");
	if (!graph && strcmp(mix.mode, "eager") && strcmp(mix.mode, "gpubound")) {
		fprintf(stderr, "trainstep: unknown mode %s\n", mix.mode);
		return 2;
	}
	if (mix.records > 16)
		mix.records = 16;
	if (mix.gpu_ms < 0) /* the defaults: 100 ms GPU-bound, 5 ms in a graph, none eager */
		mix.gpu_ms = !strcmp(mix.mode, "gpubound") ? 100 : graph ? 5 : 0;
	gpu_us = (uint64_t)(mix.gpu_ms * 1000);
	/* The device's threads (created below) sleep their copies' few
	 * microseconds, not the default 50 us of timer slack. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	setenv("XPU_FAKEGPU_DOORBELL", "lazy", 0);
	setvbuf(stdout, NULL, _IOLBF, 0);

	char exe[PATH_MAX];
	ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (l < 0)
		return 2;
	exe[l] = 0;
	const char *dir = dirname(exe);
	void *rt = open_lib(dir, "libcudart.so.12");
	void *drv = open_lib(dir, "libcuda.so.1");
	char kernels[PATH_MAX];
	snprintf(kernels, sizeof(kernels), "%s/libfakekernels.so", dir);
	*(void **)&api.launch = need(rt, "cudaLaunchKernel");
	*(void **)&api.stream_create = need(rt, "cudaStreamCreate");
	*(void **)&api.stream_sync = need(rt, "cudaStreamSynchronize");
	*(void **)&api.memcpy_async = need(rt, "cudaMemcpyAsync");
	*(void **)&api.event_create = need(rt, "cudaEventCreate");
	*(void **)&api.event_record = need(rt, "cudaEventRecord");
	*(void **)&api.event_query = need(rt, "cudaEventQuery");
	*(void **)&api.stream_wait = need(rt, "cudaStreamWaitEvent");
	*(void **)&api.begin_capture = need(rt, "cudaStreamBeginCapture");
	*(void **)&api.end_capture = need(rt, "cudaStreamEndCapture");
	*(void **)&api.instantiate = need(rt, "cudaGraphInstantiate");
	*(void **)&api.graph_launch = need(rt, "cudaGraphLaunch");
	*(void **)&api.lib_load = need(drv, "cuLibraryLoadFromFile");
	*(void **)&api.get_kernel = need(drv, "cuLibraryGetKernel");
	*(void **)&api.kernel_function = need(drv, "cuKernelGetFunction");
	*(void **)&api.occupancy = need(drv, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
	*(void **)&api.launch_ex = need(drv, "cuLaunchKernelEx");
	*(void **)&api.cu_launch = need(drv, "cuLaunchKernel");
	*(void **)&api.func_attributes = need(rt, "cudaFuncGetAttributes");
	register_kernels(rt);

	check(api.stream_create(&stream), "cudaStreamCreate");
	check(api.stream_create(&side), "cudaStreamCreate");
	for (int i = 0; i < 16; i++)
		check(api.event_create(&events[i]), "cudaEventCreate");
	/* the library's kernels, looked up once (cuBLAS at its handle's creation) */
	late_file = getenv("LATE_FILE");
	check(api.lib_load(&lib, kernels, NULL, NULL, 0, NULL, NULL, 0), "cuLibraryLoadFromFile");
	for (int i = 0; i < NBLAS; i++)
		check(api.get_kernel(&blas[i], lib, blas_names[i]), "cuLibraryGetKernel");
	if (graph) {
		void *g;
		check(api.begin_capture(stream, 0), "cudaStreamBeginCapture");
		step_calls(1);
		check(api.end_capture(stream, &g), "cudaStreamEndCapture");
		check(api.instantiate(&graph_exec, g, 0), "cudaGraphInstantiate");
	}
	int launches = graph ? 1 : mix.runtime + mix.driver + mix.lt + (gpu_us ? 1 : 0);
	int lookups = graph ? 0 : mix.lt + mix.attrs;
	/* the calls our probes see, a step, the lookups left out */
	int calls = graph ? 3 : launches + mix.copies + mix.records + mix.waits + mix.queries + 1;
	printf("mix mode=%s launches=%d calls=%d lookups=%d runtime=%d driver=%d lt=%d attrs=%d copies=%d records=%d "
	       "waits=%d queries=%d syncs=1 gpu_ms=%.0f\n",
	       mix.mode, launches, calls, lookups, graph ? 0 : mix.runtime, graph ? 0 : mix.driver, graph ? 0 : mix.lt,
	       graph ? 0 : mix.attrs, graph ? 1 : mix.copies, graph ? 0 : mix.records, graph ? 0 : mix.waits,
	       graph ? 0 : mix.queries, mix.gpu_ms);
	for (int i = 0; i < mix.warm; i++)
		step();
	printf("warm\n");
	const char *stop = getenv("STOP_FILE");
	for (int b = 0; mix.blocks ? b < mix.blocks : !stop || access(stop, F_OK) != 0; b++) {
		int64_t s = clock_ns(CLOCK_REALTIME), c = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		for (int i = 0; i < mix.block; i++)
			step();
		int64_t e = clock_ns(CLOCK_REALTIME);
		c = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c;
		printf("block start=%lld end=%lld ns=%.1f steps=%d cpu=%.1f\n", (long long)s, (long long)e,
		       (double)(e - s) / mix.block, mix.block, (double)c / mix.block);
	}
	return 0;
}
