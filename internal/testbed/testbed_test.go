package testbed

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

var vendors = []string{"cuda", "maca"}

func TestRuntimeSemantics(t *testing.T) {
	b := Build(t)
	// spin, yield and blocking: the state of a thread waiting in a
	// synchronize (R while it spins, S while it sleeps) for each schedule;
	// envsched the one XPU_FAKEGPU_SCHED names. queue, launchblocking and
	// freesync: a launch past a full queue, a launch under
	// CUDA_LAUNCH_BLOCKING=1 and a free block, spinning, until the kernel
	// before them ends; jit: a module compiled from the fake's PTX keeps
	// the CPU busy as long as it says.
	cases := []string{"order", "event", "elapsed", "wait", "concurrent", "memcpy", "exc", "graph", "hostfn",
		"spin", "yield", "blocking", "envsched", "queue", "launchblocking", "freesync", "driver", "driverex", "jit"}
	caseEnv := map[string][]string{
		"envsched":       {"XPU_FAKEGPU_SCHED=blocking", "XPU_FAKEGPU_SCHED=spin"},
		"queue":          {QueueDepthEnv + "=8"},
		"launchblocking": {"CUDA_LAUNCH_BLOCKING=1"},
	}
	for _, v := range vendors {
		bin := b.Bin("tests/rttest")
		if v == "maca" {
			bin = b.Bin("tests/rttest_maca")
		}
		for _, c := range cases {
			if v == "maca" && (strings.HasPrefix(c, "driver") || c == "jit") {
				continue // the MACA driver is linked into its runtime, its names hidden
			}
			envs := []string{""}
			if e, ok := caseEnv[c]; ok {
				envs = e
			}
			for _, env := range envs {
				t.Run(v+"/"+c+"/"+env, func(t *testing.T) {
					cmd := exec.Command(bin, c)
					cmd.Env = append(os.Environ(), env)
					out, err := cmd.CombinedOutput()
					if err != nil || !strings.Contains(string(out), "ok "+c) {
						t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), c, err, out)
					}
				})
			}
		}
	}
}

// The CUDA runtime loads the driver itself, at its first call, as NVIDIA's
// does: a process that loads only libcudart.so.12 maps libcuda.so.1 after
// one runtime call, and not before.
func TestRuntimeLoadsDriver(t *testing.T) {
	b := Build(t)
	prog := `import ctypes, sys
rt = ctypes.CDLL(sys.argv[1])
def mapped():
    return any(l.rstrip().endswith("/libcuda.so.1") for l in open("/proc/self/maps"))
before = mapped()
n = ctypes.c_int()
rc = rt.cudaGetDeviceCount(ctypes.byref(n))
print("before=%s after=%s rc=%d" % (before, mapped(), rc))
`
	out, err := exec.Command("python3", "-c", prog, b.Lib("libcudart.so.12")).CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "before=False after=True rc=0" {
		t.Fatalf("got %q, want the driver mapped by the first runtime call only", got)
	}
}

