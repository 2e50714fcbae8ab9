#!/usr/bin/env python3
"""A real PyTorch training job (CPU, gloo) with faults, for tests.

    /usr/bin/python3 job.py --spawn N [options]   # starts N ranks itself
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node N --redirects 1 --tee 1 job.py [options]

Each rank wraps a tiny model in DistributedDataParallel on the gloo backend
and trains --steps steps of about --step-ms ms on batches from a DataLoader
with --workers worker processes (forked, persistent) over a synthetic
dataset, on one intra-op thread. Debian's python3-torch is for
/usr/bin/python3 (3.11). Identity comes from RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT (torchrun sets them; --spawn sets them for its direct
children, forwards SIGTERM/SIGINT to them and fails when a rank fails).

Steps are numbered from 0. Rank --fault-rank, when it reaches step
--fault-step, does instead of the step:
  sleep       sleeps in Python for ever: its peers hang in gloo's allreduce
  deadlock    two threads take two locks in opposite order; the main thread
              blocks on one of them
  busy        a Python busy loop for ever
  dataloader  one of its DataLoader workers blocks for ever in read(2) on the
              batch of step K, so the rank waits on its data
  exit        exits 1
  kill        SIGKILLs itself (its peers see the connections close and fail)
  vanish      SIGKILLs itself while a process it starts keeps its sockets open, as
              when a node is lost: its peers hang in gloo's allreduce (the
              holder ends with the rank's parent, or after --timeout). A
              launcher that watches its ranks (--spawn, torchrun) still
              stops the job: start the ranks yourself, under a parent that
              stays, to see the hang
With --fault-once FILE the fault happens only while FILE does not exist (the
faulty rank creates it when it faults); once it exists, the rank does
--fault-then instead (default: nothing). For torchrun --max-restarts tests:
--fault exit --fault-once F --fault-then sleep exits once, then hangs in the
second incarnation.
Progress on stdout: "xpu-torchjob rank=R pid=P started" once the process
group and the model are ready, "xpu-torchjob rank=R step=S done" after each
step, "xpu-torchjob rank=R finished" at the end.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time

FAULTS = ("sleep", "deadlock", "busy", "dataloader", "exit", "kill", "vanish")
KILL_GRACE_S = 3.0
BATCH = 8
FEATURES = 32


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spawn", type=int, default=0, metavar="N", help="start N ranks as direct children")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per rank")
    p.add_argument("--step-ms", type=float, default=50.0, help="wall time of one step")
    p.add_argument("--fault", choices=FAULTS)
    p.add_argument("--fault-rank", type=int, default=2)
    p.add_argument("--fault-step", type=int, default=5)
    p.add_argument("--fault-once", metavar="FILE", help="fault only while FILE is absent, and create it")
    p.add_argument("--fault-then", choices=FAULTS, help="with --fault-once: the fault once FILE exists")
    p.add_argument("--timeout", type=float, default=1800.0, help="gloo collective timeout in seconds")
    return p.parse_args(argv)


def say(rank, what):
    # One write per line: the ranks share the launcher's stdout, and
    # print's text and newline as two writes interleave with theirs.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), ("xpu-torchjob rank=%d %s\n" % (rank, what)).encode())


# --------------------------------------------------------------------------
# launcher (--spawn)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_argv(argv):
    """argv without --spawn N / --spawn=N."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--spawn":
            skip = True
        elif not a.startswith("--spawn="):
            out.append(a)
    return out


def spawn(args, argv):
    n = args.spawn
    port = free_port()
    procs = []
    kill_at = []

    def forward(signum, frame):
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
    for rank in range(n):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(n),
            LOCAL_WORLD_SIZE=str(n),
            GROUP_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + rank_argv(argv), env=env))
    failed = 0
    live = list(procs)
    while live:
        for p in list(live):
            rc = p.poll()
            if rc is None:
                continue
            live.remove(p)
            if rc != 0 and not failed:
                failed = rc if rc > 0 else 128 - rc
                sys.stderr.write("xpu-torchjob: rank pid %d exited with %d, stopping the job\n" % (p.pid, rc))
                forward(signal.SIGTERM, None)
        if kill_at and time.monotonic() > kill_at[0]:
            for p in live:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.05)
    return failed


