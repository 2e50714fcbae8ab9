#!/usr/bin/env python3
"""Fake distributed training job on the fake GPU testbed.

    python3 run.py --nproc N --steps S [--vendor cuda|maca] [--workers W]
                   [--fault KIND --fault-rank R --fault-step K]
                   [--busy KIND --busy-step K --busy-s S --busy-steps N]
                   [--launch-bound L] [--lone] [--nnodes M --node-rank I]

Without XPU_FAKEGPU_ROLE=rank this is a torchrun-like launcher: it spawns
--nproc rank processes (its direct children) with RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, forwards
SIGTERM/SIGINT to them and fails when a rank fails. Each rank runs a small
trainer through ctypes on the fake CUDA (or MACA) libraries in --lib-dir.

With --nnodes M (default 1) the job is M nodes of --nproc ranks each, and
this launcher is node --node-rank I: its ranks are I*N .. I*N+N-1 of a
world of M*N, GROUP_RANK=I. Run one launcher per node, each with the same
arguments but --node-rank, and the same XPU_FAKEGPU_STORE (required with
M > 1): the store carries the communicator's unique id, the run id and
master port derive from it, and the fake NCCL joins every rank of the
world on this machine (its segment is named from the unique id). Each
launcher may run under its own xpu_timer_launch (its own timeline path
and metrics port): two nodes on one machine.

Batches come from a data loader. With --workers 0 (the default) it is a
thread of the rank. With --workers W it is like PyTorch's DataLoader with
num_workers=W: the rank forks W worker processes with os.fork() when
training starts (after its GPU libraries are loaded and its threads run, so
the workers inherit its environment, RANK included, and its mappings); the
rank sends batch indices round robin down one pipe per worker, keeping two
per worker in flight, and its main thread reads each batch, in order, from
the pipe of the worker that made it.

Steps are numbered from 0; a fault at step K hangs forever (never exits):
  skip-collective  rank R skips the gradient all-reduce of step K
  kernel-hang      a backward kernel of rank R never finishes at step K
  python-sleep     rank R sleeps in Python before the all-reduce of step K
  deadlock         two threads of rank R take two locks in opposite order
  dataloader       rank R's data-loader thread (with --workers, its main
                   process) blocks in a read before batch K
  dataloader-worker  the worker of rank R that makes batch K blocks in a
                   read of a pipe nobody writes; rank R's main thread waits
                   for the batch (implies --workers 2 unless --workers is set)
  nccl-stall       rank R's all-reduce of step K never progresses (dead NIC)
  triton-hang      rank R's Triton kernel of step K (triton_poi_fused_add_0,
                   the step's first launch, through the driver's
                   cuLaunchKernelEx as Triton 3.x launches) spins for ever
                   on a flag it loads
  graph-hang       every rank replays a CUDA graph of its loss each step and
                   synchronizes the device (torch.cuda.synchronize()); rank
                   R's replay of step K never ends (a captured kernel spins
                   on a flag), so no launch call names the stuck kernel

and three where rank R's main thread then blocks in a call that is no
wait, spinning as CUDA does (driver.c), at the start of step K (or of the
first step from K on at which the file XPU_FAKEGPU_FAULT_GATE names
exists, when set), behind spin_kernel (torch.cuda._sleep's), which never
ends:
  queue-full       then a loop of small launches that never synchronizes:
                   the stream's queue fills (XPU_FAKEGPU_QUEUE_DEPTH,
                   default 1024) and a cuLaunchKernel waits for a slot
  launch-blocking  every rank runs with CUDA_LAUNCH_BLOCKING=1: the launch
                   of spin_kernel waits for it (and the peers' all-reduces
                   wait for rank R's, inside ncclAllReduce)
  free-sync        then a cached block is freed (cudaFree, as
                   torch.cuda.empty_cache()): cuMemFree_v2 waits for the
                   device

--busy KIND makes every rank, from step K for N steps (default 3), spend
S seconds in a call that ends (no hang; for tests of false alarms):
  jit              after a synchronize, a module compiled from PTX
                   (cuModuleLoadData): the CPU busy in the driver, no GPU
                   work outstanding
  slow-kernel      under CUDA_LAUNCH_BLOCKING=1, a kernel of S seconds: its
                   launch returns when it ends
  burst            a kernel of S seconds, then a loop of small launches
                   that fills the stream's queue behind it: the launch
                   past the queue waits until the kernel ends

Not a hang (it ends; not in the hang matrix):
  checkpoint       rank R saves a checkpoint before the all-reduce of step
                   K, for --checkpoint-seconds (default 60), through
                   functions shaped as torch.save's (save_checkpoint ->
                   save -> _save -> write_record, a throttled writer of
                   1 MiB records into a 64 MiB file), while the others wait
                   in the all-reduce; then it goes on

--slow-rank R --slow-factor F makes rank R's steps F times as long on the
GPU (a healthy job with uneven steps). --init-delay S waits S seconds
between loading the GPU libraries and creating the communicator, as
building a model does (a node agent scanning for new ranks every second
then follows them before their communicator's creation). With
XPU_FAKEGPU_START_GATE=FILE every rank, its communicator created, waits
for FILE to exist before its first step (a test's monitoring made ready
meanwhile).

The CUDA path is the one a real GPU takes: the runtime calls the driver,
and waits spin on a CPU (XPU_FAKEGPU_SCHED=yield|blocking changes that).
With --launch-bound L each step is L trivial launches (cudaLaunchKernel
from Python, as a loop of x.add_(1) makes them) and one synchronize, no
model and no collective; the rank then prints "xpu-fakegpu rank=R
launches=N seconds=S launches_per_second=X".
Progress on stdout: "xpu-fakegpu rank=R pid=P started",
"xpu-fakegpu rank=R step=S done". With --lone the job is one process
without a launcher and without RANK in its environment (a one-GPU script):
it runs as rank 0 of 1 with a communicator of its own. Standard library
only (CPython 3.9+).
"""
import argparse
import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
import zlib

