/* nccl.c: the fake NCCL (libnccl.so.2) and, with -DFAKE_MACA, the fake MCCL
 * (libmccl.so.2). Ranks of a communicator rendezvous across processes through
 * a POSIX shared-memory segment named from the 128-byte unique id
 * (SHM_PREFIX + hex of its first 16 bytes), guarded by a process-shared
 * robust mutex and condition variable.
 *
 * A collective is enqueued on its stream; when it reaches the head of the
 * stream, the executor posts the communicator's sequence number, waits in
 * NC(_wait_peers) until every rank posted it, sleeps for the bandwidth-model
 * time, then waits again until every rank finished it. A rank whose byte
 * count exceeds a peer's waits forever for data (NC(_wait_peer_data)), as a
 * ring with mismatched sizes does. XPU_FAKEGPU_NCCL_STALL=N (0-based index
 * of the communicator's collectives) makes this process's executor spin in
 * fake_net_ib_poll_cq forever after all ranks arrived at collective N. */
#define _GNU_SOURCE
#include "vendor.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAXR 64
#define WIN 8

typedef int ncclResult_t;
#define ncclSuccess 0
#define ncclUnhandledCudaError 1
#define ncclSystemError 2
#define ncclInternalError 3
#define ncclInvalidArgument 4
#define ncclInvalidUsage 5

typedef struct { char internal[128]; } ncclUniqueId;

struct shm {
	int init; /* 0 new, 1 initialising, 2 ready */
	int nranks, joined, attached;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t arrived[MAXR], finished[MAXR];
	uint64_t bytes[MAXR][WIN];
	uint64_t sent[MAXR][MAXR], recvd[MAXR][MAXR];
};

struct ncclComm {
	struct shm *shm;
	char name[64];
	int rank, nranks;
	uint64_t seq; /* collectives enqueued */
	uint64_t nsend[MAXR], nrecv[MAXR];
	long long stall; /* 1-based seq that stalls here, 0 none */
};
typedef struct ncclComm *ncclComm_t;

enum { IT_COLL, IT_SEND, IT_RECV };
struct item {
	int kind;
	ncclComm_t comm;
	uint64_t seq, bytes; /* seq: collective sequence or p2p count */
	double busbytes;
	int peer;
};
struct batch {
	int n;
	struct item it[];
};

static int dtype_size(int t)
{
	switch (t) {
	case 0: case 1: case 10: case 11: return 1;
	case 6: case 9: return 2;
	case 2: case 3: case 7: return 4;
	case 4: case 5: case 8: return 8;
	default: return -1;
	}
}

static void lock(struct shm *s)
{
	if (pthread_mutex_lock(&s->mu) == EOWNERDEAD)
		pthread_mutex_consistent(&s->mu);
}

static void unlock(struct shm *s) { pthread_mutex_unlock(&s->mu); }

/* wait on the shared condition with a timeout so no wakeup can be lost for long */
static void shm_wait(struct shm *s)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += 200 * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == EOWNERDEAD)
		pthread_mutex_consistent(&s->mu);
}

static int all_at_least(struct shm *s, const uint64_t *v, uint64_t seq)
{
	for (int r = 0; r < s->nranks; r++)
		if (v[r] < seq)
			return 0;
	return 1;
}

/* caller holds the lock */
API NOINLINE void NC(_wait_peers)(struct shm *s, const uint64_t *v, uint64_t seq)
{
	while (!all_at_least(s, v, seq))
		shm_wait(s);
}

API NOINLINE void NC(_bootstrap_wait)(struct shm *s)
{
	while (s->joined < s->nranks)
		shm_wait(s);
}

/* data that a peer will never send: a ring with mismatched sizes */
API NOINLINE void NC(_wait_peer_data)(struct shm *s)
{
	for (;;)
		shm_wait(s);
}

/* a dead NIC: completions never arrive */
API NOINLINE void fake_net_ib_poll_cq(void)
{
	struct timespec ts = {0, 10 * 1000000L};
	for (;;)
		nanosleep(&ts, NULL);
}