func TestCollectivesAcrossProcesses(t *testing.T) {
	b := Build(t)
	for _, v := range vendors {
		t.Run(v, func(t *testing.T) {
			bin := b.Bin("tests/nccltest")
			prefix := ShmPrefix + "cu-"
			if v == "maca" {
				bin, prefix = b.Bin("tests/nccltest_maca"), ShmPrefix+"mc-"
			}
			id := "abcdef0123456789" + strings.Repeat("5a", 120) // unique to this test
			id = id[:256]
			var wg sync.WaitGroup
			errs := make([]error, 4)
			outs := make([][]byte, 4)
			for r := 0; r < 4; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					cmd := exec.Command(bin, fmt.Sprint(r), "4", id)
					done := make(chan struct{})
					go func() {
						outs[r], errs[r] = cmd.CombinedOutput()
						close(done)
					}()
					select {
					case <-done:
					case <-time.After(20 * time.Second):
						if cmd.Process != nil {
							cmd.Process.Kill()
						}
						<-done
						errs[r] = fmt.Errorf("rank %d hung", r)
					}
				}(r)
			}
			wg.Wait()
			for r := range errs {
				if errs[r] != nil || !strings.Contains(string(outs[r]), fmt.Sprintf("ok rank=%d", r)) {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
			}
			name := prefix + id[:32]
			if segs, _ := Segments(); contains(segs, name) {
				RemoveSegments([]string{name})
				t.Errorf("segment %s left after every rank destroyed the communicator", name)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestLaunchloop(t *testing.T) {
	b := Build(t)
	for _, v := range vendors {
		out, err := exec.Command(b.Bin("launchloop"), "20000", "--vendor", v).CombinedOutput()
		if err != nil {
			t.Fatalf("launchloop %s: %v\n%s", v, err, out)
		}
		if !regexp.MustCompile(`^launches=20000 seconds=[0-9.]+ ns_per_launch=[0-9.]+`).Match(out) {
			t.Fatalf("launchloop %s output: %s", v, out)
		}
		t.Logf("%s: %s", v, strings.TrimSpace(string(out)))
	}
}

func TestHealthyJob(t *testing.T) {
	b := Build(t)
	for _, v := range vendors {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			j := b.StartJob(t, JobOptions{NProc: 4, Steps: 30, Vendor: v})
			pids, err := j.RankPIDs(30 * time.Second)
			if err != nil {
				t.Fatalf("%v\n%s", err, j.Output())
			}
			for r, pid := range pids {
				if ppid := parentPID(t, pid); ppid != j.Cmd.Process.Pid {
					t.Errorf("rank %d (pid %d) has parent %d, want the launcher %d", r, pid, ppid, j.Cmd.Process.Pid)
				}
			}
			code, err := j.Wait(60 * time.Second)
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v\n%s", code, err, j.Output())
			}
			t.Logf("healthy 4-rank 30-step %s job took %v", v, time.Since(start).Round(time.Millisecond))
			for r := 0; r < 4; r++ {
				if s := j.LastStep(r); s != 29 {
					t.Errorf("rank %d last step %d, want 29", r, s)
				}
			}
			j.Stop()
			assertClean(t, j, pids)
		})
	}
}

func parentPID(t *testing.T, pid int) int {
	t.Helper()
	st, err := procfs.ReadStat(pid)
	if err != nil {
		t.Fatalf("read stat of %d: %v", pid, err)
	}
	return st.PPID
}

func assertClean(t *testing.T, j *Job, pids map[int]int) {
	t.Helper()
	for r, pid := range pids {
		if alive(pid) {
			t.Errorf("rank %d (pid %d) still alive after Stop", r, pid)
		}
	}
	segs, err := Segments()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range j.segments() {
		if contains(segs, s) {
			t.Errorf("segment %s left after Stop", s)
		}
	}
}

// TestWorkerProcesses: with --workers 2 every rank forks two data loader
// workers, like PyTorch's DataLoader: its children, with its RANK and its
// GPU libraries mapped, making no GPU call; the job trains to the end and
// leaves no worker behind.
func TestWorkerProcesses(t *testing.T) {
	b := Build(t)
	j := b.StartJob(t, JobOptions{NProc: 2, Steps: 400, Workers: 2, Args: []string{"--step-ms", "5"}})
	pids, err := j.RankPIDs(30 * time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, j.Output())
	}
	var workers []int
	for r, pid := range pids {
		if err := j.WaitStep(r, 2, 30*time.Second); err != nil {
			t.Fatalf("%v\n%s", err, j.Output())
		}
		kids, err := procfs.Children(pid)
		if err != nil {
			t.Fatal(err)
		}
		if len(kids) != 2 {
			t.Fatalf("rank %d (pid %d) has children %v, want its 2 workers", r, pid, kids)
		}
		for _, w := range kids {
			env, err := procfs.Environ(w)
			if err != nil {
				t.Fatal(err)
			}
			if env["RANK"] != fmt.Sprint(r) {
				t.Errorf("worker %d of rank %d has RANK=%q", w, r, env["RANK"])
			}
			maps, err := procfs.Maps(w)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(maps, func(m procfs.Mapping) bool { return strings.HasSuffix(m.Path, "/libcudart.so.12") }) {
				t.Errorf("worker %d of rank %d does not map libcudart.so.12", w, r)
			}
			if name, _ := procfs.ThreadName(w, w); name != "pt_data_worker" {
				t.Errorf("worker %d of rank %d is named %q", w, r, name)
			}
		}
		workers = append(workers, kids...)
	}
	code, err := j.Wait(120 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, j.Output())
	}
	for r := range pids {
		if s := j.LastStep(r); s != 399 {
			t.Errorf("rank %d last step %d, want 399", r, s)
		}
	}
	for _, w := range workers {
		if alive(w) {
			t.Errorf("worker %d alive after the job ended", w)
		}
	}
}

