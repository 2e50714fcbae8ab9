/* nccltest: one rank of a fake NCCL communicator, driven by the Go test.
 * Usage: nccltest RANK NRANKS IDHEX. Runs collectives of several kinds and a
 * ring of grouped send/recv, prints "ok rank=R", destroys the communicator. */
#define _GNU_SOURCE
#include "vendor.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char internal[128]; } uid_t128;
typedef void *comm_t;
int NC(CommInitRank)(comm_t *, int, uid_t128, int);
int NC(AllReduce)(const void *, void *, size_t, int, int, comm_t, rtstream_t);
int NC(AllGather)(const void *, void *, size_t, int, comm_t, rtstream_t);
int NC(Broadcast)(const void *, void *, size_t, int, int, comm_t, rtstream_t);
int NC(Send)(const void *, size_t, int, int, comm_t, rtstream_t);
int NC(Recv)(void *, size_t, int, int, comm_t, rtstream_t);
int NC(GroupStart)(void);
int NC(GroupEnd)(void);
int NC(CommDestroy)(comm_t);
rterr_t RT(StreamCreate)(rtstream_t *);
rterr_t RT(StreamSynchronize)(rtstream_t);

int main(int argc, char **argv)
{
	uid_t128 id;
	comm_t c;
	rtstream_t s;
	if (argc != 4 || strlen(argv[3]) != 256)
		return 2;
	int rank = atoi(argv[1]), n = atoi(argv[2]);
	for (int i = 0; i < 128; i++) {
		unsigned v;
		sscanf(argv[3] + 2 * i, "%2x", &v);
		id.internal[i] = (char)v;
	}
	if (RT(StreamCreate)(&s) || NC(CommInitRank)(&c, n, id, rank))
		return 1;
	for (int i = 0; i < 5; i++) {
		if (NC(AllReduce)(NULL, NULL, 1 << 20, 7, 0, c, s) || NC(AllGather)(NULL, NULL, 1024, 9, c, s) ||
		    NC(Broadcast)(NULL, NULL, 4096, 0, 0, c, s))
			return 1;
		NC(GroupStart)();
		NC(Send)(NULL, 256, 7, (rank + 1) % n, c, s);
		NC(Recv)(NULL, 256, 7, (rank + n - 1) % n, c, s);
		NC(GroupEnd)();
	}
	RT(StreamSynchronize)(s);
	NC(CommDestroy)(c);
	printf("ok rank=%d\n", rank);
	return 0;
}
