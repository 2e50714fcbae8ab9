package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/benchtable"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// matrixSteps are the fault steps of the matrix: the first collective, the
// second, a few steps in, and well into training.
var matrixSteps = []int{0, 1, 3, 30}

// matrixRuns is how many times each cell runs: once, so that make test
// stays within its time on 2 cores (docs/testing.md); BenchmarkFaultMatrix
// runs each twice (benchMatrixRuns), and XPU_TIMER_MATRIX_RUNS sets it for
// both, for longer soaks.
func matrixRuns() int { return runsFrom("XPU_TIMER_MATRIX_RUNS", 1) }

// caseRuns is how many times each case of the late-attach and stack-wait
// tests runs: twice, so that make test stays within its time
// (XPU_TIMER_E2E_RUNS sets it, for rates over more runs).
func caseRuns() int { return runsFrom("XPU_TIMER_E2E_RUNS", 2) }

// runsFrom reads a count of runs from the environment variable env, else
// def.
func runsFrom(env string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
		return n
	}
	return def
}

// hostFaults are the faults that leave the faulty rank stuck on the host.
var hostFaults = []string{testbed.FaultPythonSleep, testbed.FaultDeadlock, testbed.FaultDataloader, testbed.FaultDataloaderWorker}

// outcome is one run of one cell.
type outcome struct {
	Detected bool
	Latency  float64 // worst decision age past the timeout, seconds
	Attach   float64 // seconds from the first rank's start line to the runtime's "attached" line; -1 when either is missing
	Why      string  // what failed
}

// cell is one fault kind of one vendor at one fault step.
type cell struct {
	Vendor, Fault string
	Step          int
}

// cellRuns is a cell with its runs, as TestFaultMatrix writes them to
// XPU_TIMER_MATRIX_OUT for BenchmarkFaultMatrix.
type cellRuns struct {
	cell
	Runs []outcome
}

// matrixCells are the cells of the matrix; XPU_TIMER_MATRIX_CELLS, a
// regular expression matched against "vendor/fault/stepN", picks some.
func matrixCells(t testing.TB) []cell {
	var pick *regexp.Regexp
	if expr := os.Getenv("XPU_TIMER_MATRIX_CELLS"); expr != "" {
		var err error
		if pick, err = regexp.Compile(expr); err != nil {
			t.Fatalf("XPU_TIMER_MATRIX_CELLS: %v", err)
		}
	}
	var cells []cell
	for _, v := range []string{"cuda", "maca"} {
		for _, f := range testbed.Faults {
			if v == "maca" && slices.Contains(testbed.DriverFaults, f) {
				continue // no driver path on the MACA testbed
			}
			for _, s := range matrixSteps {
				if pick == nil || pick.MatchString(fmt.Sprintf("%s/%s/step%d", v, f, s)) {
					cells = append(cells, cell{v, f, s})
				}
			}
		}
	}
	if len(cells) == 0 {
		t.Fatalf("XPU_TIMER_MATRIX_CELLS=%s picks no cell", pick)
	}
	return cells
}