API NOINLINE void NC(_transfer)(double busbytes)
{
	static double gbps = 0;
	if (gbps == 0) {
		const char *e = getenv("XPU_FAKEGPU_NCCL_GBPS");
		gbps = e && atof(e) > 0 ? atof(e) : 50;
	}
	uint64_t ns = 5000 + (uint64_t)(busbytes / gbps); /* bytes / (GB/s) = ns */
	if (ns > 2000000000ull)
		ns = 2000000000ull;
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) != 0)
		;
}

static void run_coll(struct item *it)
{
	ncclComm_t c = it->comm;
	struct shm *s = c->shm;
	uint64_t minb = UINT64_MAX;
	lock(s);
	s->bytes[c->rank][it->seq % WIN] = it->bytes;
	s->arrived[c->rank] = it->seq;
	pthread_cond_broadcast(&s->cv);
	NC(_wait_peers)(s, s->arrived, it->seq);
	for (int r = 0; r < s->nranks; r++)
		if (s->bytes[r][it->seq % WIN] < minb)
			minb = s->bytes[r][it->seq % WIN];
	if (it->bytes > minb)
		NC(_wait_peer_data)(s);
	unlock(s);
	if (c->stall && (uint64_t)c->stall == it->seq)
		fake_net_ib_poll_cq();
	NC(_transfer)(it->busbytes);
	lock(s);
	s->finished[c->rank] = it->seq;
	pthread_cond_broadcast(&s->cv);
	NC(_wait_peers)(s, s->finished, it->seq);
	unlock(s);
}

/* The device-side work of NCCL, run by the stream executor. */
API NOINLINE void NC(DevKernel_Generic)(void *arg)
{
	struct batch *b = arg;
	/* post every point-to-point operation of the group first */
	for (int i = 0; i < b->n; i++) {
		struct item *it = &b->it[i];
		struct shm *s = it->comm->shm;
		if (it->kind == IT_COLL)
			continue;
		lock(s);
		if (it->kind == IT_SEND)
			s->sent[it->comm->rank][it->peer] = it->seq;
		else
			s->recvd[it->comm->rank][it->peer] = it->seq;
		pthread_cond_broadcast(&s->cv);
		unlock(s);
	}
	for (int i = 0; i < b->n; i++) {
		struct item *it = &b->it[i];
		struct shm *s = it->comm->shm;
		if (it->kind == IT_COLL) {
			run_coll(it);
			continue;
		}
		lock(s);
		/* a send completes when the peer posted the matching receive, and vice versa */
		const uint64_t *v = it->kind == IT_SEND ? &s->recvd[it->peer][it->comm->rank]
						       : &s->sent[it->peer][it->comm->rank];
		while (*v < it->seq)
			shm_wait(s);
		unlock(s);
		NC(_transfer)(it->busbytes);
	}
	free(b);
}

/* ---- groups ---- */

static __thread int t_depth;
static __thread struct batch *t_batch;
static __thread rtstream_t t_stream;
static __thread int t_cap;

static ncclResult_t flush(void)
{
	struct batch *b = t_batch;
	t_batch = NULL;
	t_cap = 0;
	if (!b || b->n == 0) {
		free(b);
		return ncclSuccess;
	}
	return FG(enqueue_host)(t_stream, NC(DevKernel_Generic), b, 1) == 0 ? ncclSuccess
									     : ncclUnhandledCudaError;
}

static ncclResult_t add(struct item it, rtstream_t stream)
{
	if (t_batch && t_stream != stream) {
		ncclResult_t r = flush();
		if (r)
			return r;
	}
	if (!t_batch || t_batch->n == t_cap) {
		int cap = t_cap ? t_cap * 2 : 8;
		struct batch *nb = realloc(t_batch, sizeof(*nb) + (size_t)cap * sizeof(struct item));
		if (!nb)
			return ncclSystemError;
		if (!t_batch)
			nb->n = 0;
		t_batch = nb;
		t_cap = cap;
	}
	t_stream = stream;
	t_batch->it[t_batch->n++] = it;
	return t_depth ? ncclSuccess : flush();
}

