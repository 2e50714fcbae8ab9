#!/usr/bin/env python3
"""The real-GPU workloads of make gpu-check (scripts/gpu-check.sh), one per
argument; each prints progress lines the script waits for:

  nccl-sleep   one process: an NCCL all-reduce, then a kernel that never ends
               (torch.cuda._sleep) and torch.cuda.synchronize(); prints "hung"
  ddp          a rank of torchrun (4 ranks on the one GPU): DDP over gloo on
               CUDA tensors; rank FAULT_RANK (default 2) launches a kernel
               that never ends at step FAULT_STEP (default 3); prints
               "rank=R step=S done"
  triton       one process: a @triton.jit kernel spinning for ever on a flag
               it loads, then torch.cuda.synchronize(); prints "hung"
  graph        one process: torch.cuda._sleep captured in a CUDA graph,
               replayed, then torch.cuda.synchronize(); prints "hung"
  launchbound  x.add_(1) on 16 elements, LAUNCHES (default 200000) launches
               timed after a warm-up, best of 3; prints "ns_per_launch=N"
               (with RATE_DIR set, waits there after the warm-up: ratebarrier.py)
  launchblocks x.add_(1) as launchbound, after the same warm-up ("warm"),
               in blocks of BLOCK (default 20000) launches until the file
               STOP_FILE exists, each printed as "block start=NS end=NS
               ns=NS_PER_LAUNCH" (wall clock, time.time_ns): paired.py
  train-eager  a 6-layer transformer (d=256, 4 heads, ff 1024, batch 8x128,
               vocab 1000, AdamW) trained eagerly, as the H200 showed it:
               launch-bound, about 417 launches a step; after 20 steps
               ("warm"), blocks of STEP_BLOCK (default 10; 1 GPU-bound) steps until
               STOP_FILE exists, each "block start=NS end=NS ns=NS_PER_STEP
               steps=N cpu=NS_PER_STEP" (the main thread's CPU; steppaired.py)
  train-gpubound the same step and a kernel of GPU_MS (default 100) ms of
               GPU time (torch.cuda._sleep, calibrated): GPU-bound
  train-graph  the same step captured once in a CUDA graph and replayed
  libs         prints the paths of the CUDA runtime and driver this torch maps

and the calls that block behind a kernel that never ends though they are
no waits (issue 39), each in one process, printing "hung" before the call:
  launch-blocking   CUDA_LAUNCH_BLOCKING=1 (set before CUDA starts): the
                    launch of torch.cuda._sleep's kernel waits for it
  queue-full        x.add_(1) warmed up (its module loaded: CUDA loads a
                    kernel's module lazily at its first launch, which would
                    wait for the running kernel at once), the kernel that
                    never ends, then a loop of x.add_(1) without a
                    synchronize until a launch waits for a slot of the
                    stream's queue (about 1,000)
  free-sync         cached blocks (tensors freed to PyTorch's allocator),
                    the kernel that never ends, then torch.cuda.empty_cache(),
                    whose cudaFree waits for the device
  queue-full-nccl   queue-full in a 1-rank NCCL job (an all-reduce, done and
                    synchronized, first: its watchdog polls the collectives'
                    events, as every NCCL job's does)

Needs PyTorch with CUDA (and Triton for triton); one GPU is enough.
"""
import os
import sys
import time

import torch

import ratebarrier  # beside this file

FOREVER = 1 << 62  # cycles: torch.cuda._sleep(FOREVER) never ends


def say(line):
    os.write(1, (line + "\n").encode())


def nccl_one_rank(port):
    """A 1-rank NCCL job: an all-reduce, done and synchronized."""
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", port)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    say("all-reduce done")


def nccl_sleep():
    nccl_one_rank("29511")
    torch.cuda._sleep(FOREVER)
    say("hung")
    torch.cuda.synchronize()


def ddp():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    rank = int(os.environ["RANK"])
    fault_rank = int(os.environ.get("FAULT_RANK", "2"))
    fault_step = int(os.environ.get("FAULT_STEP", "3"))
    torch.cuda.set_device(0)  # one GPU: every rank on it
    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)).cuda())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    say("rank=%d pid=%d started" % (rank, os.getpid()))
    for step in range(1 << 30):
        x = torch.randn(64, 256, device="cuda")
        loss = model(x).square().mean()
        if rank == fault_rank and step == fault_step:
            torch.cuda._sleep(FOREVER)  # the backward waits behind it
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
        say("rank=%d step=%d done" % (rank, step))


def triton_spin():
    import triton
    import triton.language as tl

    @triton.jit
    def spin_on_flag(flag_ptr):
        while tl.load(flag_ptr, volatile=True) != 0:
            pass

    flag = torch.ones(1, dtype=torch.int32, device="cuda")
    spin_on_flag[(1,)](flag)
    say("hung")
    torch.cuda.synchronize()


def graph():
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # captured on a side stream of its own
        torch.cuda._sleep(FOREVER)
    g.replay()
    say("hung")
    torch.cuda.synchronize()


def sync_first():
    """CUDA started, the device idle: every op before the hang known
    complete, so the kernel that never ends is the oldest op outstanding."""
    x = torch.zeros(16, device="cuda")
    x.add_(1)  # loads the add kernel's module
    torch.cuda.synchronize()
    return x