FAULTS = ("skip-collective", "kernel-hang", "python-sleep", "deadlock", "dataloader", "dataloader-worker", "nccl-stall",
          "triton-hang", "graph-hang", "checkpoint", "queue-full", "launch-blocking", "free-sync")
BUSY = ("jit", "slow-kernel", "burst")
HERE = os.path.dirname(os.path.abspath(__file__))
COLLECTIVES_PER_STEP = 3  # two gradient buckets and the loss


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--vendor", choices=("cuda", "maca"), default="cuda")
    p.add_argument("--fault", choices=FAULTS)
    p.add_argument("--fault-rank", type=int, default=0)
    p.add_argument("--fault-step", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=20.0, help="GPU time of one step")
    p.add_argument("--lib-dir", default=os.path.join(HERE, "build"))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--launch-bound", type=int, default=0, metavar="L",
                   help="launch-bound mode: L trivial launches and one synchronize per step")
    p.add_argument("--workers", type=int, default=None,
                   help="data loader worker processes (0: a thread; default 0, 2 with --fault dataloader-worker)")
    p.add_argument("--nnodes", type=int, default=1, help="nodes of the job (one launcher each)")
    p.add_argument("--node-rank", type=int, default=0, help="this launcher's node")
    p.add_argument("--checkpoint-seconds", type=float, default=60.0, help="how long the checkpoint fault writes")
    p.add_argument("--slow-rank", type=int, default=-1, help="a rank whose steps are --slow-factor times as long")
    p.add_argument("--slow-factor", type=float, default=1.0)
    p.add_argument("--init-delay", type=float, default=0.0,
                   help="seconds between loading the GPU libraries and creating the communicator (building a model)")
    p.add_argument("--busy", choices=BUSY, help="a long call that ends, on every rank (no hang)")
    p.add_argument("--busy-step", type=int, default=2)
    p.add_argument("--busy-s", type=float, default=3.0, help="seconds of each busy call")
    p.add_argument("--busy-steps", type=int, default=3, help="steps with a busy call, from --busy-step")
    p.add_argument("--lone", action="store_true", help="one process, no launcher, no RANK in the environment")
    p.add_argument("--queue-depth", type=int, default=0,
                   help="operations a stream holds before a launch waits for a slot (XPU_FAKEGPU_QUEUE_DEPTH; default 1024)")
    args = p.parse_args(argv)
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        p.error("--node-rank must be in [0, --nnodes)")
    if args.workers is None:
        args.workers = 2 if args.fault == "dataloader-worker" else 0
    if args.workers < 0 or (args.fault == "dataloader-worker" and args.workers == 0):
        p.error("--workers must be positive with --fault dataloader-worker, and never negative")
    return args


# --------------------------------------------------------------------------
# launcher

KILL_GRACE_S = 3.0


def launch(args):
    store = os.environ.get("XPU_FAKEGPU_STORE")
    own_store = store is None
    if own_store:
        if args.nnodes > 1:
            sys.stderr.write("xpu-fakegpu: --nnodes > 1 needs XPU_FAKEGPU_STORE, shared by every node\n")
            return 2
        store = tempfile.mkdtemp(prefix="xpufake-store-")
    procs = []
    kill_at = []  # when ranks still alive after a forwarded signal are killed

    def forward(signum, frame):
        # As torchrun: pass the signal on, and kill what still runs after a
        # grace period (a rank hung inside the GPU library may ignore it).
        if not kill_at:
            kill_at.append(time.monotonic() + KILL_GRACE_S)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except OSError:
                    pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    port, run_id = 29500 + os.getpid() % 1000, "xpufake-%d" % os.getpid()
    if args.nnodes > 1:
        # every node's launcher names the same job
        tag = zlib.crc32(os.path.abspath(store).encode())
        port, run_id = 29500 + tag % 1000, "xpufake-%08x" % tag
    try:
        for local in range(args.nproc):
            env = dict(os.environ)
            env.update(
                XPU_FAKEGPU_ROLE="rank",
                XPU_FAKEGPU_STORE=store,
                RANK=str(args.node_rank * args.nproc + local),
                LOCAL_RANK=str(local),
                WORLD_SIZE=str(args.nnodes * args.nproc),
                LOCAL_WORLD_SIZE=str(args.nproc),
                GROUP_RANK=str(args.node_rank),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                TORCHELASTIC_RUN_ID=run_id,
            )
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env))
        failed = 0
        live = list(procs)
        while live:
            for p in list(live):
                rc = p.poll()
                if rc is None:
                    continue
                live.remove(p)
                if rc != 0 and not failed:
                    failed = rc
                    sys.stderr.write("xpu-fakegpu: rank pid %d exited with %d, stopping the job\n" % (p.pid, rc))
                    forward(signal.SIGTERM, None)
            if kill_at and time.monotonic() > kill_at[0]:
                for p in live:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.05)
        return 1 if failed else 0
    finally:
        if own_store:
            for f in os.listdir(store):
                os.unlink(os.path.join(store, f))
            os.rmdir(store)


# --------------------------------------------------------------------------
# the device, through ctypes


