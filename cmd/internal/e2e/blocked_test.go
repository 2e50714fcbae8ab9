package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/benchtable"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// blockedRuns is how many times each cell of TestBlockedCalls runs: once,
// so that make test stays within its time (XPU_TIMER_MATRIX_RUNS
// overrides it, as for the fault matrix).
func blockedRuns() int { return runsFrom("XPU_TIMER_MATRIX_RUNS", 1) }

// blockedStep is the step at which a blocked call's fault strikes (and,
// attached to the running job, the first at which it may).
const blockedStep = 2

// blockedCall is the call a fault leaves the faulty rank's main thread
// in, as the hang names it: the testbed's launches go through the
// runtime's cudaLaunchKernel, whose frame names them (the driver's entry
// stub leaves none), and a free is the driver's cuMemFree_v2.
var blockedCall = map[string]string{
	testbed.FaultQueueFull:      "cudaLaunchKernel",
	testbed.FaultLaunchBlocking: "cudaLaunchKernel",
	testbed.FaultFreeSync:       "cuMemFree_v2",
}

// blockedKernel is the kernel that holds them all: torch.cuda._sleep's.
const blockedKernel = "spin_kernel"

// blockedCell is one fault, on 4 ranks or a lone process without RANK,
// followed by xpu_timer_launch ("launcher"), by `watch --pid` attached
// to the running job before the fault ("watch"), or attached after the
// hang ("late").
type blockedCell struct {
	Fault, Topo, How string
}

func (c blockedCell) String() string { return c.Fault + "/" + c.Topo + "/" + c.How }

// TestBlockedCalls (issue 39): a thread blocked inside a call that is no
// wait of its own, behind a kernel that never ends (spin_kernel), is a
// GPU wait: a launch past a full queue, a launch under
// CUDA_LAUNCH_BLOCKING=1, a cudaFree. Each on 4 ranks (rank 2 faulty)
// and on a lone process with no RANK in its environment; each followed
// by xpu_timer_launch and by `xpu-timer watch --pid` attached to the
// running job before the fault (3 s timeout: the faulty rank decided gpu
// within the timeout + 2 s, age counted from spin_kernel's launch, the
// call and the kernel named; on 4 ranks every rank decided and, under
// the launcher, the viewer names rank 2), and attached after the hang
// (10 s timeout, a rank sampled at most every 5 s: decided gpu within
// the timeout + 2 s of the attach on its stack, the call named; no
// probe saw the kernel: under CUDA_LAUNCH_BLOCKING its launch's stub
// frame names it). blockedRuns runs of each; a table of rates and
// latencies is logged.
func TestBlockedCalls(t *testing.T) {
	privileged.Root(t)
	if testing.Short() {
		t.Skip("the blocked calls' cells are long: run without -short")
	}
	b := testbed.Build(t)
	runs := blockedRuns()
	var mu sync.Mutex
	results := map[blockedCell][]outcome{}
	var cells []blockedCell
	for _, f := range testbed.CallFaults {
		for _, topo := range []string{"ranks4", "lone"} {
			for _, how := range []string{"launcher", "watch", "late"} {
				cells = append(cells, blockedCell{f, topo, how})
			}
		}
	}
	t.Run("runs", func(t *testing.T) {
		for _, c := range cells {
			for run := range runs {
				t.Run(fmt.Sprintf("%s/run%d", c, run), func(t *testing.T) {
					t.Parallel()
					o := blockedRun(t, b, c)
					if !o.Detected {
						t.Errorf("%s: %s", c, o.Why)
					}
					mu.Lock()
					results[c] = append(results[c], o)
					mu.Unlock()
				})
			}
		}
	})
	var table strings.Builder
	fmt.Fprintf(&table, "latency: decision age past the timeout (launcher, watch: 3 s, age from spin_kernel's launch), or decision past the attach minus the timeout (late: 10 s)\n")
	fmt.Fprintf(&table, "%-36s %9s %12s %11s\n", "cell", "detected", "latency med", "latency max")
	for _, c := range cells {
		n := 0
		var lat []float64
		for _, o := range results[c] {
			if o.Detected {
				n++
				lat = append(lat, o.Latency)
			}
		}
		fmt.Fprintf(&table, "%-36s %4d of %-2d %11s %11s\n", c, n, len(results[c]), seconds(benchtable.Quantile(lat, 0.5)), seconds(maxOf(lat)))
	}
	t.Logf("blocked calls %s:\n%s", matrixNoise(t), table.String())
}

