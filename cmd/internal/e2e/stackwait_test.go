package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/spinwait"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// stackTimeout is the hang timeout of the stack-wait tests: 10 s, so that
// the sample period (a fifth of it, at least 5 s) lets a wait be confirmed
// just past the timeout.
const stackTimeout = 10 * time.Second

var (
	readyRe    = regexp.MustCompile(`^ready (\d+)$`)
	hangLineRe = regexp.MustCompile(`"event":"hang"`)
)

// stackWatch runs `xpu-timer watch --timeout 10s --exit-on-hang --
// spinwait ARGS...` with env, and returns the first hang line, how long
// after watch announced the hung rank (its "rank" line: watch knows it
// from then on, as after a late attach; the wait began up to a check
// before) it came, and the ready pids, which ready (when not nil) is
// given as soon as they are known.
func stackWatch(t *testing.T, ranks int, args []string, ready func(pids []int), env ...string) (agent.Report, time.Duration, []int, *proc) {
	t.Helper()
	p := spinwait.Build(t)
	w := start(t, append([]string{bins.xpu, "watch", "--timeout", stackTimeout.String(), "--exit-on-hang", "--", p.Bin}, args...),
		append(env, p.Env())...)
	pids := readyPIDs(t, w, ranks)
	if ready != nil {
		ready(pids)
	}
	l := w.wait("a hang line", stackTimeout+20*time.Second, func(l testutil.Line) bool {
		return !l.Stderr && hangLineRe.MatchString(l.Text)
	})
	var r agent.Report
	if err := json.Unmarshal([]byte(l.Text), &r); err != nil {
		t.Fatal(err)
	}
	for _, rl := range w.matching(regexp.MustCompile(fmt.Sprintf(`"event":"rank",.*"pid":%d,`, r.PID))) {
		return r, l.At.Sub(rl.At), pids, w
	}
	t.Fatalf("no rank line for pid %d:\n%s", r.PID, w.output())
	return r, 0, pids, w
}

// TestStackWaitLoneRank: one rank alone (world size 1) spinning in the
// driver's cuCtxSynchronize_v2 behind a kernel that never ends is decided
// gpu within the timeout + 2 s, the wait named. (The driver is
// internal/spinwait's emulation: no kernel exists; what is real is the
// thread spinning in state R, its stack, the sampling and the decision.)
func TestStackWaitLoneRank(t *testing.T) {
	privileged.Root(t)
	for run := 0; run < caseRuns(); run++ {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			r, after, pids, w := stackWatch(t, 1, []string{"job", "1", "0"}, nil)
			t.Logf("run %d: decided %v after the rank was known, past the %v timeout by %v%s", run, after.Round(10*time.Millisecond), stackTimeout, (after - stackTimeout).Round(10*time.Millisecond), samples(r))
			if r.PID != pids[0] || r.Kind != "gpu" || r.StackWait == nil || r.StackWait.TID != pids[0] ||
				r.StackWait.Call != "cuCtxSynchronize_v2" || r.StackWait.From != "wait_device" || r.StackWait.State != "R" {
				b, _ := json.Marshal(r)
				t.Errorf("hang line %s", b)
			}
			if after > stackTimeout+2*time.Second {
				t.Errorf("decided %v after the rank was known, past the timeout + 2 s", after)
			}
			if code := w.waitExit(30 * time.Second); code != 3 {
				t.Errorf("watch exited %d, want 3", code)
			}
		})
	}
}

// TestStackWaitFourRanks: four ranks, rank 2 spins in cuCtxSynchronize_v2,
// the others sleep in a barrier that never opens (as ranks wait in gloo
// for the late one). Rank 2 is decided gpu on its stack within the
// timeout + 2 s, before any other rank is decided.
func TestStackWaitFourRanks(t *testing.T) {
	privileged.Root(t)
	for run := 0; run < caseRuns(); run++ {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			// Rank 2's pid, read from the environments before the decision
			// (with --exit-on-hang, watch ends the job once it decides).
			rank2 := 0
			r, after, _, w := stackWatch(t, 4, []string{"job", "4", "2"}, func(pids []int) {
				for _, pid := range pids {
					env, err := procfs.Environ(pid)
					if err != nil {
						t.Fatal(err)
					}
					if env["RANK"] == "2" {
						rank2 = pid
					}
				}
			})
			t.Logf("run %d: rank %v decided %s %v after the rank was known%s", run, rankOf(r), r.Kind, after.Round(10*time.Millisecond), samples(r))
			if r.PID != rank2 || r.Kind != "gpu" || r.StackWait == nil || r.StackWait.Call != "cuCtxSynchronize_v2" {
				b, _ := json.Marshal(r)
				t.Errorf("first hang line %s, want rank 2 (pid %d) gpu on its stack", b, rank2)
			}
			if after > stackTimeout+2*time.Second {
				t.Errorf("decided %v after the rank was known, past the timeout + 2 s", after)
			}
			w.waitExit(30 * time.Second)
		})
	}
}