// Launch-bound mode: each rank makes steps x L trivial launches, one
// synchronize per step, and ends with its count and rate.
func TestLaunchBound(t *testing.T) {
	b := Build(t)
	const nproc, steps, perStep = 2, 3, 5000
	for _, v := range vendors {
		t.Run(v, func(t *testing.T) {
			j := b.StartJob(t, JobOptions{NProc: nproc, Steps: steps, Vendor: v, LaunchBound: perStep})
			if rc, err := j.Wait(120 * time.Second); err != nil || rc != 0 {
				t.Fatalf("job: status %d, %v\n%s", rc, err, j.Output())
			}
			rates := map[int]float64{}
			for _, l := range strings.Split(j.Output(), "\n") {
				if r, n, rate, ok := LaunchRate(l); ok {
					if n != steps*perStep || rate <= 0 {
						t.Errorf("rank %d: %d launches at %.0f/s, want %d at a rate", r, n, rate, steps*perStep)
					}
					rates[r] = rate
				}
			}
			for r := range nproc {
				if _, ok := rates[r]; !ok {
					t.Errorf("rank %d printed no launch rate", r)
				}
				if s := j.LastStep(r); s != steps-1 {
					t.Errorf("rank %d's last step %d, want %d", r, s, steps-1)
				}
			}
			t.Logf("%s launches per second by rank: %v", v, rates)
		})
	}
}

// TestTwoNodes: two launchers with --nnodes 2 and one store are one job
// of 2 x 2 ranks: the second node's ranks are 2 and 3 of a world of 4,
// the fake NCCL joins all four, and both nodes train to the end. With
// the checkpoint fault on rank 3 (the second node) for 2 s at step 2,
// every rank waits for it, and the job then goes on to the end.
func TestTwoNodes(t *testing.T) {
	b := Build(t)
	for _, fault := range []string{"", FaultCheckpoint} {
		t.Run("fault="+fault, func(t *testing.T) {
			start := time.Now()
			o := JobOptions{NProc: 2, Steps: 6, Args: []string{"--step-ms", "5", "--checkpoint-seconds", "2"}}
			if fault != "" {
				o.Fault, o.FaultRank, o.FaultStep = fault, 3, 2
			}
			nodes := b.StartNodes(t, o, 2)
			ids := map[string]bool{}
			for i, j := range nodes {
				pids, err := j.RankPIDs(30 * time.Second)
				if err != nil {
					t.Fatalf("node %d: %v\n%s", i, err, j.Output())
				}
				if want := []int{2 * i, 2*i + 1}; !slices.Equal(slices.Sorted(maps.Keys(pids)), want) {
					t.Errorf("node %d runs ranks %v, want %v", i, slices.Sorted(maps.Keys(pids)), want)
				}
				for _, pid := range pids {
					env, err := procfs.Environ(pid)
					if err != nil {
						t.Fatal(err)
					}
					if env["WORLD_SIZE"] != "4" || env["GROUP_RANK"] != fmt.Sprint(i) || env["LOCAL_WORLD_SIZE"] != "2" {
						t.Errorf("node %d: rank environment %v", i, env)
					}
					ids[env["TORCHELASTIC_RUN_ID"]+" "+env["MASTER_PORT"]] = true
				}
			}
			for i, j := range nodes {
				if code, err := j.Wait(60 * time.Second); err != nil || code != 0 {
					t.Fatalf("node %d: exit %d, %v\n%s", i, code, err, j.Output())
				}
			}
			took := time.Since(start)
			if len(ids) != 1 {
				t.Errorf("run ids and master ports %v: one job, want one of each", ids)
			}
			saved := strings.Contains(nodes[1].Output(), "xpu-fakegpu rank=3 checkpoint records=")
			if saved != (fault != "") || fault != "" && took < 2*time.Second {
				t.Errorf("checkpoint line %v after %v\n%s", saved, took, nodes[1].Output())
			}
			t.Logf("2 nodes x 2 ranks, 6 steps, fault %q: %v", fault, took.Round(time.Millisecond))
		})
	}
}

// onStream begins the Python programs of the device tests below (run as
// python3 -c PROG ROOT DIR): the testbed's device (run.Device) and a
// stream of its own, s.
const onStream = `import ctypes, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import run
dev = run.Device(sys.argv[2], "cuda")
s = dev.stream()
`