// blockedJob is the job of a cell: run.py with the fault at blockedStep
// on rank 2 of 4, or on a lone process, its steps enough to keep it
// training until the fault.
func blockedJob(c blockedCell) job {
	at := blockedStep
	// A queue of 64: its launches fill it at once on a loaded machine, as
	// 1,000 do on a GPU (a decision's age counts from spin_kernel's
	// launch, before them).
	j := job{fault: c.Fault, rank: 2, at: &at, steps: 1000, extra: []string{"--step-ms", "5", "--queue-depth", "64"}}
	if c.Topo == "lone" {
		j.rank = 0
		j.extra = append(j.extra, "--lone")
	}
	return j
}

// blockedRun runs one cell once.
func blockedRun(t *testing.T, b *testbed.Bed, c blockedCell) outcome {
	switch c.How {
	case "launcher":
		return blockedLaunched(t, b, c)
	case "watch":
		return blockedWatched(t, b, c)
	default:
		return blockedLate(t, b, c)
	}
}

// blockedLaunched: under xpu_timer_launch. On 4 ranks the fault matrix's
// run checks everything (every rank decided within the slack, dumps, the
// viewer naming rank 2, the kernel in the faulty rank's hang line), and
// the call is checked here; on a lone process the hang line and its dump.
func blockedLaunched(t *testing.T, b *testbed.Bed, c blockedCell) outcome {
	j := blockedJob(c)
	if c.Topo == "ranks4" {
		return matrixRun(t, b, j) // the call too (blockedCall)
	}
	dir := t.TempDir()
	p := launch(t, b, j, dir, timeout)
	defer p.kill()
	fail := func(format string, args ...any) outcome {
		return outcome{Why: fmt.Sprintf(format, args...) + "\n" + tail(p.output(), 40)}
	}
	if err := p.Until(60*time.Second, func() bool { return len(hangLines(p)) > 0 }); err != nil {
		return fail("no decision: %v", err)
	}
	h := hangLines(p)[0]
	if why := blockedLine(c, h); why != "" {
		return fail("%s", why)
	}
	// The dump of the lone process (rank 0 of 1) carries the decision.
	var f *dumpfile.File
	if err := p.Until(15*time.Second, func() bool {
		var err error
		f, err = dumpfile.Read(filepath.Join(dir, dumpfile.Name(0, 1)))
		return err == nil && f.Hang != nil
	}); err != nil {
		return fail("no dump with the decision: %v", err)
	}
	if w := f.Hang.Waiters; len(w) == 0 || w[0].Call != blockedCall[c.Fault] {
		return fail("dump's waiters %+v, want one in %s", w, blockedCall[c.Fault])
	}
	return outcome{Detected: true, Latency: h.ageSeconds - timeout.Seconds(), Attach: -1}
}

// blockedLine checks a launcher's hang line of the faulty rank: gpu,
// decided within the slack past the timeout, the call and the kernel
// named; "" when it holds.
func blockedLine(c blockedCell, h hangLine) string {
	switch {
	case h.kind != "gpu":
		return fmt.Sprintf("decided %s, want gpu: %s", h.kind, h.text)
	case h.ageSeconds < timeout.Seconds() || h.ageSeconds > (timeout+slack).Seconds():
		return fmt.Sprintf("decided at age %.2fs, want within %v past the %v timeout: %s", h.ageSeconds, slack, timeout, h.text)
	case !callRe(c.Fault).MatchString(h.text):
		return fmt.Sprintf("the hang line does not name the call %s: %s", blockedCall[c.Fault], h.text)
	case !strings.Contains(h.text, blockedKernel):
		return fmt.Sprintf("the hang line does not name the kernel %s: %s", blockedKernel, h.text)
	}
	return ""
}

// callRe matches a hang line naming the call a fault leaves its thread in.
func callRe(fault string) *regexp.Regexp {
	return regexp.MustCompile(` call=` + regexp.QuoteMeta(blockedCall[fault]) + `( |$)`)
}

// watchHangs reads watch's hang reports so far.
func watchHangs(p *proc) []agent.Report {
	var out []agent.Report
	for _, l := range p.stdout() {
		var r agent.Report
		if json.Unmarshal([]byte(l), &r) == nil && r.Event == agent.EventHang {
			out = append(out, r)
		}
	}
	return out
}

