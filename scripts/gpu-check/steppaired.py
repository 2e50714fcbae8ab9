#!/usr/bin/env python3
"""What a training step pays for our probes, measured in one process
(issue 40): gpu-check's train-step row and make bench's testbed twin
(cmd/internal/e2e BenchmarkTrainStep) run this.

One workload runs throughout, printing its steps in blocks ("block
start=NS end=NS ns=NS_PER_STEP steps=N", CLOCK_REALTIME; workloads.py
train-*, the testbed's trainstep), and the ways are switched on and off
around it, ROUNDS rounds of DWELL seconds each, their order rotating:

  plain     nothing attached
  anchor    an empty uprobe on each of the driver's launch entry points
            the step uses (--launch, default cuLaunchKernel,
            cuLaunchKernelEx and their _ptsz twins), at the site our
            probes take
            (ebpf.ProbeSite): one trap a launch, what any uprobe pays
  anchor0   the same at the functions' entries (not with --no-anchor0)
  anchorall the anchor and an empty uprobe (and uretprobe, SYM:ret) on
            each other call our probes take in the step (--other): every
            trap ours takes, without our programs, our reader or our
            stall watch
  ours      xpu-timer watch --pid (our probes, reader and stall watch,
            attached late, as a user attaches to a running job), SETTLE
            seconds (default 3: past the kernel lookups' 2 s window, so
            that their probes have gone) after libcuda's probes are in
  VARIANT   ours with settings in its environment (--variant
            NAME:XPU_TIMER_X=V,...: the parts a user may turn off)

The empty uprobes and the BPF statistics come from gpucheck-probe; its
SIGUSR1 snapshots at a window's start and end give what every program
ran inside the window alone (runs and ns), per step. A way's value in a
round is the median of the blocks wholly inside its window; differences
(ours - anchor, ours - plain) are taken within a round and their median
over the rounds is the figure. For ours it also reads, over each window,
the watch process's CPU (its threads' schedstat), and its debug log for
stack samples (a sample stops the job's threads): a stop inside a window
would be a cost the launcher does not pay in steady state.

Usage: steppaired.py [--rounds N] [--dwell S] [--settle S] [--tag T]
  [--launch SYM]... [--other SYM[:ret]]... [--variant NAME:VAR=V[,VAR=V]]...
  [--check launch|flat] [--no-anchor0] [--metric wall|cpu]
  OUTDIR PROBE XPU CUDA -- WORKLOAD...

--metric says what a step costs: wall (the default), the wall-clock time
of a block's steps; cpu, the CPU time of the thread that makes the calls
(the block's "cpu=" field: what the traps and our programs cost that
thread, whatever else the machine runs; the watch's own CPU is read
apart). The figures of the other metric, where the workload gives it,
come beside, as alt_*.

--check launch (the default): ok when ours is at most 150 ns a launch over
the anchor and our launch programs run at most 1.05 times a launch; flat:
ok when ours is slower than plain by no more than plain's own spread over
the rounds (a GPU-bound or graph-replayed step). Either needs no event
lost, no error and no stop inside a window. Prints the table, writes it
to OUTDIR/steppaired-TAG.txt, and ends with one line

  step tag=T key=value ... ok=0|1

(and a "step-variant tag=T name=NAME ..." line per variant before it).
"""
import argparse
import datetime
import os
import re
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired import children, end, rotated, stop, wait_line, watch_lost  # noqa: E402

BLOCK_RE = re.compile(r"^block start=(\d+) end=(\d+) ns=([0-9.]+)(?: steps=(\d+))?(?: cpu=([0-9.]+))?")
SNAP_RE = re.compile(r"^gpucheck-snap (\d+) time=(\d+)$")
STAT_RE = re.compile(r"^gpucheck-bpf snap=(\d+) owner=(\S+) prog=(\S+) target=(\S+) runs=(\d+) run_ns=(\d+)$")
MIX_RE = re.compile(r"^mix (.*)$")
SAMPLE_RE = re.compile(r'^time=(\S+) level=DEBUG msg="(?:first )?stack sample')
TARGET_NS = 150  # ours over the anchor, a launch
RUNS_TARGET = 1.05  # our launch programs' runs a launch
# Programs of the launch path: launches and the lookups that name kernels.
LAUNCH_PROGS = ("cu_launch_kernel", "cu_launch_kernel_ex", "launch_kernel", "launch_kernel_exc", "launch_host_func",
                "graph_launch", "get_function_enter", "get_function_exit", "kernel_get_function_enter",
                "kernel_get_function_exit")