// TestStackWaitHealthySteps: a lone rank whose every step synchronizes for
// 7 s of the 10 s timeout, spinning, at one place (the runtime's
// cudaDeviceSynchronize, whose returns the probes see), is sampled in the
// wait and never decided.
func TestStackWaitHealthySteps(t *testing.T) {
	privileged.Root(t)
	p := spinwait.Build(t)
	w := start(t, []string{bins.xpu, "watch", "--timeout", stackTimeout.String(), "--exit-on-hang", "--",
		"sh", "-c", "sleep 1; exec " + p.Bin + " steps 7000"}, p.Env(), "RANK=0", "WORLD_SIZE=1")
	readyPIDs(t, w, 1)
	w.waitRe(regexp.MustCompile(`"event":"rank"`), 20*time.Second) // a rank, so sampled: else this proves nothing
	// CUDA is probed in the driver
	w.waitRe(regexp.MustCompile(`"event":"attach".*"library":"[^"]*libcuda\.so`), 20*time.Second)
	time.Sleep(3 * stackTimeout)
	for _, l := range w.stdout() {
		if hangLineRe.MatchString(l) {
			t.Fatalf("false alarm: %s", l)
		}
	}
	if w.exited() {
		t.Fatalf("watch ended:\n%s", w.output())
	}
}

// readyPIDs waits for n "ready PID" lines of a spinwait job.
func readyPIDs(t *testing.T, job *proc, n int) []int {
	t.Helper()
	var pids []int
	job.until(fmt.Sprintf("%d ready lines", n), 20*time.Second, func() bool {
		pids = pids[:0]
		for _, l := range job.matching(readyRe) {
			pid, _ := strconv.Atoi(readyRe.FindStringSubmatch(l.Text)[1])
			pids = append(pids, pid)
		}
		return len(pids) >= n
	})
	return pids
}

// samples says how far apart the samples that decided were: just past the
// timeout when the sample due then read the waiting thread, a period more
// when it could not (not stopped in time on a loaded machine).
func samples(r agent.Report) string {
	if r.StackWait == nil {
		return ""
	}
	return fmt.Sprintf(" (the confirming sample %v after the first that saw the wait)", time.Duration(r.StackWait.Seen-r.StackWait.Since).Round(10*time.Millisecond))
}

func rankOf(r agent.Report) any {
	if r.Rank == nil {
		return "?"
	}
	return *r.Rank
}

// TestStackWaitRealPyTorch: a real PyTorch process (CPU) whose worker
// thread spins in the emulated driver's cuCtxSynchronize_v2 (called
// through ctypes, testdata/torch_gpuwait.py) while its main thread waits
// in join(): the rank is decided gpu on the worker thread's stack, its
// Python frames named. This proves the sampling of every thread of a
// torch process (its 120 MB libtorch, its interpreter) and the Python
// frames of a thread that is not the main one; the wait itself is
// emulated (no GPU, no CUDA runtime: the caller is ctypes, not c10).
func TestStackWaitRealPyTorch(t *testing.T) {
	privileged.Root(t)
	requireTorch(t)
	p := spinwait.Build(t)
	for run := 0; run < caseRuns(); run++ {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			w := start(t, []string{bins.xpu, "watch", "--timeout", stackTimeout.String(), "--exit-on-hang", "--",
				"sh", "-c", "sleep 1; exec " + torchPython + " testdata/torch_gpuwait.py"},
				p.Env(), "RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1", "LOCAL_WORLD_SIZE=1")
			pid := readyPIDs(t, w, 1)[0]
			l := w.wait("a hang line", stackTimeout+30*time.Second, func(l testutil.Line) bool {
				return !l.Stderr && hangLineRe.MatchString(l.Text)
			})
			var r agent.Report
			if err := json.Unmarshal([]byte(l.Text), &r); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(r.StackWait)
			t.Logf("run %d: %s", run, b)
			if r.PID != pid || r.Kind != "gpu" || r.StackWait == nil || r.StackWait.TID == pid ||
				r.StackWait.Call != "cuCtxSynchronize_v2" || !regexp.MustCompile(`^synchronize@\S*torch_gpuwait\.py:\d+;run@\S*threading\.py`).MatchString(r.StackWait.Python) {
				t.Errorf("hang line %s: want pid %d gpu, the sync thread in cuCtxSynchronize_v2 from synchronize()", l.Text, pid)
			}
			w.waitExit(30 * time.Second)
		})
	}
}