// blockedWatched: `watch --pid` attached to the running job (the
// launcher of 4 ranks, or the lone process), the fault held back
// (XPU_FAKEGPU_FAULT_GATE) until watch announced every rank and its
// libraries were probed.
func blockedWatched(t *testing.T, b *testbed.Bed, c blockedCell) outcome {
	j := blockedJob(c)
	gate := filepath.Join(t.TempDir(), "gate")
	p := start(t, j.args(b), "XPU_FAKEGPU_FAULT_GATE="+gate)
	defer p.kill()
	n := nproc
	if c.Topo == "lone" {
		n = 1
	}
	if err := p.Until(60*time.Second, func() bool { return len(p.stepDone(blockedStep)) == n }); err != nil {
		return outcome{Why: fmt.Sprintf("the job never reached step %d: %v\n%s", blockedStep, err, tail(p.output(), 20))}
	}
	w := start(t, []string{bins.xpu, "watch", "--timeout", timeout.String(), "--pid", strconv.Itoa(p.cmd.Process.Pid)},
		"XPU_TIMER_LOG_LEVEL=debug")
	defer w.kill()
	fail := func(format string, args ...any) outcome {
		return outcome{Why: fmt.Sprintf(format, args...) + "\nwatch:\n" + tail(w.output(), 30) + "\njob:\n" + tail(p.output(), 10)}
	}
	// (a library is attached once, for every process that maps it; CUDA
	// is probed in the driver alone)
	driver := regexp.MustCompile(`"event":"attach".*"library":"[^"]*libcuda\.so`)
	if err := w.Until(30*time.Second, func() bool {
		return len(w.matching(watchRankRe)) >= n && len(w.matching(driver)) > 0
	}); err != nil {
		return fail("watch did not take the %d ranks and their libraries: %v", n, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	faulty, err := p.faultyPID(c, j)
	if err != nil {
		return fail("%v", err)
	}
	if err := w.Until(timeout+slack+20*time.Second, func() bool {
		got := map[int]bool{}
		for _, r := range watchHangs(w) {
			got[r.PID] = true
		}
		return got[faulty] && len(got) == n
	}); err != nil {
		return fail("decided %d of %d ranks (the faulty one: pid %d): %v", len(watchHangs(w)), n, faulty, err)
	}
	var worst float64
	for _, r := range watchHangs(w) {
		past := r.AgeSeconds - timeout.Seconds()
		worst = max(worst, past)
		if past < 0 || past > slack.Seconds() {
			return fail("pid %d decided at age %.2fs, want within %v past the timeout", r.PID, r.AgeSeconds, slack)
		}
		if r.PID != faulty {
			continue
		}
		if r.Kind != "gpu" || len(r.Waiters) == 0 || r.Waiters[0].Call != blockedCall[c.Fault] {
			return fail("faulty pid %d: %s, waiters %+v, want gpu in %s", r.PID, r.Kind, r.Waiters, blockedCall[c.Fault])
		}
		if r.OldestOp != blockedKernel && r.NewestOp != blockedKernel && r.Kernel != blockedKernel {
			return fail("faulty pid %d: ops %q to %q, want %s named", r.PID, r.OldestOp, r.NewestOp, blockedKernel)
		}
	}
	return outcome{Detected: true, Latency: worst, Attach: -1}
}

// blockedLate: `watch --pid` attached after the hang (a second after the
// faulty rank stopped making progress), 10 s timeout: the faulty rank's
// stack alone decides.
func blockedLate(t *testing.T, b *testbed.Bed, c blockedCell) outcome {
	j := blockedJob(c)
	p := start(t, j.args(b))
	defer p.kill()
	n := nproc
	if c.Topo == "lone" {
		n = 1
	}
	if err := p.Until(60*time.Second, func() bool { return len(p.stepDone(blockedStep-1)) == n }); err != nil {
		return outcome{Why: fmt.Sprintf("the job never reached step %d: %v\n%s", blockedStep-1, err, tail(p.output(), 20))}
	}
	time.Sleep(time.Second) // the fault strikes at the start of blockedStep: hung before the attach
	faulty, err := p.faultyPID(c, j)
	if err != nil {
		return outcome{Why: err.Error()}
	}
	began := time.Now()
	w := start(t, []string{bins.xpu, "watch", "--timeout", stackTimeout.String(), "--pid", strconv.Itoa(p.cmd.Process.Pid)},
		"XPU_TIMER_LOG_LEVEL=debug") // its samples, on stderr, for a failure's message
	defer w.kill()
	fail := func(format string, args ...any) outcome {
		return outcome{Why: fmt.Sprintf(format, args...) + "\nwatch:\n" + tail(w.output(), 40)}
	}
	var h agent.Report
	err = w.Until(stackTimeout+slack+5*time.Second, func() bool {
		for _, r := range watchHangs(w) {
			if r.PID == faulty {
				h = r
				return true
			}
		}
		return false
	})
	if err != nil {
		// what its stacks are now (the first sample may have caught the
		// thread elsewhere)
		out, _ := exec.Command(bins.xpu, "dump", "--pid", strconv.Itoa(faulty), "--native").CombinedOutput()
		return fail("the faulty pid %d not decided: %v\nits stacks now:\n%s", faulty, err, tail(string(out), 60))
	}
	var at time.Time
	for _, l := range w.Lines(0) {
		if strings.Contains(l.Text, `"event":"hang"`) && strings.Contains(l.Text, fmt.Sprintf(`"pid":%d,`, faulty)) {
			at = l.At
			break
		}
	}
	after := at.Sub(began)
	if after > stackTimeout+slack {
		return fail("decided %.1fs after the attach, want within %v", after.Seconds(), stackTimeout+slack)
	}
	sw := h.StackWait
	if h.Kind != "gpu" || sw == nil || sw.Call != blockedCall[c.Fault] {
		b, _ := json.Marshal(h)
		return fail("faulty pid %d: %s, want gpu on its stack in %s", faulty, b, blockedCall[c.Fault])
	}
	// A launch blocked on its own kernel: no probe saw it, its stub frame
	// names the kernel (the report's too).
	if c.Fault == "launch-blocking" && (!strings.Contains(sw.Kernel, blockedKernel) || h.Kernel != sw.Kernel) {
		b, _ := json.Marshal(h)
		return fail("faulty pid %d: %s, want the kernel %s named from the launch's stub", faulty, b, blockedKernel)
	}
	return outcome{Detected: true, Latency: after.Seconds() - stackTimeout.Seconds(), Attach: -1}
}

// faultyPID is the pid of a cell's faulty process: the lone process
// itself, or rank 2 (from the ranks' started lines).
func (p *proc) faultyPID(c blockedCell, j job) (int, error) {
	if c.Topo == "lone" {
		return p.cmd.Process.Pid, nil
	}
	pids := p.rankPIDs()
	if pid, ok := pids[j.rank]; ok {
		return pid, nil
	}
	return 0, fmt.Errorf("no pid of rank %d among %v", j.rank, slices.Sorted(maps.Keys(pids)))
}

// TestBlockedCallsNoFalseAlarm: long calls that end are no hang, a lone
// process under xpu_timer_launch with a 5 s timeout running to its end:
// kernels of 3 s each under CUDA_LAUNCH_BLOCKING=1, three steps in a row
// (every launch waits for its kernel); a launch-bound loop filling the
// queue behind a kernel of 3 s that then ends, three steps in a row; and
// a module compiled from PTX for 16 s with no GPU work outstanding, busy
// on the CPU inside the driver, its stack sampled inside the call (at
// least twice, more than the timeout apart: the stack alone would take
// it for a wait).
func TestBlockedCallsNoFalseAlarm(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	const hangTimeout = 5 * time.Second
	for _, c := range []struct {
		name string
		args []string
	}{
		{"slow-kernel", []string{"--busy", "slow-kernel", "--busy-s", "3", "--busy-steps", "3"}},
		{"burst", []string{"--busy", "burst", "--busy-s", "3", "--busy-steps", "3", "--queue-depth", "64"}},
		{"jit", []string{"--busy", "jit", "--busy-s", "16", "--busy-steps", "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			j := job{steps: 8, extra: append([]string{"--lone", "--step-ms", "5"}, c.args...)}
			p := launch(t, b, j, t.TempDir(), hangTimeout, "XPU_TIMER_LOG_LEVEL=debug")
			code := p.waitExit(90 * time.Second)
			if code != 0 {
				t.Fatalf("the job exited %d\n%s", code, tail(p.output(), 30))
			}
			if hs := hangLines(p); len(hs) > 0 {
				t.Fatalf("false alarm: %s", hs[0].text)
			}
			pids := p.rankPIDs()
			inside := p.matching(regexp.MustCompile(fmt.Sprintf(`msg="stack sample" .*pid=%d waits=1 `, pids[0])))
			t.Logf("%s: no decision; %d samples saw the rank's thread inside a GPU call", c.name, len(inside))
			if c.name == "jit" && len(inside) < 2 {
				t.Errorf("%d samples saw the thread inside cuModuleLoadData, want 2 at least (else this proves nothing)\n%s",
					len(inside), tail(p.output(), 30))
			}
		})
	}
}