# --------------------------------------------------------------------------
# faults: each a named function, so stacks say what happened


def stall_in_python_sleep():
    while True:
        time.sleep(3600)


def spin_forever():
    x = 0
    while True:
        x += 1


def take_two_locks(first, second):
    with first:
        time.sleep(0.2)
        with second:
            pass


def deadlock_two_locks():
    a, b = threading.Lock(), threading.Lock()
    t1 = threading.Thread(target=take_two_locks, args=(a, b), name="lock-ab", daemon=True)
    t2 = threading.Thread(target=take_two_locks, args=(b, a), name="lock-ba", daemon=True)
    t1.start()
    t2.start()
    time.sleep(0.5)
    with a:  # held by lock-ab for ever
        pass


def read_forever():
    # This worker would outlive its rank (it never returns to the DataLoader
    # loop that watches the parent): have the kernel end it with its parent.
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        os._exit(1)
    r, w = os.pipe()  # nobody ever writes
    return os.read(r, 1)


HOLDER = """
import os, sys, time
launcher, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    try:
        os.kill(launcher, 0)
    except ProcessLookupError:
        break
    time.sleep(1)
"""


def vanish(limit_s):
    # A process that holds every socket of the rank, silent, while the
    # launcher lives (at most limit_s), so that no peer sees them close.
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + name).startswith("socket:"):
                fds.append(int(name))
        except OSError:
            pass
    subprocess.Popen([sys.executable, "-c", HOLDER, str(os.getppid()), str(limit_s)], pass_fds=fds,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    os.kill(os.getpid(), signal.SIGKILL)


def mark_once(path):
    if path:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            pass


# --------------------------------------------------------------------------
# a rank


def train(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    fault = args.fault
    if args.fault_once and os.path.exists(args.fault_once):
        fault = args.fault_then
    faulty = fault is not None and rank == args.fault_rank

    class Synthetic(Dataset):
        """BATCH samples per step; sample i belongs to step i // BATCH."""

        def __len__(self):
            return args.steps * BATCH

        def __getitem__(self, i):
            if faulty and fault == "dataloader" and get_worker_info() is not None \
                    and i // BATCH == args.fault_step:
                mark_once(args.fault_once)
                read_forever()
            g = torch.Generator().manual_seed(rank * 100003 + i)
            x = torch.randn(FEATURES, generator=g)
            return x, x.sum().unsqueeze(0)

    class Trainer:
        def __init__(self):
            model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
            self.model = DistributedDataParallel(model)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)

        def step(self, x, y):
            self.opt.zero_grad()
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            loss.backward()  # DDP's gloo allreduce of the gradients
            self.opt.step()
            return loss.item()

    import datetime
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=args.timeout))
    trainer = Trainer()
    loader = DataLoader(Synthetic(), batch_size=BATCH, num_workers=args.workers,
                        persistent_workers=args.workers > 0, shuffle=False)
    say(rank, "pid=%d started" % os.getpid())
    for step, (x, y) in enumerate(loader):
        began = time.monotonic()
        if faulty and step == args.fault_step and fault != "dataloader":
            mark_once(args.fault_once)
            sys.stdout.flush()
            if fault == "sleep":
                stall_in_python_sleep()
            elif fault == "busy":
                spin_forever()
            elif fault == "deadlock":
                deadlock_two_locks()
            elif fault == "exit":
                os._exit(1)
            elif fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault == "vanish":
                vanish(args.timeout)
        trainer.step(x, y)
        say(rank, "step=%d done" % step)
        rest = args.step_ms / 1000.0 - (time.monotonic() - began)
        if rest > 0:
            time.sleep(rest)
    dist.barrier()
    say(rank, "finished")
    dist.destroy_process_group()
    return 0


def main(argv):
    args = parse_args(argv)
    if args.spawn:
        return spawn(args, argv)
    return train(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
