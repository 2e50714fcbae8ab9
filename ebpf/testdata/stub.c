/* stub.c: a minimal stand-in for a vendor library, exporting the probed
 * CUDA (or, with -DMACA, MACA) runtime, driver and NCCL names with their
 * real signatures; the runtime's calls are made through the driver's, as
 * NVIDIA's runtime makes them. Handles are fake, every call succeeds at
 * once, except EventQuery/StreamQuery of a handle with bit 4 set (not
 * ready). Built by the tests: -DNO_ELAPSED leaves out EventElapsedTime. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef MACA
#define RT(n) mc##n
#define NC(n) mccl##n
#define DRV(n) mcu##n
#else
#define RT(n) cuda##n
#define NC(n) nccl##n
#define DRV(n) cu##n
#endif
#define API __attribute__((visibility("default"), noinline))

typedef struct { unsigned x, y, z; } dim3;
typedef struct { dim3 grid, block; size_t shmem; void *stream; void *attrs; unsigned nattrs; } launch_config_t;
typedef struct { char internal[128]; } ncclUniqueId;

static uintptr_t next_handle = 0x5000;
static void *handle(void) { next_handle += 0x10; return (void *)next_handle; }
static volatile int sink;
#define BODY sink++

/* The driver: the runtime makes every call through it, as NVIDIA's does
 * (the probes are on these for CUDA; MACA's mcu* names are not probed). */
typedef struct { unsigned gx, gy, gz, bx, by, bz, shmem; void *stream; void *attrs; unsigned nattrs; } cu_config_t;
API int DRV(LaunchKernel)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			  unsigned sh, void *s, void **p, void **x) { BODY; return 0; }
API int DRV(LaunchKernelEx)(const cu_config_t *c, void *f, void **p, void **x) { BODY; return 0; }
API int DRV(GraphLaunch)(void *g, void *s) { BODY; return 0; }
API int DRV(MemcpyAsync)(void *d, const void *s, size_t n, void *st) { BODY; return 0; }
API int DRV(Memcpy)(void *d, const void *s, size_t n) { memcpy(d, s, n); return 0; }
API int DRV(EventRecord)(void *e, void *s) { BODY; return 0; }
API int DRV(EventQuery)(void *e) { return ((uintptr_t)e & 0x10) ? 600 : 0; }
API int DRV(EventSynchronize)(void *e) { BODY; return 0; }
API int DRV(StreamSynchronize)(void *s) { BODY; return 0; }
API int DRV(StreamQuery)(void *s) { return ((uintptr_t)s & 0x10) ? 600 : 0; }
API int DRV(StreamWaitEvent)(void *s, void *e, unsigned f) { BODY; return 0; }
API int DRV(CtxSynchronize)(void) { BODY; return 0; }
#ifndef NO_ELAPSED
API int DRV(EventElapsedTime_v2)(float *ms, void *a, void *b) { *ms = 12.625f; return 0; }
#endif

API int RT(StreamCreate)(void **s) { *s = handle(); return 0; }
API int RT(EventCreate)(void **e) { *e = handle(); return 0; }
API int RT(LaunchKernel)(const void *f, dim3 g, dim3 b, void **a, size_t sh, void *s)
{
	return DRV(LaunchKernel)((void *)f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)sh, s, a, NULL);
}
API int RT(LaunchKernel_ptsz)(const void *f, dim3 g, dim3 b, void **a, size_t sh, void *s)
{
	return DRV(LaunchKernel)((void *)f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)sh, s, a, NULL);
}
API int RT(LaunchKernelExC)(const launch_config_t *c, const void *f, void **a)
{
	cu_config_t d = {c->grid.x, c->grid.y, c->grid.z, c->block.x, c->block.y, c->block.z, (unsigned)c->shmem, c->stream, NULL, 0};
	return DRV(LaunchKernelEx)(&d, (void *)f, a, NULL);
}
API int RT(GraphLaunch)(void *g, void *s) { return DRV(GraphLaunch)(g, s); }
API int RT(MemcpyAsync)(void *d, const void *s, size_t n, int k, void *st) { return DRV(MemcpyAsync)(d, s, n, st); }
API int RT(Memcpy)(void *d, const void *s, size_t n, int k) { return DRV(Memcpy)(d, s, n); }
API int RT(EventRecord)(void *e, void *s) { return DRV(EventRecord)(e, s); }
API int RT(EventQuery)(void *e) { return DRV(EventQuery)(e); }
API int RT(EventSynchronize)(void *e) { return DRV(EventSynchronize)(e); }
API int RT(StreamSynchronize)(void *s) { return DRV(StreamSynchronize)(s); }
API int RT(StreamQuery)(void *s) { return DRV(StreamQuery)(s); }
API int RT(StreamWaitEvent)(void *s, void *e, unsigned f) { return DRV(StreamWaitEvent)(s, e, f); }
API int RT(DeviceSynchronize)(void) { return DRV(CtxSynchronize)(); }
#ifndef NO_ELAPSED
API int RT(EventElapsedTime)(float *ms, void *a, void *b) { return DRV(EventElapsedTime_v2)(ms, a, b); }
#endif
API int DRV(ModuleLoad)(void **m, const char *path) { *m = handle(); return 0; }
API int DRV(ModuleGetFunction)(void **f, void *m, const char *name) { *f = (void *)RT(LaunchKernel); return 0; }

API int NC(GetUniqueId)(ncclUniqueId *id) { for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 7 + 3); return 0; }
API int NC(CommInitRank)(void **c, int n, ncclUniqueId id, int r) { *c = handle(); return 0; }
API int NC(CommInitRankConfig)(void **c, int n, ncclUniqueId id, int r, void *cfg) { *c = handle(); return 0; }
API int NC(CommSplit)(void *c, int color, int key, void **nc, void *cfg) { *nc = handle(); return 0; }
API int NC(CommDestroy)(void *c) { BODY; return 0; }
API int NC(CommAbort)(void *c) { BODY; return 0; }
API int NC(AllReduce)(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) { BODY; return 0; }
API int NC(AllGather)(const void *s, void *r, size_t n, int dt, void *c, void *st) { BODY; return 0; }
API int NC(ReduceScatter)(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) { BODY; return 0; }
API int NC(Broadcast)(const void *s, void *r, size_t n, int dt, int root, void *c, void *st) { BODY; return 0; }
API int NC(Reduce)(const void *s, void *r, size_t n, int dt, int op, int root, void *c, void *st) { BODY; return 0; }
API int NC(Send)(const void *b, size_t n, int dt, int peer, void *c, void *st) { BODY; return 0; }
API int NC(Recv)(void *b, size_t n, int dt, int peer, void *c, void *st) { BODY; return 0; }
API int NC(GroupStart)(void) { BODY; return 0; }
API int NC(GroupEnd)(void) { BODY; return 0; }