// TestFaultMatrix runs every testbed fault, on CUDA and on MACA (the
// driver's own faults on CUDA only), at fault steps 0, 1, 3 and 30,
// matrixRuns times each, under xpu_timer_launch on the default path (no
// library named, the testbed's waits spinning as CUDA's do): every run
// must decide every rank within the timeout plus the check period, dump
// every rank with stacks, and the viewer must name the faulty rank; a
// Triton kernel that never ends must be named in its rank's hang line.
// Two jobs run at a time. It logs a table of detection rates and
// latencies.
func TestFaultMatrix(t *testing.T) {
	privileged.Root(t)
	if testing.Short() {
		t.Skip("the fault matrix is long: run without -short")
	}
	b := testbed.Build(t)
	runs := matrixRuns()
	cells := matrixCells(t)
	noise := matrixNoise(t)
	var mu sync.Mutex
	results := map[cell][]outcome{}
	t.Run("runs", func(t *testing.T) {
		for i, c := range cells {
			for run := range runs {
				step := c.Step
				j := job{vendor: c.Vendor, fault: c.Fault, rank: (i + run) % nproc, at: &step, steps: step + 30}
				t.Run(fmt.Sprintf("%s/%s/step%d/run%d", c.Vendor, c.Fault, c.Step, run), func(t *testing.T) {
					t.Parallel()
					o := matrixRun(t, b, j)
					if !o.Detected {
						t.Errorf("rank %d's %s at step %d: %s", j.rank, j.fault, step, o.Why)
					}
					mu.Lock()
					results[c] = append(results[c], o)
					mu.Unlock()
				})
			}
		}
	})
	var all []cellRuns
	for _, c := range cells {
		all = append(all, cellRuns{c, results[c]})
	}
	t.Logf("fault matrix on the default path %s:\n%s", noise, matrixTable(all))
	if out := os.Getenv("XPU_TIMER_MATRIX_OUT"); out != "" {
		data, err := json.Marshal(all)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// matrixTable prints a table of detection rates and latencies.
func matrixTable(all []cellRuns) string {
	var table strings.Builder
	fmt.Fprintf(&table, "latency: decision age past the %v timeout, worst rank of a run; attach: a rank started -> runtime attached for it (upper bound)\n", timeout)
	fmt.Fprintf(&table, "%-5s %-16s %5s %9s %12s %11s %11s %11s\n", "", "fault", "step", "detected", "latency med", "latency max", "attach med", "attach max")
	for _, c := range all {
		n := 0
		var lat, att []float64
		for _, o := range c.Runs {
			if o.Detected {
				n++
				lat = append(lat, o.Latency)
			}
			if o.Attach >= 0 {
				att = append(att, o.Attach)
			}
		}
		fmt.Fprintf(&table, "%-5s %-16s %5d %4d of %-2d %11s %11s %11s %11s\n", c.Vendor, c.Fault, c.Step, n, len(c.Runs),
			seconds(benchtable.Quantile(lat, 0.5)), seconds(maxOf(lat)), seconds(benchtable.Quantile(att, 0.5)), seconds(maxOf(att)))
	}
	return table.String()
}

// matrixRun runs one faulty job and says whether it was detected as a
// user needs it: a decision on every rank within the timeout plus the
// check period (the faulty rank's of the right kind), every rank dumped
// with its main thread's stacks, and the viewer naming the faulty rank.
func matrixRun(t *testing.T, b *testbed.Bed, j job) outcome {
	dir := t.TempDir()
	p := launch(t, b, j, dir, timeout)
	defer p.kill()
	attach := attachSeconds(p)
	fail := func(format string, args ...any) outcome {
		return outcome{Attach: attach, Why: fmt.Sprintf(format, args...) + "\n" + tail(p.output(), 40)}
	}
	// The budget runs from the step before the fault: a job that reaches
	// a late step slowly on a loaded machine is no failure of the monitor.
	if at := *j.at; at > 0 {
		for begin := time.Now(); len(p.stepDone(at-1)) < nproc; time.Sleep(50 * time.Millisecond) {
			if time.Since(begin) > 3*time.Minute || p.exited() {
				return fail("ranks %v only finished step %d", slices.Sorted(maps.Keys(p.stepDone(at-1))), at-1)
			}
		}
	}
	deadline := time.Now().Add(45 * time.Second)
	for !dumpedAll(p) {
		if time.Now().After(deadline) || p.exited() {
			return fail("no dump of all %d ranks", nproc)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for len(decidedRanks(p)) < nproc {
		if time.Now().After(deadline.Add(2 * slack)) {
			return fail("decisions on ranks %v only", decidedRanks(p))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The faulty rank of a host fault is "host" (it owes a collective
	// its peers wait in) or "stalled" (its main thread waits in place);
	// any other fault leaves it on the GPU.
	wantKinds := []string{"gpu"}
	switch {
	case slices.Contains(hostFaults, j.fault):
		wantKinds = []string{"host", "stalled"}
	}
	// A gpu or stalled decision's age runs from the start of the wait: it
	// must be past the timeout by no more than the check period and the
	// slack. A host decision's age runs from the rank's last GPU call,
	// which may be long before the fault (at step 0, its setup): it must
	// come with its peers' decisions, within the slack.
	var worst float64
	var firstPeer time.Time
	seen := map[int]bool{}
	var hosts []hangLine
	for _, h := range hangLines(p) {
		if seen[h.rank] {
			continue
		}
		seen[h.rank] = true
		if h.rank == j.rank && !slices.Contains(wantKinds, h.kind) {
			return fail("faulty rank %d decided %s, want %v", j.rank, h.kind, wantKinds)
		}
		if want := kernelOf[j.fault]; h.rank == j.rank && h.kind == "gpu" && want != "" && !strings.Contains(h.text, want) {
			return fail("faulty rank %d's hang line does not name the kernel %s: %s", j.rank, want, h.text)
		}
		if want := blockedCall[j.fault]; h.rank == j.rank && want != "" && !callRe(j.fault).MatchString(h.text) {
			return fail("faulty rank %d's hang line does not name the call %s: %s", j.rank, want, h.text)
		}
		if h.kind == "host" {
			hosts = append(hosts, h)
			continue
		}
		if firstPeer.IsZero() || h.at.Before(firstPeer) {
			firstPeer = h.at
		}
		past := h.ageSeconds - timeout.Seconds()
		worst = max(worst, past)
		if past < 0 || past > slack.Seconds() {
			return fail("rank %d decided %.2fs past the timeout, want within %v", h.rank, past, slack)
		}
	}
	for _, h := range hosts {
		if late := h.at.Sub(firstPeer); firstPeer.IsZero() || late > slack {
			return fail("rank %d decided host %v after its peers' first decision, want within %v", h.rank, late, slack)
		}
	}
	// A rank dumped as a peer and decided later has its dump rewritten
	// with its decision just after its hang line: the viewer reads them
	// once every dump carries its rank's decision.
	var files [nproc]*dumpfile.File
	for r := range nproc {
		for {
			f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(r, nproc)))
			if err != nil {
				return fail("rank %d: %v", r, err)
			}
			if f.Hang != nil {
				files[r] = f
				break
			}
			if time.Now().After(deadline.Add(2 * slack)) {
				return fail("rank %d was decided, but its dump does not carry its decision", r)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for r, f := range files {
		if i := slices.IndexFunc(f.Threads, func(th stack.Thread) bool { return th.TID == f.PID }); i < 0 {
			return fail("rank %d: no main thread %d in its dump; errors %v", r, f.PID, f.Errors)
		} else if th := f.Threads[i]; len(th.Native) == 0 || len(th.Python) == 0 {
			return fail("rank %d: main thread %d (state %s) has %d native and %d Python frames, want both; its error %q; errors %v",
				r, f.PID, th.State, len(th.Native), len(th.Python), th.Error, f.Errors)
		}
	}
	summary := runViewer(t, dir)
	if r := unknownComm(summary); r >= 0 {
		return fail("rank %d's communicator is known only by its handle: its ncclCommInitRank was not seen:\n%s", r, summary)
	}
	if indistinct(j.vendor, j.fault) {
		if !strings.Contains(summary, noCulprit) {
			return fail("the viewer names a rank where no evidence tells the faulty one apart, want %q:\n%s", noCulprit, summary)
		}
	} else if want := fmt.Sprintf("Likely culprit: rank %d\n", j.rank); !strings.Contains(summary, want) {
		return fail("the viewer does not say %q:\n%s", strings.TrimSpace(want), summary)
	}
	return outcome{Detected: true, Latency: worst, Attach: attachSeconds(p)}
}

// kernelOf is the kernel a fault's hang line must name (as the oldest op
// not known complete, beside the collective it holds back): the one that
// never ends, the first launch of its step, after a synchronize.
var kernelOf = map[string]string{testbed.FaultTritonHang: "triton_poi_fused_add_0",
	testbed.FaultQueueFull: blockedKernel, testbed.FaultLaunchBlocking: blockedKernel, testbed.FaultFreeSync: blockedKernel}

// attachedRe is the launcher's line for a runtime library it probed.
var attachedRe = regexp.MustCompile(`msg=attached .*\bpid=(\d+) library=\S*/lib(?:cudart|mcruntime)\.so`)

// attachSeconds is how long after a rank said it started (just before it
// loads the libraries) the launcher logged the runtime library attached
// for it, both lines stamped here as they arrived: an upper bound of the
// attach latency (it holds the rank's dlopen and both pipes); -1 when a
// line is missing.
func attachSeconds(p *proc) float64 {
	attached := p.matching(attachedRe)
	if len(attached) == 0 {
		return -1
	}
	pid, _ := strconv.Atoi(attachedRe.FindStringSubmatch(attached[0].Text)[1])
	for _, l := range p.Lines(0) {
		if _, started, ok := testbed.Started(l.Text); ok && started == pid {
			return max(0, attached[0].At.Sub(l.At).Seconds())
		}
	}
	return -1
}

// dumpedAll says whether the launcher logged the dumps of every rank.
func dumpedAll(p *proc) bool {
	for _, l := range p.matching(dumpedRe) {
		m := dumpedRe.FindStringSubmatch(l.Text)
		if m[1] == strconv.Itoa(nproc) && m[2] == strconv.Itoa(nproc) {
			return true
		}
	}
	return false
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