static ncclResult_t group_start(void)
{
	t_depth++;
	return ncclSuccess;
}

static ncclResult_t group_end(void)
{
	if (t_depth == 0)
		return ncclInvalidUsage;
	if (--t_depth == 0)
		return flush();
	return ncclSuccess;
}

static ncclResult_t coll(ncclComm_t c, size_t count, int dtype, double factor, rtstream_t stream)
{
	int sz = dtype_size(dtype);
	struct item it = {.kind = IT_COLL, .comm = c};
	if (!c || sz < 0)
		return ncclInvalidArgument;
	it.seq = ++c->seq;
	it.bytes = (uint64_t)count * (uint64_t)sz;
	it.busbytes = (double)it.bytes * factor;
	return add(it, stream);
}

static ncclResult_t p2p(int kind, ncclComm_t c, size_t count, int dtype, int peer, rtstream_t stream)
{
	int sz = dtype_size(dtype);
	struct item it = {.kind = kind, .comm = c, .peer = peer};
	if (!c || sz < 0 || peer < 0 || peer >= c->nranks)
		return ncclInvalidArgument;
	it.seq = kind == IT_SEND ? ++c->nsend[peer] : ++c->nrecv[peer];
	it.bytes = (uint64_t)count * (uint64_t)sz;
	it.busbytes = (double)it.bytes;
	return add(it, stream);
}

/* ---- communicators ---- */

static void shm_name(char *out, size_t n, const ncclUniqueId *id)
{
	int o = snprintf(out, n, "%s", SHM_PREFIX);
	for (int i = 0; i < 16 && (size_t)o + 2 < n; i++)
		o += snprintf(out + o, n - (size_t)o, "%02x", (unsigned char)id->internal[i]);
}

static ncclResult_t comm_init(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
	struct ncclComm *c;
	struct shm *s;
	struct stat st;
	int fd, zero = 0, last;
	const char *e;
	if (!out || nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	c = calloc(1, sizeof(*c));
	if (!c)
		return ncclSystemError;
	shm_name(c->name, sizeof(c->name), &id);
	fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
	if (fd < 0)
		goto fail;
	if (fstat(fd, &st) != 0 || (st.st_size < (off_t)sizeof(*s) && ftruncate(fd, sizeof(*s)) != 0)) {
		close(fd);
		goto fail;
	}
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s == MAP_FAILED)
		goto fail;
	if (__atomic_compare_exchange_n(&s->init, &zero, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
		pthread_mutexattr_t ma;
		pthread_condattr_t ca;
		pthread_mutexattr_init(&ma);
		pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
		pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
		pthread_mutex_init(&s->mu, &ma);
		pthread_condattr_init(&ca);
		pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&s->cv, &ca);
		s->nranks = nranks;
		__atomic_store_n(&s->init, 2, __ATOMIC_SEQ_CST);
	}
	while (__atomic_load_n(&s->init, __ATOMIC_SEQ_CST) != 2)
		usleep(1000);
	if (s->nranks != nranks) {
		munmap(s, sizeof(*s));
		free(c);
		return ncclInvalidUsage;
	}
	c->shm = s;
	c->rank = rank;
	c->nranks = nranks;
	e = getenv("XPU_FAKEGPU_NCCL_STALL");
	c->stall = e && *e ? atoll(e) + 1 : 0;
	lock(s);
	last = ++s->joined == nranks;
	s->attached++;
	pthread_cond_broadcast(&s->cv);
	NC(_bootstrap_wait)(s);
	/* Every rank has the segment mapped: its name is no longer needed, and
	 * a job killed from now on leaves nothing behind in /dev/shm. Unlinked
	 * before the others wake, so that a new communicator on the same id
	 * gets a fresh segment. */
	if (last)
		shm_unlink(c->name);
	unlock(s);
	*out = c;
	return ncclSuccess;
fail:
	free(c);
	return ncclSystemError;
}