# spin_kernel's nvcc host stub in libfakekernels (a name Python would
# mangle as an attribute inside a class)
SLEEP_STUB = "__device_stub__ZN2at4cuda40_GLOBAL__N__758183f4_8_Sleep_cu_088d913f11spin_kernelEl"


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig of cuda.h, what cuLaunchKernelEx takes."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


NOT_READY = 600
KERNEL_HANG = 1
SPIN_ON_FLAG = 2  # the kernel spins while the word at its params[4] is nonzero


class CudaError(RuntimeError):
    pass


class Device:
    """The runtime, driver, collective and kernel libraries of one vendor."""

    def __init__(self, lib_dir, vendor):
        self.vendor = vendor
        mode = ctypes.RTLD_GLOBAL
        if vendor == "cuda":
            self.rt = ctypes.CDLL(os.path.join(lib_dir, "libcudart.so.12"), mode=mode)
            # As PyTorch: the runtime loads the driver at its first call;
            # this handle is Triton's, to the library already loaded.
            self.check(self.rt.cudaGetDeviceCount(ctypes.byref(ctypes.c_int())), "cudaGetDeviceCount")
            self.drv = ctypes.CDLL("libcuda.so.1", mode=mode)
            self.ccl = ctypes.CDLL(os.path.join(lib_dir, "libnccl.so.2"), mode=mode)
            self.p, self.cp = "cuda", "nccl"
        else:
            self.rt = ctypes.CDLL(os.path.join(lib_dir, "libmcruntime.so.2"), mode=mode)
            self.drv = None
            self.ccl = ctypes.CDLL(os.path.join(lib_dir, "libmccl.so.2"), mode=mode)
            self.p, self.cp = "mc", "mccl"
        self.kernels_path = os.path.join(lib_dir, "libfakekernels.so")
        self.kernels = ctypes.CDLL(self.kernels_path)
        vp = ctypes.c_void_p
        self._launch = self.fn("LaunchKernel", [vp, Dim3, Dim3, vp, ctypes.c_size_t, vp])
        self._record = self.fn("EventRecord", [vp, vp])
        self._query = self.fn("EventQuery", [vp])
        self._wait = self.fn("StreamWaitEvent", [vp, vp, ctypes.c_uint])
        self._memcpy = self.fn("Memcpy", [vp, vp, ctypes.c_size_t, ctypes.c_int])
        self._allreduce = self.cfn("AllReduce", [vp, vp, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, vp, vp])
        self._ccl_init = self.cfn("CommInitRank", [ctypes.POINTER(vp), ctypes.c_int, UniqueId, ctypes.c_int])
        if self.drv is not None:
            self._cu_launch = self.drv.cuLaunchKernel
            self._cu_launch.argtypes = [vp] + [ctypes.c_uint] * 7 + [vp, vp, vp]
            mod = vp()
            self.check(self.drv.cuModuleLoad(ctypes.byref(mod), self.kernels_path.encode()), "cuModuleLoad")
            self.triton_fn = vp()
            self.check(self.drv.cuModuleGetFunction(ctypes.byref(self.triton_fn), mod, b"triton_fused_adam_kernel"),
                       "cuModuleGetFunction")
        self.check(self.fn("SetDevice", [ctypes.c_int])(int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))), "SetDevice")

    def fn(self, name, argtypes):
        f = getattr(self.rt, self.p + name)
        f.argtypes = argtypes
        f.restype = ctypes.c_int
        return f

    def cfn(self, name, argtypes):
        f = getattr(self.ccl, self.cp + name)
        f.argtypes = argtypes
        f.restype = ctypes.c_int
        return f

    def check(self, rc, what):
        if rc != 0:
            raise CudaError("%s failed with %d" % (what, rc))

    def kernel(self, name):
        return ctypes.cast(getattr(self.kernels, name), ctypes.c_void_p)

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.fn("StreamCreate", [ctypes.c_void_p])(ctypes.byref(s)), "StreamCreate")
        return s

    def event(self, timing=False):
        e = ctypes.c_void_p()
        flags = 0 if timing else 2
        self.check(self.fn("EventCreateWithFlags", [ctypes.c_void_p, ctypes.c_uint])(ctypes.byref(e), flags),
                   "EventCreateWithFlags")
        return e

    def destroy_event(self, e):
        self.fn("EventDestroy", [ctypes.c_void_p])(e)

    @staticmethod
    def params(us, flags=0, flag_word=None):
        word = ctypes.addressof(flag_word) if flag_word is not None else 0
        vals = (ctypes.c_uint64 * 5)(int(us), flags, 0, 0, word)
        args = (ctypes.c_void_p * 6)(*[ctypes.addressof(vals) + 8 * i for i in range(5)], None)
        return vals, args

    def launch(self, kernel, us, stream, flags=0, grid=(108, 1, 1), block=(256, 1, 1), flag_word=None):
        vals, args = self.params(us, flags, flag_word)
        self.check(self._launch(kernel, Dim3(*grid), Dim3(*block), args, 0, stream), "LaunchKernel")

    def sleep_kernel(self, stream, flags=0):
        """torch.cuda._sleep(): spin_kernel launched through its nvcc host
        stub (kernels.c), which calls cudaLaunchKernel."""
        vals, args = self.params(0, flags)
        vp = ctypes.c_void_p
        stub = getattr(self.kernels, SLEEP_STUB)
        stub.argtypes, stub.restype = [vp, vp, vp], ctypes.c_int
        self.check(stub(ctypes.cast(self._launch, vp), args, stream), "LaunchKernel")

    def synchronize(self):
        """torch.cuda.synchronize(): cudaDeviceSynchronize."""
        self.check(self.fn("DeviceSynchronize", [])(), "DeviceSynchronize")

    def capture(self, stream, body):
        """Captures what body() launches on stream into a graph, instantiated."""
        vp = ctypes.c_void_p
        graph, exec_ = vp(), vp()
        self.check(self.fn("StreamBeginCapture", [vp, ctypes.c_int])(stream, 0), "StreamBeginCapture")
        body()
        self.check(self.fn("StreamEndCapture", [vp, vp])(stream, ctypes.byref(graph)), "StreamEndCapture")
        self.check(self.fn("GraphInstantiate", [vp, vp, ctypes.c_ulonglong])(ctypes.byref(exec_), graph, 0),
                   "GraphInstantiate")
        return exec_

    def replay(self, exec_, stream):
        self.check(self.fn("GraphLaunch", [ctypes.c_void_p, ctypes.c_void_p])(exec_, stream), "GraphLaunch")

    def launch_driver(self, us, stream):
        vals, args = self.params(us)
        if self.drv is None:  # MACA: no driver library in the testbed, use the runtime
            return self.launch(self.kernel("triton_fused_adam_kernel"), us, stream)
        self.check(self._cu_launch(self.triton_fn, 64, 1, 1, 128, 1, 1, 0, stream, args, None), "cuLaunchKernel")

    def record(self, event, stream):
        self.check(self._record(event, stream), "EventRecord")

    def query(self, event):
        return self._query(event)

    def wait_event(self, stream, event):
        self.check(self._wait(stream, event, 0), "StreamWaitEvent")

    def memcpy_d2h(self, dst, src, n):
        self.check(self._memcpy(dst, src, n, 2), "Memcpy")

    def malloc(self, n):
        p = ctypes.c_void_p()
        self.check(self.fn("Malloc", [ctypes.c_void_p, ctypes.c_size_t])(ctypes.byref(p), n), "Malloc")
        return p

    def free(self, p):
        """cudaFree, as torch.cuda.empty_cache() frees a cached block."""
        self.check(self.fn("Free", [ctypes.c_void_p])(p), "Free")

    def jit(self, seconds):
        """A module compiled from (the fake's) PTX: cuModuleLoadData, the
        CPU busy in the driver for that long."""
        if self.drv is None:
            return time.sleep(seconds)  # MACA: no driver library in the testbed
        ptx = b"//fakeptx jit_ms=%d path=%s" % (int(seconds * 1000), self.kernels_path.encode())
        mod = ctypes.c_void_p()
        self.check(self.drv.cuModuleLoadData(ctypes.byref(mod), ptx), "cuModuleLoadData")