def launch_blocking():
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # before CUDA starts
    sync_first()
    say("hung")
    torch.cuda._sleep(FOREVER)  # returns once the kernel ends: never


def queue_full():
    x = sync_first()
    torch.cuda._sleep(FOREVER)
    say("hung")
    n = 0
    while True:  # as an asynchronous training loop: it logs, never synchronizes
        x.add_(1)
        n += 1
        if n % 2000 == 0:
            say("launched %d" % n)


def free_sync():
    x = sync_first()
    blocks = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
    del blocks  # 512 MiB back to the caching allocator, still allocated on the device
    torch.cuda.synchronize()
    torch.cuda._sleep(FOREVER)
    say("hung")
    torch.cuda.empty_cache()  # cudaFree of the cached blocks waits for the device
    del x


def queue_full_nccl():
    nccl_one_rank("29513")
    queue_full()


def launchbound():
    n = int(os.environ.get("LAUNCHES", "200000"))
    x = torch.zeros(16, device="cuda")
    for _ in range(20000):
        x.add_(1)
    torch.cuda.synchronize()
    ratebarrier.wait()
    best = None
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        torch.cuda.synchronize()
        s = time.perf_counter() - t
        best = s if best is None else min(best, s)
    say("launches_total=%d launches=%d ns_per_launch=%.0f" % (20000 + 3 * n, n, best * 1e9 / n))


def launchblocks():
    block = int(os.environ.get("BLOCK", "20000"))
    stop = os.environ["STOP_FILE"]
    x = torch.zeros(16, device="cuda")
    for _ in range(20000):
        x.add_(1)
    torch.cuda.synchronize()
    say("warm")
    while not os.path.exists(stop):
        t = time.time_ns()
        for _ in range(block):
            x.add_(1)
        torch.cuda.synchronize()
        e = time.time_ns()
        say("block start=%d end=%d ns=%.1f" % (t, e, (e - t) / block))


def train(mode):
    """A training step as the H200's eager transformer (lookups.md): the
    tokens come from the host each step (copies), the loss is read back
    (a synchronize); blocks of steps timed on the wall clock."""
    torch.manual_seed(0)
    vocab, d, batch, seq = 1000, 256, 8, 128

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            layer = torch.nn.TransformerEncoderLayer(d, 4, 1024, dropout=0.1, batch_first=True, norm_first=True)
            self.enc = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
            self.head = torch.nn.Linear(d, vocab)

        def forward(self, x):
            return self.head(self.enc(self.emb(x)))

    model = Model().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=(mode == "graph"))
    lossf = torch.nn.CrossEntropyLoss()
    x = torch.randint(0, vocab, (batch, seq), pin_memory=True)
    y = torch.randint(0, vocab, (batch, seq), pin_memory=True)
    sleep_cycles = 0
    if mode == "gpubound":
        # cycles of torch.cuda._sleep for GPU_MS of GPU time
        ms = float(os.environ.get("GPU_MS", "100"))
        torch.cuda._sleep(1000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(10_000_000)
        b.record()
        b.synchronize()
        sleep_cycles = int(10_000_000 * ms / a.elapsed_time(b))

    def eager():
        xd, yd = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = lossf(model(xd).view(-1, vocab), yd.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        return loss.item()

    step = eager
    if mode == "graph":
        sx, sy = x.cuda(), y.cuda()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on a side stream (PyTorch's whole-network capture)
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                lossf(model(sx).view(-1, vocab), sy.view(-1)).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)  # backward makes the grads in the graph's pool
        with torch.cuda.graph(g):
            sloss = lossf(model(sx).view(-1, vocab), sy.view(-1))
            sloss.backward()
            opt.step()

        def replayed():
            sx.copy_(x, non_blocking=True)
            sy.copy_(y, non_blocking=True)
            g.replay()
            return sloss.item()
        step = replayed
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    say("warm")
    n = int(os.environ.get("STEP_BLOCK", "1" if mode == "gpubound" else "10"))
    stop = os.environ["STOP_FILE"]
    while not os.path.exists(stop):
        t, c = time.time_ns(), time.thread_time_ns()
        for _ in range(n):
            step()
        e, c = time.time_ns(), time.thread_time_ns() - c
        say("block start=%d end=%d ns=%.1f steps=%d cpu=%.1f" % (t, e, (e - t) / n, n, c / n))


def libs():
    torch.zeros(1, device="cuda")
    seen = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if (name.startswith("libcudart.so") or name.startswith("libcuda.so")) and path not in seen:
                seen.append(path)
    for p in seen:
        say(("cudart=" if "cudart" in p else "cuda=") + p)


WORKLOADS = {"nccl-sleep": nccl_sleep, "ddp": ddp, "triton": triton_spin, "graph": graph,
             "launchbound": launchbound, "launchblocks": launchblocks, "libs": libs,
             "train-eager": lambda: train("eager"), "train-gpubound": lambda: train("gpubound"),
             "train-graph": lambda: train("graph"),
             "launch-blocking": launch_blocking, "queue-full": queue_full, "free-sync": free_sync,
             "queue-full-nccl": queue_full_nccl}

if __name__ == "__main__":
    # a second argument is a tag for --command-regex, else ignored
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in WORKLOADS:
        sys.exit("usage: workloads.py {%s} [TAG]" % ",".join(WORKLOADS))
    WORKLOADS[sys.argv[1]]()