# Programs that are not on a probed call (process records, the loader).
PROCESS_PROGS = ("on_fork", "on_exec", "on_exit", "dl_state")


def prog_name(p):
    """A program's name without its id (cu_launch_kernel#42), its target
    kept for ours' empty twins (empty_0@cuLaunchKernel+10(site))."""
    return re.sub(r"#\d+", "", p)


def schedstat_ns(pid):
    """The CPU time of pid's threads, ns (0 once it is gone)."""
    total = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    for t in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def log_time(s):
    """A slog time (RFC 3339, milliseconds) in ns."""
    return int(datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1e9)


class Window:
    def __init__(self, r, way):
        self.round, self.way = r, way
        self.start = self.end = 0
        self.bpf = {}  # prog -> (runs, ns) inside the window
        self.cpu_ns = None  # the watch process's CPU inside the window
        self.stops = 0  # stack samples of the job inside the window
        self.value = {}  # metric -> median ns a step of the blocks inside
        self.steps = 0.0  # steps inside (blocks cut at the window's edges)


class StepPaired:
    def __init__(self, a):
        self.a = a
        self.ways = ["plain", "anchor"] + ([] if a.no_anchor0 else ["anchor0"]) + (["anchorall"] if a.other else []) + \
            ["ours"] + [v.split(":", 1)[0] for v in a.variant]
        self.variants = dict(v.split(":", 1) for v in a.variant)
        self.windows = []
        self.errors = []
        self.lost = 0
        self.mix = {}

    def log(self, way, r):
        return os.path.join(self.a.out, "%s.%s.%d.log" % (self.a.tag, way, r))

    def targets(self, syms, site):
        out = []
        for s in syms:
            sym, _, ret = s.partition(":")
            out += ["-uprobe", "%s:%s+%s" % (self.a.cuda, sym, site)]
            if ret == "ret":
                out += ["-uretprobe", "%s:%s" % (self.a.cuda, sym)]
        return out

    def snap(self, p, log, n):
        """Asks the probe for snapshot n; returns its time and statistics."""
        p.send_signal(signal.SIGUSR1)
        end = time.time() + 15
        while time.time() < end:
            t, stats = None, {}
            with open(log, errors="replace") as f:
                for line in f:
                    m = SNAP_RE.match(line.strip())
                    if m and int(m.group(1)) == n:
                        t = int(m.group(2))
                        continue
                    m = STAT_RE.match(line.strip())
                    if m and int(m.group(1)) == n:
                        key = prog_name(m.group(3)) if m.group(2) == "command" else m.group(3) + "@" + m.group(4)
                        r0, n0 = stats.get(key, (0, 0))
                        stats[key] = (r0 + int(m.group(5)), n0 + int(m.group(6)))
            if t is not None and stats:
                return t, stats
            if p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("no snapshot %d in %s" % (n, log))

    def window(self, r, way):
        w = Window(r, way)
        log = self.log(way, r)
        if way == "plain":
            w.start = time.time_ns()
            time.sleep(self.a.dwell)
            w.end = time.time_ns()
            return w
        env = dict(os.environ)
        if way.startswith("anchor"):
            args = [self.a.probe] + self.targets(self.a.launch, "0" if way == "anchor0" else "site")
            if way == "anchorall":
                args += self.targets(self.a.other, "site")
            args += ["--", "sh", "-c", "echo attached; exec sleep 100000"]
            ready = r"^attached$"
        else:
            args = [self.a.probe, "--", self.a.xpu, "watch", "--timeout", "300s", "--pid", str(self.job.pid)]
            env["XPU_TIMER_LOG_LEVEL"] = "debug"
            for kv in self.variants.get(way, "").split(","):
                if kv:
                    k, _, v = kv.partition("=")
                    env[k] = v
            ready = r'"event":"attach".*libcuda\.so'
        with open(log, "w") as f:
            p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            if wait_line(log, ready, 60, p) is None:
                self.errors.append("%s round %d: not attached (%s)" % (way, r + 1, log))
                return None
            if way not in ("plain",) and not way.startswith("anchor"):
                time.sleep(self.a.settle)  # its start-up settles (attach, first sample)
            watch = (children(p.pid) or [0])[0]
            t0, s0 = self.snap(p, log, 1)
            c0 = schedstat_ns(watch) if watch else 0
            time.sleep(self.a.dwell)
            c1 = schedstat_ns(watch) if watch else 0
            t1, s1 = self.snap(p, log, 2)
        except RuntimeError as e:
            self.errors.append("%s round %d: %s" % (way, r + 1, e))
            return None
        finally:
            stop(p)
        w.start, w.end = t0, t1
        for k, (runs, ns) in s1.items():
            r0, n0 = s0.get(k, (0, 0))
            if runs > r0:
                w.bpf[k] = (runs - r0, ns - n0)
        if not way.startswith("anchor"):
            w.cpu_ns = c1 - c0
            with open(log, errors="replace") as f:
                for line in f:
                    m = SAMPLE_RE.match(line)
                    if m and w.start <= log_time(m.group(1)) <= w.end:
                        w.stops += 1
            self.lost += watch_lost(log)  # each window is a watch of its own
        return w

    def run(self):
        jlog = os.path.join(self.a.out, "%s.workload.log" % self.a.tag)
        env = dict(os.environ, STOP_FILE=os.path.join(self.a.out, "%s.stop" % self.a.tag))
        with open(jlog, "w") as f:
            self.job = subprocess.Popen(self.a.workload, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            if wait_line(jlog, r"^warm$", 300, self.job) is None:
                self.errors.append("the workload never warmed up (%s)" % jlog)
                return
            for r in range(self.a.rounds):
                for way in rotated(self.ways, r):
                    if self.job.poll() is not None:
                        self.errors.append("the workload ended (%s)" % jlog)
                        return
                    w = self.window(r, way)
                    if w:
                        self.windows.append(w)
        finally:
            end(self.job, env["STOP_FILE"], 60)
            self.blocks = []
            with open(jlog, errors="replace") as f:
                for line in f:
                    m = BLOCK_RE.match(line.strip())
                    if m:
                        self.blocks.append((int(m.group(1)), int(m.group(2)), float(m.group(3)), int(m.group(4) or 1),
                                            float(m.group(5)) if m.group(5) else None))
                    m = MIX_RE.match(line.strip())
                    if m:
                        self.mix = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
        for w in self.windows:
            inside = [(ns, cpu) for (s, e, ns, n, cpu) in self.blocks if s >= w.start and e <= w.end]
            if inside:
                w.value["wall"] = statistics.median(ns for ns, _ in inside)
            if inside and all(cpu is not None for _, cpu in inside):
                w.value["cpu"] = statistics.median(cpu for _, cpu in inside)
            for s, e, ns, n, _ in self.blocks:
                over = min(e, w.end) - max(s, w.start)
                if over > 0 and e > s:
                    w.steps += n * over / (e - s)

    # ---- the figures ----

    def values(self, way, metric=None):
        metric = metric or self.a.metric
        return {w.round: w.value[metric] for w in self.windows if w.way == way and metric in w.value}

    def over(self, way, base, metric=None):
        a, b = self.values(way, metric), self.values(base, metric)
        d = [a[r] - b[r] for r in a if r in b]
        return statistics.median(d) if d else None

    def per_step(self, way):
        """{prog: (runs a step, ns a run)} over way's windows."""
        acc, steps = {}, sum(w.steps for w in self.windows if w.way == way)
        for w in self.windows:
            if w.way != way:
                continue
            for k, (runs, ns) in w.bpf.items():
                r0, n0 = acc.get(k, (0, 0))
                acc[k] = (r0 + runs, n0 + ns)
        if not steps:
            return {}
        return {k: (runs / steps, ns / runs) for k, (runs, ns) in acc.items() if runs}

    def launches(self):
        """Launches a step: the anchor's runs (one a launch), else the mix."""
        st = self.per_step("anchor")
        n = sum(r for k, (r, _) in st.items() if k.startswith("empty_"))
        if n > 0:
            return n
        return float(self.mix.get("launches", 0)) or None

    def report(self):
        a = self.a
        lines = []
        rounds = a.rounds
        lines.append("%s: %s" % (a.tag, " ".join(a.workload)))
        if self.mix:
            lines.append("mix per step: " + " ".join("%s=%s" % kv for kv in self.mix.items()))
        fmt = lambda v, sign=False: "-" if v is None else (("%+.1f" if sign else "%.1f") % (v / 1e3))
        other = "wall" if a.metric == "cpu" else "cpu"
        for metric in (a.metric, other):
            if metric != a.metric and not any(self.values(w, metric) for w in self.ways):
                continue
            lines.append("us a step, %s:" % ("the wall clock" if metric == "wall" else
                                             "CPU time of the thread that makes the calls"))
            lines.append("%-9s" % "" + "".join("%9s" % ("r%d" % (r + 1)) for r in range(rounds)) +
                         "%10s %11s %12s" % ("median", "over plain", "over anchor"))
            for way in self.ways:
                vals = self.values(way, metric)
                row = [vals.get(r) for r in range(rounds)]
                med = statistics.median(list(vals.values())) if vals else None
                lines.append("%-9s" % way + "".join("%9s" % fmt(v) for v in row) + "%10s %11s %12s" % (
                    fmt(med), fmt(self.over(way, "plain", metric), True), fmt(self.over(way, "anchor", metric), True)))
        launches = self.launches()
        lines.append("(medians of differences within a round; launches a step %s; windows: %s)" % (
            "-" if launches is None else "%.1f" % launches,
            ", ".join("%s %d" % (w, len(self.values(w))) for w in self.ways)))
        lines.append("")
        lines.append("BPF programs per step, inside the windows (the kernel's run_cnt and run_time_ns):")
        ours_runs = launch_runs = 0.0
        ours_ns = anchor_ns = anchor_runs = 0.0
        for way in self.ways[1:]:
            for prog, (runs, ns) in sorted(self.per_step(way).items()):
                base = prog.split("@")[0]
                if base in PROCESS_PROGS:
                    continue
                lines.append("  %-9s %-40s runs %8.1f  ns/run %6.0f" % (way, prog, runs, ns))
                if way == "ours":
                    ours_runs += runs
                    ours_ns += runs * ns
                    if base in LAUNCH_PROGS:
                        launch_runs += runs
                if way == "anchor":
                    anchor_runs += runs
                    anchor_ns += runs * ns
        cpu = [(w.cpu_ns, w.end - w.start, w.steps) for w in self.windows if w.way == "ours" and w.cpu_ns is not None]
        cpu_pct = 100 * sum(c for c, _, _ in cpu) / sum(d for _, d, _ in cpu) if cpu else None
        cpu_step = sum(c for c, _, _ in cpu) / sum(s for _, _, s in cpu) if cpu and sum(s for _, _, s in cpu) else None
        stops = sum(w.stops for w in self.windows if w.way not in ("plain",) and not w.way.startswith("anchor"))
        lines.append("the watch process's CPU inside ours' windows: %s of a core, %s us a step" % (
            "-" if cpu_pct is None else "%.2f%%" % cpu_pct, "-" if cpu_step is None else "%.1f" % (cpu_step / 1e3)))
        lines.append("stack samples (stops of the job) inside ours' windows: %d" % stops)
        lines.append("events lost (ours): %d" % self.lost)
        oa, op, ap = self.over("ours", "anchor"), self.over("ours", "plain"), self.over("anchor", "plain")
        per_launch = oa / launches if oa is not None and launches else None
        runs_pl = ours_runs / launches if launches else None
        launch_pl = launch_runs / launches if launches else None
        # What ours over the anchor is made of: its traps beyond the
        # anchor's, each at the anchor's cost of a trap, and its programs'
        # time beyond the empty ones'; the rest is the reader, the stall
        # watch and whatever else.
        if ap is not None and anchor_runs and oa is not None:
            trap = ap / anchor_runs
            traps = (ours_runs - anchor_runs) * trap
            progs = ours_ns - anchor_ns
            lines.append("ours over the anchor, a step: %+.1f us = %.1f extra traps x %.0f ns (the anchor's, a trap) "
                         "%+.1f us + our programs over the empty ones %+.1f us + the rest %+.1f us" % (
                             oa / 1e3, ours_runs - anchor_runs, trap, traps / 1e3, progs / 1e3,
                             (oa - traps - progs) / 1e3))
        oall = self.over("ours", "anchorall")
        if oall is not None:
            lines.append("ours over the anchor with every trap ours takes (anchorall), a step: %+.1f us" % (oall / 1e3))
        spread = None
        pv = list(self.values("plain").values())
        if pv:
            spread = max(pv) - min(pv)
        for e in self.errors:
            lines.append("error: " + e)
        for name in self.variants:
            d = self.over(name, "ours")
            lines.append("step-variant tag=%s name=%s settings=%s over_ours_us=%s over_plain_us=%s" % (
                a.tag, name, self.variants[name], "-" if d is None else "%.1f" % (d / 1e3),
                "-" if self.over(name, "plain") is None else "%.1f" % (self.over(name, "plain") / 1e3)))
        clean = self.lost == 0 and not self.errors and stops == 0
        if a.check == "flat":
            # ours no slower than plain by more than plain's own spread
            # (faster is the noise of the rounds, not a cost)
            ok = op is not None and spread is not None and op <= spread and clean
        else:
            ok = per_launch is not None and per_launch <= TARGET_NS and launch_pl is not None and \
                launch_pl <= RUNS_TARGET and clean
        kv = [("tag", a.tag), ("launches", launches), ("plain_us", statistics.median(pv) / 1e3 if pv else None),
              ("spread_us", spread / 1e3 if spread is not None else None),
              ("anchor_over_plain_us", ap / 1e3 if ap is not None else None),
              ("ours_over_anchor_us", oa / 1e3 if oa is not None else None),
              ("ours_over_anchor_ns_per_launch", per_launch), ("ours_over_plain_us", op / 1e3 if op is not None else None),
              ("ours_over_anchorall_us", oall / 1e3 if oall is not None else None),
              ("runs_per_launch", runs_pl), ("launch_runs_per_launch", launch_pl),
              ("bpf_ns_per_step", ours_ns), ("reader_cpu_pct", cpu_pct),
              ("reader_cpu_us_per_step", cpu_step / 1e3 if cpu_step is not None else None),
              ("stops", stops), ("lost", self.lost), ("errors", len(self.errors))]
        alt = self.over("ours", "anchor", other)
        if alt is not None:
            kv += [("alt_metric", other), ("alt_ours_over_anchor_ns_per_launch", alt / launches if launches else None),
                   ("alt_anchor_over_plain_us", (self.over("anchor", "plain", other) or 0) / 1e3),
                   ("alt_ours_over_plain_us", (self.over("ours", "plain", other) or 0) / 1e3)]
        kv += [("metric", a.metric), ("ok", int(ok))]
        out = []
        for k, v in kv:
            if v is None:
                v = "-"
            elif isinstance(v, float):
                v = "%.3f" % v if abs(v) < 10 else "%.1f" % v
            out.append("%s=%s" % (k, v))
        lines.append("step " + " ".join(out))
        text = "\n".join(lines) + "\n"
        with open(os.path.join(a.out, "steppaired-%s.txt" % a.tag), "w") as f:
            f.write(text)
        sys.stdout.write(text)


def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    i = argv.index("--")
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--dwell", type=float, default=2.0)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--tag", default="step")
    p.add_argument("--launch", action="append", default=[])
    p.add_argument("--other", action="append", default=[])
    p.add_argument("--variant", action="append", default=[])
    p.add_argument("--check", choices=["launch", "flat"], default="launch")
    p.add_argument("--no-anchor0", action="store_true")
    p.add_argument("--metric", choices=["wall", "cpu"], default="wall")
    p.add_argument("out")
    p.add_argument("probe")
    p.add_argument("xpu")
    p.add_argument("cuda")
    a = p.parse_args(argv[:i])
    a.workload = argv[i + 1:]
    a.launch = a.launch or ["cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"]
    if not a.workload:
        sys.exit("steppaired.py: no workload after --")
    os.makedirs(a.out, exist_ok=True)
    s = StepPaired(a)
    s.run()
    s.report()


if __name__ == "__main__":
    main(sys.argv[1:])