class TritonKernel:
    """A kernel as Triton 3.x's launcher handles it: a function got by name
    from a loaded module (cuModuleLoad, cuModuleGetFunction), launched with
    the driver's cuLaunchKernelEx and a CUlaunchConfig. On MACA (no driver
    library in the testbed) it launches through the runtime."""

    def __init__(self, dev, name):
        self.dev, self.name, self.fn = dev, name, None

    def _init_handles(self):
        """Loads the module and gets the function at the first launch, as
        Triton's CompiledKernel does (not when the kernel is defined)."""
        dev = self.dev
        if dev.drv is None:
            self.fn = dev.kernel(self.name)
            return
        vp = ctypes.c_void_p
        fn, mod = vp(), vp()
        dev.check(dev.drv.cuModuleLoad(ctypes.byref(mod), dev.kernels_path.encode()), "cuModuleLoad")
        dev.check(dev.drv.cuModuleGetFunction(ctypes.byref(fn), mod, self.name.encode()), "cuModuleGetFunction")
        self._launch = dev.drv.cuLaunchKernelEx
        self._launch.argtypes = [ctypes.POINTER(LaunchConfig), vp, vp, vp]
        self.fn = fn

    def __call__(self, us, stream, flags=0, flag_word=None, grid=(64, 1, 1), block=(128, 1, 1)):
        if self.fn is None:
            self._init_handles()
        if self.dev.drv is None:
            return self.dev.launch(self.fn, us, stream, flags, grid, block, flag_word)
        vals, args = self.dev.params(us, flags, flag_word)
        cfg = LaunchConfig(*grid, *block, 0, stream, None, 0)
        self.dev.check(self._launch(ctypes.byref(cfg), self.fn, args, None), "cuLaunchKernelEx")


class ProcessGroup:
    """A process group over the fake collective library (like ProcessGroupNCCL)."""

    def __init__(self, dev, rank, world, store):
        self.dev, self.rank, self.world = dev, rank, world
        uid = UniqueId()
        path = os.path.join(store, "nccl_id")
        if rank == 0:
            dev.check(dev.cfn("GetUniqueId", [ctypes.POINTER(UniqueId)])(ctypes.byref(uid)), "GetUniqueId")
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                # All 128 bytes: uid.internal, a c_char array, would stop at the first NUL.
                f.write(ctypes.string_at(ctypes.addressof(uid), 128).hex())
            os.rename(tmp, path)
        else:
            while not os.path.exists(path):
                time.sleep(0.01)
            with open(path) as f:
                raw = bytes.fromhex(f.read().strip())
            if len(raw) != 128:
                raise RuntimeError("nccl_id: %d bytes, want 128" % len(raw))
            ctypes.memmove(ctypes.addressof(uid), raw, 128)
        self.comm = ctypes.c_void_p()
        dev.check(dev._ccl_init(ctypes.byref(self.comm), world, uid, rank), "CommInitRank")

    def all_reduce(self, count, dtype, stream):
        self.dev.check(self.dev._allreduce(None, None, count, dtype, 0, self.comm, stream), "AllReduce")

    def destroy(self):
        self.dev.cfn("CommDestroy", [ctypes.c_void_p])(self.comm)


