"""A hung 4-rank PyTorch job for the dump benchmark (BenchmarkTorchJob).

`job.py PORT` starts WORLD ranks (`job.py PORT RANK`), each a
DistributedDataParallel model on gloo. Every rank prints "rank R pid P",
then all but the last run a step and block in its backward's allreduce,
waiting for the last rank, which sleeps instead. The launcher waits for
its ranks; kill its process group to end the job.
"""

import datetime
import os
import subprocess
import sys
import time

WORLD = 4


def rank_main(port, rank):
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(hours=2),
    )
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)))
    x = torch.randn(8, 64)
    print(f"rank {rank} pid {os.getpid()}", flush=True)
    if rank == WORLD - 1:
        while True:
            time.sleep(3600)
    model(x).sum().backward()  # the allreduce never completes


def main():
    port = int(sys.argv[1])
    if len(sys.argv) > 2:
        rank_main(port, int(sys.argv[2]))
        return
    ranks = [subprocess.Popen([sys.executable, __file__, str(port), str(r)]) for r in range(WORLD)]
    for p in ranks:
        p.wait()


if __name__ == "__main__":
    main()