static ncclResult_t comm_destroy(ncclComm_t c)
{
	if (!c)
		return ncclInvalidArgument;
	lock(c->shm);
	c->shm->attached--;
	unlock(c->shm);
	munmap(c->shm, sizeof(*c->shm));
	free(c);
	return ncclSuccess;
}

static ncclResult_t get_unique_id(ncclUniqueId *id)
{
	size_t got = 0;
	if (!id)
		return ncclInvalidArgument;
	while (got < sizeof(id->internal)) {
		ssize_t n = getrandom(id->internal + got, sizeof(id->internal) - got, 0);
		if (n <= 0)
			return ncclSystemError;
		got += (size_t)n;
	}
	return ncclSuccess;
}

static const char *error_string(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error";
	case ncclSystemError: return "unhandled system error";
	case ncclInternalError: return "internal error";
	case ncclInvalidArgument: return "invalid argument";
	case ncclInvalidUsage: return "invalid usage";
	default: return "unknown result code";
	}
}

/* ---- exported API: every name twice, as NCCL does (nccl* and pnccl*) ---- */

#define TWIN(ret, name, params, args)                       \
	API ret NC(name) params { return impl_##name args; } \
	API ret PNC(name) params { return impl_##name args; }

static ncclResult_t impl_GetUniqueId(ncclUniqueId *id) { return get_unique_id(id); }
static ncclResult_t impl_CommInitRank(ncclComm_t *c, int n, ncclUniqueId id, int r) { return comm_init(c, n, id, r); }
static ncclResult_t impl_CommInitRankConfig(ncclComm_t *c, int n, ncclUniqueId id, int r, void *cfg)
{
	(void)cfg;
	return comm_init(c, n, id, r);
}
static ncclResult_t impl_CommDestroy(ncclComm_t c) { return comm_destroy(c); }
static ncclResult_t impl_CommAbort(ncclComm_t c) { return comm_destroy(c); }
static ncclResult_t impl_CommCount(ncclComm_t c, int *n)
{
	if (!c || !n)
		return ncclInvalidArgument;
	*n = c->nranks;
	return ncclSuccess;
}
static ncclResult_t impl_CommUserRank(ncclComm_t c, int *r)
{
	if (!c || !r)
		return ncclInvalidArgument;
	*r = c->rank;
	return ncclSuccess;
}
static ncclResult_t impl_CommCuDevice(ncclComm_t c, int *d)
{
	if (!c || !d)
		return ncclInvalidArgument;
	*d = c->rank % 8;
	return ncclSuccess;
}
static ncclResult_t impl_CommGetAsyncError(ncclComm_t c, ncclResult_t *e)
{
	if (!c || !e)
		return ncclInvalidArgument;
	*e = ncclSuccess;
	return ncclSuccess;
}
static ncclResult_t impl_GetVersion(int *v)
{
	if (!v)
		return ncclInvalidArgument;
	*v = 22105;
	return ncclSuccess;
}
static const char *impl_GetErrorString(ncclResult_t r) { return error_string(r); }
static const char *impl_GetLastError(ncclComm_t c)
{
	(void)c;
	return "";
}
static ncclResult_t impl_GroupStart(void) { return group_start(); }
static ncclResult_t impl_GroupEnd(void) { return group_end(); }

static ncclResult_t impl_AllReduce(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, rtstream_t st)
{
	(void)s; (void)r; (void)op;
	return coll(c, n, t, c ? 2.0 * (c->nranks - 1) / c->nranks : 0, st);
}
static ncclResult_t impl_AllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, rtstream_t st)
{
	(void)s; (void)r;
	return coll(c, n, t, c ? (double)(c->nranks - 1) : 0, st);
}
static ncclResult_t impl_ReduceScatter(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, rtstream_t st)
{
	(void)s; (void)r; (void)op;
	return coll(c, n, t, c ? (double)(c->nranks - 1) : 0, st);
}
static ncclResult_t impl_Broadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, rtstream_t st)
{
	(void)s; (void)r; (void)root;
	return coll(c, n, t, 1.0, st);
}
static ncclResult_t impl_Bcast(void *b, size_t n, int t, int root, ncclComm_t c, rtstream_t st)
{
	(void)b; (void)root;
	return coll(c, n, t, 1.0, st);
}
static ncclResult_t impl_Reduce(const void *s, void *r, size_t n, int t, int op, int root, ncclComm_t c, rtstream_t st)
{
	(void)s; (void)r; (void)op; (void)root;
	return coll(c, n, t, 1.0, st);
}
static ncclResult_t impl_Send(const void *b, size_t n, int t, int peer, ncclComm_t c, rtstream_t st)
{
	(void)b;
	return p2p(IT_SEND, c, n, t, peer, st);
}
static ncclResult_t impl_Recv(void *b, size_t n, int t, int peer, ncclComm_t c, rtstream_t st)
{
	(void)b;
	return p2p(IT_RECV, c, n, t, peer, st);
}