# --------------------------------------------------------------------------
# the model


class Layer:
    def __init__(self, dev, stream, us):
        self.dev, self.stream, self.us = dev, stream, us
        self.hang_next_backward = False


class LayerNorm(Layer):
    def forward(self, x):
        self.dev.launch(self.dev.kernel("layernorm_fwd_kernel"), self.us, self.stream)
        return x

    def backward(self, g):
        self.dev.launch(self.dev.kernel("layernorm_bwd_kernel"), self.us, self.stream)
        return g


class Attention(Layer):
    def forward(self, x):
        self.dev.launch(self.dev.kernel("gemm_bf16_kernel"), self.us, self.stream)
        self.dev.launch(self.dev.kernel("flash_attn_fwd_kernel"), 2 * self.us, self.stream)
        self.dev.launch(self.dev.kernel("_ZN4fake9attention14softmax_kernelIfEEvPKm"), self.us // 2, self.stream)
        return x

    def backward(self, g):
        flags = KERNEL_HANG if self.hang_next_backward else 0
        self.hang_next_backward = False
        self.dev.launch(self.dev.kernel("flash_attn_bwd_kernel"), 3 * self.us, self.stream, flags)
        self.dev.launch(self.dev.kernel("gemm_bf16_kernel"), self.us, self.stream)
        return g


class MLP(Layer):
    def forward(self, x):
        self.dev.launch(self.dev.kernel("gemm_bf16_kernel"), self.us, self.stream)
        self.dev.launch(self.dev.kernel("gelu_fwd_kernel"), self.us // 4, self.stream)
        self.dev.launch(self.dev.kernel("gemm_bf16_kernel"), self.us, self.stream)
        return x

    def backward(self, g):
        self.dev.launch(self.dev.kernel("gemm_bf16_kernel"), 2 * self.us, self.stream)
        return g


class TransformerBlock:
    def __init__(self, dev, stream, us):
        self.ln1 = LayerNorm(dev, stream, us // 4)
        self.attn = Attention(dev, stream, us)
        self.ln2 = LayerNorm(dev, stream, us // 4)
        self.mlp = MLP(dev, stream, us)

    def forward(self, x):
        x = self.attn.forward(self.ln1.forward(x))
        return self.mlp.forward(self.ln2.forward(x))

    def backward(self, g):
        g = self.ln2.backward(self.mlp.backward(g))
        return self.ln1.backward(self.attn.backward(g))


class Model:
    def __init__(self, dev, stream, layers, step_us):
        per_layer = max(1, int(step_us / (layers * 15)))
        self.dev, self.stream = dev, stream
        self.blocks = [TransformerBlock(dev, stream, per_layer) for _ in range(layers)]
        self.loss_buf = dev.malloc(4)
        self.per_layer = per_layer

    def forward(self, batch):
        x = batch
        for b in self.blocks:
            x = b.forward(x)
        self.dev.launch(self.dev.kernel("cross_entropy_fwd_kernel"), self.per_layer // 2, self.stream)
        return x

    def backward(self, loss):
        g = loss
        for b in reversed(self.blocks):
            g = b.backward(g)
        return g


class DistributedDataParallel:
    """Gradient all-reduce on its own communication stream, after backward."""

    def __init__(self, model, pg, dev, compute, watchdog):
        self.model, self.pg, self.dev, self.compute = model, pg, dev, compute
        self.comm = dev.stream()
        self.watchdog = watchdog
        self.buckets = [25 << 20, 12 << 20]  # bf16 elements per bucket

    def reduce_gradients(self, step, skip=False):
        bwd_end = self.dev.event()
        self.dev.record(bwd_end, self.compute)
        self.dev.wait_event(self.comm, bwd_end)
        # the start event of the step's collectives, polled by the watchdog
        # as ProcessGroupNCCL's is with TORCH_NCCL_ENABLE_TIMING=1: once
        # ready, the backward it waited for is known complete
        ar_start = self.dev.event()
        self.dev.record(ar_start, self.comm)
        self.watchdog.watch(step, ar_start)
        if not skip:
            for n in self.buckets:
                self.pg.all_reduce(n, 9, self.comm)  # bfloat16
        self.pg.all_reduce(1, 7, self.comm)  # the loss, float32
        ar_end = self.dev.event()
        self.dev.record(ar_end, self.comm)
        self.watchdog.watch(step, ar_end)
        self.dev.wait_event(self.compute, ar_end)
        self.dev.destroy_event(bwd_end)


class SGD:
    def __init__(self, dev, stream, us):
        self.dev, self.stream, self.us = dev, stream, us
        # torch.compile's fused gradient zeroing, a Triton kernel; it spins
        # while hang_flag is set (zero_grad(hang=True))
        self.triton = TritonKernel(dev, "triton_poi_fused_add_0")
        self.hang_flag = ctypes.c_uint64(0)

    def zero_grad(self, hang=False):
        if hang:
            self.hang_flag.value = 1
        self.triton(self.us // 2, self.stream, SPIN_ON_FLAG, self.hang_flag)

    def step(self):
        self.dev.launch(self.dev.kernel("sgd_update_kernel"), self.us, self.stream)
        # the fused Adam moments, launched through the driver API like Triton
        self.dev.launch_driver(self.us // 2, self.stream)


# --------------------------------------------------------------------------
# host threads


def name_thread(name):
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


class Watchdog(threading.Thread):
    """Polls the start and end events of every step's all-reduces about every 100 ms, like ProcessGroupNCCL's watchdog."""

    def __init__(self, dev):
        super().__init__(name="pt_nccl_watchdg", daemon=True)
        self.dev = dev
        self.lock = threading.Lock()
        self.pending = []

    def watch(self, step, event):
        with self.lock:
            self.pending.append((step, event))

    def run(self):
        name_thread("pt_nccl_watchdg")
        while True:
            self.poll_once()
            time.sleep(0.1)

    def poll_once(self):
        with self.lock:
            pending = list(self.pending)
        done = [(s, e) for s, e in pending if self.dev.query(e) != NOT_READY]
        if done:
            with self.lock:
                self.pending = [p for p in self.pending if p not in done]
            for _, e in done:
                self.dev.destroy_event(e)


class BlockingSource:
    """A file read that never returns (a dead network file system)."""

    def __init__(self):
        self.r, self.w = os.pipe()

    def read(self):
        return os.read(self.r, 1)


class DataLoader(threading.Thread):
    def __init__(self, steps, stall_at=None):
        super().__init__(name="dataloader", daemon=True)
        self.q = queue.Queue(maxsize=2)
        self.steps, self.stall_at = steps, stall_at

    def run(self):
        name_thread("dataloader")
        for i in range(self.steps):
            self.q.put(self.load(i))

    def load(self, i):
        if i == self.stall_at:
            BlockingSource().read()
        time.sleep(0.001)
        return {"index": i, "tokens": 4096}

    def next(self):
        return self._next_data()

    # PyTorch's DataLoader iterator routines (_next_data -> _get_data ->
    # _try_get_data), by name; the queue is read without PyTorch's 5 s
    # timeout, as before
    def _next_data(self):
        return self._get_data()

    def _get_data(self):
        return self._try_get_data()

    def _try_get_data(self):
        return self.q.get()

    def close(self):
        pass


class LineReader:
    """Reads newline-ended records from a pipe, blocking in read(2)."""

    def __init__(self, fd):
        self.fd, self.buf = fd, b""

    def line(self):
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, 4096)
            if not chunk:
                raise EOFError("pipe %d closed" % self.fd)
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


class WorkerDataLoader:
    """PyTorch's DataLoader with num_workers > 0 and the fork start method:
    worker processes forked from the rank make the batches. Batch i is
    made by worker i % workers (an index sent down its index pipe, the
    batch written back down its data pipe, one line each); the rank keeps
    PREFETCH indices per worker in flight and reads the batches in order.
    stall_at blocks the rank itself before reading a batch, worker_stall_at
    the worker that makes that batch."""

    PREFETCH = 2  # PyTorch's prefetch_factor

    def __init__(self, steps, workers, stall_at=None, worker_stall_at=None):
        self.steps, self.n = steps, workers
        self.stall_at, self.worker_stall_at = stall_at, worker_stall_at
        self.pids, self.index_fds, self.data = [], [], []
        self.sent = self.got = 0

    def start(self):
        for w in range(self.n):
            index_r, index_w = os.pipe()
            data_r, data_w = os.pipe()
            with warnings.catch_warnings():
                # 3.12+ warns that forking a threaded process may deadlock
                # the child; PyTorch does it all the same, and so do we.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    # No pipe end of another worker stays open here, or
                    # that worker would never see its index pipe close.
                    for fd in self.index_fds + [d.fd for d in self.data] + [index_w, data_r]:
                        os.close(fd)
                    worker_main(w, index_r, data_w, self.worker_stall_at)
                    code = 0
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(code)  # never the rank's atexit handlers nor its libraries' teardown
            os.close(index_r)
            os.close(data_w)
            self.pids.append(pid)
            self.index_fds.append(index_w)
            self.data.append(LineReader(data_r))
        while self.sent < min(self.steps, self.PREFETCH * self.n):
            self.send()

    def send(self):
        os.write(self.index_fds[self.sent % self.n], b"%d\n" % self.sent)
        self.sent += 1

    def next(self):
        batch = self._next_data()
        self.got += 1
        if self.sent < self.steps:
            self.send()
        return batch

    # PyTorch's DataLoader iterator routines
    def _next_data(self):
        return self._get_data()

    def _get_data(self):
        i = self.got
        if i == self.stall_at:
            BlockingSource().read()
        return self._try_get_data(i)

    def _try_get_data(self, i):
        batch = json.loads(self.data[i % self.n].line())
        if batch["index"] != i:
            raise RuntimeError("worker %d sent batch %d, want %d" % (i % self.n, batch["index"], i))
        return batch

    def close(self):
        """Closes the index pipes (each worker then exits) and reaps the workers."""
        for fd in self.index_fds:
            os.close(fd)
        self.index_fds = []
        for pid in self.pids:
            os.waitpid(pid, 0)
        self.pids = []


def worker_main(w, index_fd, data_fd, stall_at):
    """One data loader worker process: reads batch indices, writes batches,
    until its index pipe closes."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive the rank
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        return
    name_thread("pt_data_worker")
    indices = LineReader(index_fd)
    while True:
        try:
            i = int(indices.line())
        except EOFError:
            return
        if i == stall_at:
            BlockingSource().read()
        time.sleep(0.001)
        os.write(data_fd, (json.dumps({"index": i, "tokens": 4096, "worker": w}) + "\n").encode())


def deadlock_forever():
    """Two threads take two locks in opposite order: both wait forever."""
    grad_lock, ckpt_lock = threading.Lock(), threading.Lock()
    a_holds, b_holds = threading.Event(), threading.Event()

    def checkpoint_writer():
        name_thread("ckpt_writer")
        with ckpt_lock:
            b_holds.set()
            a_holds.wait()
            with grad_lock:
                pass

    t = threading.Thread(target=checkpoint_writer, name="ckpt_writer", daemon=True)
    t.start()
    with grad_lock:
        a_holds.set()
        b_holds.wait()
        with ckpt_lock:
            pass


def straggle_forever():
    while True:
        time.sleep(1)


class _ZipFileWriter:
    """torch.save's PyTorchFileWriter, throttled: records of 1 MiB written
    into a file that wraps at 64 MiB (a checkpoint larger than the disk
    needs), one every 50 ms (a slow file system), until a deadline."""

    RECORD, WRAP, PACE = 1 << 20, 64, 0.05

    def __init__(self, path, seconds):
        self.path, self.deadline = path, time.monotonic() + seconds
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.buf, self.n = b"\0" * self.RECORD, 0

    def write_record(self, name):
        os.pwrite(self.fd, self.buf, (self.n % self.WRAP) * self.RECORD)
        self.n += 1
        time.sleep(self.PACE)
        return time.monotonic() < self.deadline

    def close(self):
        os.close(self.fd)
        os.unlink(self.path)


def _open_zipfile_writer(path, seconds):
    return _ZipFileWriter(path, seconds)


def _save(state, zip_file):
    """torch/serialization.py's _save: one record per tensor."""
    i = 0
    while zip_file.write_record("data/%d" % i):
        i += 1
    return i


def save(state, path, seconds):
    """torch.save's shape: open the writer, _save into it."""
    writer = _open_zipfile_writer(path, seconds)
    try:
        return _save(state, writer)
    finally:
        writer.close()


def save_checkpoint(rank, seconds):
    """What a training script calls every so many steps."""
    path = os.path.join(os.environ.get("XPU_FAKEGPU_CKPT_DIR", os.environ["XPU_FAKEGPU_STORE"]), "ckpt-rank%d.pt" % rank)
    records = save({"model": "state"}, path, seconds)
    say("xpu-fakegpu rank=%d checkpoint records=%d done" % (rank, records))


class Trainer:
    def __init__(self, args, rank, world):
        self.args, self.rank, self.world = args, rank, world
        self.fault = args.fault if args.fault and args.fault_rank == rank else None
        if self.fault == "nccl-stall":
            os.environ["XPU_FAKEGPU_NCCL_STALL"] = str(args.fault_step * COLLECTIVES_PER_STEP)
        self.dev = Device(args.lib_dir, args.vendor)
        time.sleep(args.init_delay)
        # Compute runs on the legacy default stream, as PyTorch's current
        # stream does unless the script changes it; NCCL gets its own.
        self.compute = None
        self.pg = ProcessGroup(self.dev, rank, world, os.environ["XPU_FAKEGPU_STORE"])
        step_us = int(args.step_ms * 1000 * (args.slow_factor if rank == args.slow_rank else 1.0))
        self.model = Model(self.dev, self.compute, args.layers, step_us)
        self.watchdog = Watchdog(self.dev)
        self.ddp = DistributedDataParallel(self.model, self.pg, self.dev, self.compute, self.watchdog)
        self.opt = SGD(self.dev, self.compute, max(1, step_us // 20))
        stall = args.fault_step if self.fault == "dataloader" else None
        if args.workers > 0:
            worker_stall = args.fault_step if self.fault == "dataloader-worker" else None
            self.loader = WorkerDataLoader(args.steps, args.workers, stall, worker_stall)
        else:
            self.loader = DataLoader(args.steps, stall)
        self.host_loss = ctypes.c_float()
        self.graph = None
        if args.fault == "graph-hang":
            # the loss as a captured CUDA graph, replayed each step; its
            # kernel spins while graph_flag is set
            self.graph_flag = ctypes.c_uint64(0)
            side = self.dev.stream()
            loss = self.dev.kernel("cross_entropy_fwd_kernel")
            self.graph = self.dev.capture(side, lambda: self.dev.launch(
                loss, self.model.per_layer // 2, side, SPIN_ON_FLAG, flag_word=self.graph_flag))
            self.dev.synchronize()
        self.noop = self.dev.kernel("noop_kernel")
        # a block the caching allocator holds, freed by free-sync's empty_cache()
        self.cached = self.dev.malloc(1 << 20)

    def fault_here(self, step, kind):
        return self.fault == kind and step == self.args.fault_step

    def blocked_call(self, step):
        """queue-full, launch-blocking, free-sync: spin_kernel never ends,
        then the main thread blocks in a call that is no wait. With
        XPU_FAKEGPU_FAULT_GATE=FILE the fault waits, from step K on, for
        FILE to exist (a monitor attached to the running job meanwhile)."""
        if self.fault not in ("queue-full", "launch-blocking", "free-sync") or step < self.args.fault_step:
            return
        gate = os.environ.get("XPU_FAKEGPU_FAULT_GATE")
        if gate and not os.path.exists(gate):
            return
        # launched first here: its name is looked up now (a real
        # torch.cuda._sleep's kernel is looked up at its first launch too)
        self.dev.sleep_kernel(self.compute, KERNEL_HANG)  # blocks under CUDA_LAUNCH_BLOCKING
        if self.fault == "free-sync":
            self.dev.free(self.cached)
        launch, kernel, stream = self.dev._launch, self.noop, self.compute
        vals, args = self.dev.params(0)
        grid, block = Dim3(1, 1, 1), Dim3(16, 1, 1)
        while True:  # an asynchronous loop: no synchronize, nothing logged
            launch(kernel, grid, block, args, 0, stream)

    def busy(self, step):
        """--busy: a long call that ends, S seconds, at this step."""
        a = self.args
        if not a.busy or not a.busy_step <= step < a.busy_step + a.busy_steps:
            return
        us = int(a.busy_s * 1e6)
        if a.busy == "jit":
            self.dev.synchronize()  # no GPU work outstanding
            self.dev.jit(a.busy_s)
        elif a.busy == "slow-kernel":
            self.dev.launch(self.dev.kernel("gemm_bf16_kernel"), us, self.compute)  # returns when it ends
        elif a.busy == "burst":
            self.dev.launch(self.dev.kernel("gemm_bf16_kernel"), us, self.compute)
            vals, args = self.dev.params(0)
            grid, block = Dim3(1, 1, 1), Dim3(16, 1, 1)
            for _ in range(int(os.environ.get("XPU_FAKEGPU_QUEUE_DEPTH", "1024")) + 64):
                self.dev._launch(self.noop, grid, block, args, 0, self.compute)
        say("xpu-fakegpu rank=%d step=%d busy %s %.1fs" % (self.rank, step, a.busy, a.busy_s))

    def train(self):
        gate = os.environ.get("XPU_FAKEGPU_START_GATE")
        while gate and not os.path.exists(gate):
            time.sleep(0.01)
        if self.args.launch_bound:
            return self.launch_bound()
        self.watchdog.start()
        self.loader.start()
        for step in range(self.args.steps):
            self.train_step(step)
            say("xpu-fakegpu rank=%d step=%d done" % (self.rank, step))
        self.dev.fn("DeviceSynchronize", [])()
        self.loader.close()
        self.pg.destroy()

    def train_step(self, step):
        batch = self.loader.next()
        self.blocked_call(step)
        self.busy(step)
        # the step's first launch, after the last step's loss was read
        self.opt.zero_grad(hang=self.fault_here(step, "triton-hang"))
        if self.fault_here(step, "kernel-hang"):
            self.model.blocks[0].attn.hang_next_backward = True
        loss = self.model.forward(batch)
        if self.graph is not None:
            if self.fault_here(step, "graph-hang"):
                self.graph_flag.value = 1
            self.dev.replay(self.graph, self.compute)
            self.dev.synchronize()
        self.model.backward(loss)
        if self.fault_here(step, "python-sleep"):
            straggle_forever()
        if self.fault_here(step, "checkpoint"):
            save_checkpoint(self.rank, self.args.checkpoint_seconds)
        if self.fault_here(step, "deadlock"):
            deadlock_forever()
        self.ddp.reduce_gradients(step, skip=self.fault_here(step, "skip-collective"))
        self.opt.step()
        return self.read_loss()

    def launch_bound(self):
        """Trivial launches as fast as Python makes them, one synchronize per step."""
        vals, args = self.dev.params(0)
        grid, block = Dim3(1, 1, 1), Dim3(16, 1, 1)
        launch, kernel, stream = self.dev._launch, self.noop, self.compute
        n, start = 0, time.monotonic()
        for step in range(self.args.steps):
            for _ in range(self.args.launch_bound):
                if launch(kernel, grid, block, args, 0, stream):
                    raise CudaError("LaunchKernel failed")
            n += self.args.launch_bound
            self.dev.synchronize()
            say("xpu-fakegpu rank=%d step=%d done" % (self.rank, step))
        s = time.monotonic() - start
        say("xpu-fakegpu rank=%d launches=%d seconds=%.3f launches_per_second=%.0f" % (self.rank, n, s, n / s))
        self.pg.destroy()

    def read_loss(self):
        self.dev.memcpy_d2h(ctypes.byref(self.host_loss), self.model.loss_buf, 4)
        return self.host_loss.value


def say(line):
    """One write per line, so that ranks sharing the pipe never interleave."""
    os.write(1, (line + "\n").encode())


def identity():
    """Rank and world size: torchrun's variables, else Open MPI's (mpirun
    starts the ranks itself and sets no RANK)."""
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    if "OMPI_COMM_WORLD_RANK" in env:
        return int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"])
    return 0, 1  # --lone: a process on its own


def rank_main(args):
    rank, world = identity()
    # SIGTERM keeps its default action: a rank blocked inside the GPU
    # library never returns to Python, so a Python handler would never run.
    if args.queue_depth > 0:
        os.environ["XPU_FAKEGPU_QUEUE_DEPTH"] = str(args.queue_depth)
    if args.fault == "launch-blocking" or args.busy == "slow-kernel":
        # what people set to debug a hang: every launch waits for its kernel
        os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    say("xpu-fakegpu rank=%d pid=%d started" % (rank, os.getpid()))
    Trainer(args, rank, world).train()
    return 0


def main():
    args = parse_args()
    if os.environ.get("XPU_FAKEGPU_ROLE") == "rank":
        return rank_main(args)
    if args.lone:
        if "XPU_FAKEGPU_STORE" not in os.environ:
            os.environ["XPU_FAKEGPU_STORE"] = tempfile.mkdtemp(prefix="xpufake-store-")
        return rank_main(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
