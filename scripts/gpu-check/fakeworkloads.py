#!/usr/bin/env python3
"""The single-process workloads of workloads.py on the fake GPU testbed, for
scripts/gpu-check.sh --dry: the same calls in the same order, through the
testbed's libraries (run.py's Device). Usage: fakeworkloads.py LIB_DIR NAME

  nccl-sleep  an NCCL all-reduce on one rank, synchronized, then a kernel
              that never ends (gemm_bf16_kernel) and cudaDeviceSynchronize
  triton      a fill kernel, a second later (the JIT) triton_poi_fused_add_0
              spinning on a flag it loads, launched with cuLaunchKernelEx,
              then cudaDeviceSynchronize
  graph       a kernel that never ends captured in a CUDA graph, the graph
              replayed, then cudaDeviceSynchronize
  launchbound trivial launches as fast as Python makes them (gpu-check's
              rate8; workloads.py's launchbound)
  launchblocks the same in blocks until STOP_FILE exists (paired.py)
  train-eager, train-gpubound, train-graph
              the testbed's trainstep in that mode: a real step's call mix
              (workloads.py's transformer), printed in blocks of steps until
              STOP_FILE exists (steppaired.py)
  launch-blocking  CUDA_LAUNCH_BLOCKING=1: the launch of spin_kernel (which
              never ends) waits for it
  queue-full  noop_kernel warmed up and synchronized, spin_kernel, then a
              loop of noop_kernel launches until one waits for a slot
              (XPU_FAKEGPU_QUEUE_DEPTH, default 1024)
  free-sync   a block allocated, spin_kernel, then cudaFree of the block
  queue-full-nccl  queue-full after an NCCL all-reduce on one rank

Each prints "hung" before its last call (the loop, for queue-full).
"""
import ctypes
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata", "fakegpu"))
import ratebarrier  # noqa: E402  beside this file
import run  # noqa: E402  the testbed's job: its Device, TritonKernel and ProcessGroup


# On a GPU, seconds pass between loading the CUDA libraries (import torch)
# and the first launch (CUDA's initialization, the model's setup); the
# testbed's libraries would be done in milliseconds.
SETUP_S = 2.0


WARMUP = 2000  # launches before the timed ones


def warm_launcher(dev):
    """The launch-bound loops' launch: a trivial kernel through the
    runtime, with its arguments bound; warmed up (WARMUP launches)."""
    vals, args = dev.params(0)
    grid, block = run.Dim3(1, 1, 1), run.Dim3(16, 1, 1)
    launch, kernel = dev._launch, dev.kernel("noop_kernel")

    def one():
        launch(kernel, grid, block, args, 0, None)
    one.keep = vals  # the arguments point into it
    for _ in range(WARMUP):
        one()
    dev.synchronize()
    return one


def launchbound(dev):
    """workloads.py's launchbound: trivial launches as fast as Python makes
    them (LAUNCHES, default 200000, timed after a warm-up, best of 3), the
    same barrier (ratebarrier.py) after the warm-up."""
    n = int(os.environ.get("LAUNCHES", "200000"))
    one = warm_launcher(dev)
    ratebarrier.wait()
    best = None
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            one()
        dev.synchronize()
        s = time.perf_counter() - t
        best = s if best is None else min(best, s)
    run.say("launches_total=%d launches=%d ns_per_launch=%.0f" % (WARMUP + 3 * n, n, best * 1e9 / n))


def launchblocks(dev):
    """workloads.py's launchblocks: the same launches in blocks of BLOCK
    until STOP_FILE exists (paired.py)."""
    block = int(os.environ.get("BLOCK", "20000"))
    stop = os.environ["STOP_FILE"]
    one = warm_launcher(dev)
    run.say("warm")
    while not os.path.exists(stop):
        t = time.time_ns()
        for _ in range(block):
            one()
        dev.synchronize()
        e = time.time_ns()
        run.say("block start=%d end=%d ns=%.1f" % (t, e, (e - t) / block))


def spin(dev):
    """torch.cuda._sleep(forever): spin_kernel, which never ends."""
    dev.launch(dev.kernel("spin_kernel"), 0, None, run.KERNEL_HANG)


def queue_full(dev):
    """workloads.py's queue-full: the small kernel warmed up, spin_kernel,
    then launches without a synchronize until one waits for a slot."""
    noop = dev.kernel("noop_kernel")
    dev.launch(noop, 0, None)
    dev.synchronize()
    spin(dev)
    run.say("hung")
    n = 0
    while True:
        dev.launch(noop, 0, None)
        n += 1
        if n % 2000 == 0:
            run.say("launched %d" % n)


def nccl_one_rank(dev):
    """workloads.py's 1-rank NCCL job: an all-reduce, done and synchronized."""
    store = tempfile.mkdtemp(prefix="xpufake-store-")
    pg = run.ProcessGroup(dev, 0, 1, store)
    pg.all_reduce(1 << 20, 7, None)
    dev.synchronize()
    run.say("all-reduce done")


def main(lib_dir, name):
    if name.startswith("train-"):
        exe = os.path.join(lib_dir, "trainstep")
        mode = name[len("train-"):]
        os.execv(exe, [exe, "--mode", mode] + (["--block", "1", "--warm", "5"] if mode == "gpubound" else []))
    if name == "launch-blocking":
        os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # before the driver starts
    dev = run.Device(lib_dir, "cuda")
    time.sleep(SETUP_S)
    if name == "launch-blocking":
        dev.synchronize()
        run.say("hung")
        spin(dev)  # returns once the kernel ends: never
        return
    if name == "queue-full":
        return queue_full(dev)
    if name == "queue-full-nccl":
        nccl_one_rank(dev)
        return queue_full(dev)
    if name == "free-sync":
        block = dev.malloc(64 << 20)
        dev.synchronize()
        spin(dev)
        run.say("hung")
        dev.free(block)  # waits for the device
        return
    if name == "nccl-sleep":
        nccl_one_rank(dev)
        dev.launch(dev.kernel("gemm_bf16_kernel"), 0, None, run.KERNEL_HANG)
    elif name == "triton":
        # as on a GPU: torch.ones(flag) launches a fill kernel, the JIT
        # compiles for a while, then the Triton kernel; nothing waits for
        # the fill, so the probes never see it complete
        dev.launch(dev.kernel("gelu_fwd_kernel"), 5, None)  # an elementwise stand-in
        time.sleep(1.0)
        flag = ctypes.c_uint64(1)
        run.TritonKernel(dev, "triton_poi_fused_add_0")(0, None, run.SPIN_ON_FLAG, flag)
    elif name == "launchbound":
        launchbound(dev)
        return
    elif name == "launchblocks":
        launchblocks(dev)
        return
    elif name == "graph":
        side = dev.stream()
        kernel = dev.kernel("gemm_bf16_kernel")
        graph = dev.capture(side, lambda: dev.launch(kernel, 0, side, run.KERNEL_HANG))
        dev.replay(graph, None)
    else:
        sys.exit("fakeworkloads.py: unknown workload %s" % name)
    run.say("hung")
    dev.synchronize()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: fakeworkloads.py LIB_DIR {nccl-sleep,triton,graph,launchbound,launchblocks,launch-blocking,queue-full,free-sync,queue-full-nccl}")
    main(sys.argv[1], sys.argv[2])