TWIN(ncclResult_t, GetUniqueId, (ncclUniqueId * id), (id))
TWIN(ncclResult_t, CommInitRank, (ncclComm_t * c, int n, ncclUniqueId id, int r), (c, n, id, r))
TWIN(ncclResult_t, CommInitRankConfig, (ncclComm_t * c, int n, ncclUniqueId id, int r, void *cfg), (c, n, id, r, cfg))
TWIN(ncclResult_t, CommDestroy, (ncclComm_t c), (c))
TWIN(ncclResult_t, CommAbort, (ncclComm_t c), (c))
TWIN(ncclResult_t, CommCount, (ncclComm_t c, int *n), (c, n))
TWIN(ncclResult_t, CommUserRank, (ncclComm_t c, int *r), (c, r))
TWIN(ncclResult_t, CommCuDevice, (ncclComm_t c, int *d), (c, d))
TWIN(ncclResult_t, CommGetAsyncError, (ncclComm_t c, ncclResult_t *e), (c, e))
TWIN(ncclResult_t, GetVersion, (int *v), (v))
TWIN(const char *, GetErrorString, (ncclResult_t r), (r))
TWIN(const char *, GetLastError, (ncclComm_t c), (c))
TWIN(ncclResult_t, GroupStart, (void), ())
TWIN(ncclResult_t, GroupEnd, (void), ())
TWIN(ncclResult_t, AllReduce, (const void *s, void *r, size_t n, int t, int op, ncclComm_t c, rtstream_t st), (s, r, n, t, op, c, st))
TWIN(ncclResult_t, AllGather, (const void *s, void *r, size_t n, int t, ncclComm_t c, rtstream_t st), (s, r, n, t, c, st))
TWIN(ncclResult_t, ReduceScatter, (const void *s, void *r, size_t n, int t, int op, ncclComm_t c, rtstream_t st), (s, r, n, t, op, c, st))
TWIN(ncclResult_t, Broadcast, (const void *s, void *r, size_t n, int t, int root, ncclComm_t c, rtstream_t st), (s, r, n, t, root, c, st))
TWIN(ncclResult_t, Bcast, (void *b, size_t n, int t, int root, ncclComm_t c, rtstream_t st), (b, n, t, root, c, st))
TWIN(ncclResult_t, Reduce, (const void *s, void *r, size_t n, int t, int op, int root, ncclComm_t c, rtstream_t st), (s, r, n, t, op, root, c, st))
TWIN(ncclResult_t, Send, (const void *b, size_t n, int t, int peer, ncclComm_t c, rtstream_t st), (b, n, t, peer, c, st))
TWIN(ncclResult_t, Recv, (void *b, size_t n, int t, int peer, ncclComm_t c, rtstream_t st), (b, n, t, peer, c, st))