// With XPU_FAKEGPU_DOORBELL=lazy a launch wakes no thread of the fake
// device, as a GPU's wakes none of the host's: 2,000 launches from Python
// (each slower than the run of the one before, so that an executor woken
// by each sleeps between them) wake the stream's executor a handful of
// times, where the default doorbell wakes it at most launches; all of the
// work has run at the synchronize, and work nobody waits for runs within
// the executor's own tick.
func TestLazyDoorbell(t *testing.T) {
	b := Build(t)
	prog := onStream + `k = dev.kernel("noop_kernel")
query = dev.fn("StreamQuery", [ctypes.c_void_p])
sync = lambda: dev.check(dev.fn("StreamSynchronize", [ctypes.c_void_p])(s), "StreamSynchronize")
def wakes():
    n = 0
    for t in executors:
        for l in open("/proc/self/task/%s/status" % t):
            if l.startswith("voluntary_ctxt_switches"):
                n += int(l.split()[1])
    return n
dev.launch(k, 0, s)
sync()
executors = [t for t in os.listdir("/proc/self/task") if open("/proc/self/task/%s/comm" % t).read().startswith("gpu-stream")]
a, t0 = wakes(), time.monotonic()
for _ in range(2000):
    dev.launch(k, 0, s)
sync()
woke, ms = wakes() - a, (time.monotonic() - t0) * 1000
dev.launch(k, 0, s)
time.sleep(0.05)
print("wakes=%d ms=%d executors=%d unwaited_ran=%d" % (woke, ms, len(executors), query(s) == 0))
`
	// A lazy executor wakes for each LAZY_BATCH (256) launches, at the
	// synchronize, and on its own every 2 ms (LAZY_TICK_NS), each
	// executor: twice that is allowed, however slow the loop ran.
	wakes, allowed := map[string]int{}, 0
	for _, mode := range []string{"lazy", "eager"} {
		cmd := exec.Command("python3", "-c", prog, b.Root, b.Dir)
		cmd.Env = append(os.Environ(), "XPU_FAKEGPU_DOORBELL="+mode)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: python3: %v\n%s", mode, err, out)
		}
		var n, ms, execs, ran int
		if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "wakes=%d ms=%d executors=%d unwaited_ran=%d", &n, &ms, &execs, &ran); err != nil {
			t.Fatalf("%s: %q: %v", mode, out, err)
		}
		if ran != 1 {
			t.Errorf("%s: a launch nobody waited for had not run 50 ms later", mode)
		}
		wakes[mode] = n
		if mode == "lazy" {
			allowed = 2 * (2000/256 + 1 + execs*(ms/2+1))
		}
	}
	t.Logf("executor wakes for 2,000 launches: lazy %d (at most %d allowed), default %d", wakes["lazy"], allowed, wakes["eager"])
	if wakes["lazy"] > allowed {
		t.Errorf("lazy doorbell: %d executor wakes for 2,000 launches, want at most %d", wakes["lazy"], allowed)
	}
	if wakes["eager"] < 4*allowed {
		t.Errorf("default doorbell: %d executor wakes for 2,000 launches, not 4 times the lazy one's %d allowed: the test tells nothing apart",
			wakes["eager"], allowed)
	}
}

// A blocking synchronize sleeps until its stream is done and wakes once,
// as a GPU's completion interrupt wakes it (XPU_FAKEGPU_SCHED=blocking):
// behind 200 kernels of 100 us the calling thread goes to sleep a few
// times at most (the runtime's and the driver's locks on the way), where
// woken at every kernel that ended it slept and woke about 200 times; and
// an event synchronize waits for its own record alone, not for the work
// queued after it.
func TestBlockingSyncWakesOnce(t *testing.T) {
	b := Build(t)
	prog := onStream + `k = dev.kernel("gemm_bf16_kernel")
vp = ctypes.c_void_p
sync = lambda: dev.check(dev.fn("StreamSynchronize", [vp])(s), "StreamSynchronize")
def sleeps():
    for l in open("/proc/self/task/%d/status" % threading.get_native_id()):
        if l.startswith("voluntary_ctxt_switches"):
            return int(l.split()[1])
dev.launch(k, 0, s)
sync()
for _ in range(200):
    dev.launch(k, 100, s)
a = sleeps()
sync()
print("stream_sleeps=%d" % (sleeps() - a))
ev = vp()
dev.check(dev.fn("EventCreate", [vp])(ctypes.byref(ev)), "EventCreate")
dev.launch(k, 1000, s)
dev.check(dev.fn("EventRecord", [vp, vp])(ev, s), "EventRecord")
dev.launch(k, 500000, s)
t0 = time.monotonic()
dev.check(dev.fn("EventSynchronize", [vp])(ev), "EventSynchronize")
print("event_ms=%d" % ((time.monotonic() - t0) * 1000))
sync()
`
	cmd := exec.Command("python3", "-c", prog, b.Root, b.Dir)
	cmd.Env = append(os.Environ(), SchedEnv+"=blocking")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	var sleeps, eventMs int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "stream_sleeps=%d\nevent_ms=%d", &sleeps, &eventMs); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	t.Logf("a synchronize behind 200 kernels of 100 us: the calling thread slept %d times; an event's synchronize took %d ms", sleeps, eventMs)
	if sleeps > 5 {
		t.Errorf("the calling thread slept %d times in one synchronize behind 200 kernels, want at most 5 (woken once)", sleeps)
	}
	if eventMs >= 400 {
		t.Errorf("the event's synchronize took %d ms: it waited for the 500 ms kernel queued after the record", eventMs)
	}
}
